// Copyright kvserve authors. WindowedEncoder and WindowedDecoder
// (kvserve/cuda.h): a frame cut into windows of whole records (of one
// (layer, kind) for the encoder). Each window is a plan of its own (BuildPlan with a RecordWindow:
// its tables, workspace and byte offsets count from its first record), run
// from a slot that holds [workspace | plan tables | bytes]; the workspace's
// error block at the slot's start doubles as the slot's status block.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/context_internal.h"
#include "cuda/kernels.h"
#include "cuda/plan.h"

namespace kvserve::cuda {
namespace {

constexpr uint64_t kSlotAlign = 256;
constexpr uint64_t kTableAlign = 16;
// Where a slot's status block keeps the window's byte count: the running
// total of a rans encode (launch_args.cuh's RunningTotal), which the finish
// kernel also writes for pack windows.
constexpr uint64_t kSlotBytesWord = 32;
static_assert(offsetof(SlotStatus, bytes) == kSlotBytesWord);

uint64_t Align(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Runs of whole records in plan order holding at most `target` KV bytes
// each (at least one record): of one (layer, kind) each for an encoder
// (which encodes a layer once it is produced), across (layer, kind)
// boundaries for a decoder (fewer, larger windows: a 512-token chunk frame
// of a 32-layer model is 8 windows instead of 64 launches and copies).
std::vector<FrameWindow> CutWindows(const PlanBasis& b, uint64_t target, bool across_layers) {
  const uint64_t row = static_cast<uint64_t>(b.shape.kv_heads) * b.shape.head_dim * DTypeSize(b.dtype);
  std::vector<FrameWindow> out;
  for (int64_t r = 0; r < static_cast<int64_t>(b.slots.size()); ++r) {
    const pipeline::ChunkSlot& slot = b.slots[r];
    const uint64_t bytes = row * static_cast<uint64_t>(slot.tokens);
    const bool same = !out.empty() && out.back().layer == slot.layer && out.back().kind == static_cast<int>(slot.kind);
    if (!out.empty() && (same || across_layers) && out.back().kv_bytes + bytes <= target) {
      out.back().record_end = r + 1;
      out.back().kv_bytes += bytes;
      continue;
    }
    FrameWindow w;
    w.layer = slot.layer;
    w.kind = static_cast<int>(slot.kind);
    w.record_begin = r;
    w.record_end = r + 1;
    w.kv_bytes = bytes;
    out.push_back(w);
  }
  return out;
}

// Each layer's first window and, last, the window count (windows of one
// layer each, in layer order).
std::vector<int> FirstWindows(const std::vector<FrameWindow>& windows, int layers) {
  std::vector<int> first(static_cast<size_t>(layers) + 1, static_cast<int>(windows.size()));
  for (int w = static_cast<int>(windows.size()) - 1; w >= 0; --w) first[windows[w].layer] = w;
  for (int l = layers - 1; l >= 0; --l) first[l] = std::min(first[l], first[l + 1]);
  return first;
}

// The first token and the token count a window's records cover (the
// records of one (layer, kind) are a contiguous token range; a window
// across (layer, kind) covers the union of its runs' ranges).
std::pair<int, int> WindowTokens(const PlanBasis& b, const FrameWindow& w) {
  int begin = b.shape.tokens, end = 0;
  for (int64_t r = w.record_begin; r < w.record_end; ++r) {
    begin = std::min(begin, b.slots[r].token_begin);
    end = std::max(end, b.slots[r].token_begin + b.slots[r].tokens);
  }
  return {begin, end - begin};
}

// Block ids a paged view's table needs for `tokens` tokens starting
// anywhere (any block size >= 1).
int32_t MaxBlocks(int tokens) { return tokens + 1; }

// A window plan's tables, laid out for one copy into a slot: each table at
// a 16-byte aligned offset, then a paged view's tables.
struct TableLayout {
  uint64_t records = 0, runs = 0, segments = 0, tiles = 0, raw_spans = 0, raw_records = 0;
  uint64_t pack_jobs = 0, segment_order = 0, pages = 0, total = 0;
};

TableLayout LayoutTables(const Plan& p, uint64_t page_bytes) {
  TableLayout t;
  uint64_t at = 0;
  auto place = [&](uint64_t* field, uint64_t bytes) {
    *field = at;
    at = Align(at + bytes, kTableAlign);
  };
  place(&t.records, p.records.size() * sizeof(RecordDesc));
  place(&t.runs, p.runs.size() * sizeof(RunDesc));
  place(&t.segments, p.segments.size() * sizeof(SegmentDesc));
  place(&t.tiles, p.tiles.size() * sizeof(TileDesc));
  place(&t.raw_spans, p.raw_spans.size() * sizeof(RawSpan));
  place(&t.raw_records, p.raw_records.size() * sizeof(int32_t));
  place(&t.pack_jobs, p.pack_jobs.size() * sizeof(PackJob));
  place(&t.segment_order, p.segment_order.size() * sizeof(int32_t));
  place(&t.pages, page_bytes);
  t.total = at;
  return t;
}

template <typename T>
void Put(const std::vector<T>& v, uint8_t* host, uint64_t offset) {
  if (!v.empty()) std::memcpy(host + offset, v.data(), v.size() * sizeof(T));
}

void WriteTables(const Plan& p, const TableLayout& t, uint8_t* host) {
  Put(p.records, host, t.records);
  Put(p.runs, host, t.runs);
  Put(p.segments, host, t.segments);
  Put(p.tiles, host, t.tiles);
  Put(p.raw_spans, host, t.raw_spans);
  Put(p.raw_records, host, t.raw_records);
  Put(p.pack_jobs, host, t.pack_jobs);
  Put(p.segment_order, host, t.segment_order);
}

// The device tables of a window whose table copy lies at `base`.
DeviceTables TablesAt(const TableLayout& t, const uint8_t* base, const uint64_t* sign_words,
                      const uint8_t* header) {
  DeviceTables d;
  d.records = reinterpret_cast<const RecordDesc*>(base + t.records);
  d.runs = reinterpret_cast<const RunDesc*>(base + t.runs);
  d.segments = reinterpret_cast<const SegmentDesc*>(base + t.segments);
  d.tiles = reinterpret_cast<const TileDesc*>(base + t.tiles);
  d.raw_spans = reinterpret_cast<const RawSpan*>(base + t.raw_spans);
  d.raw_records = reinterpret_cast<const int32_t*>(base + t.raw_records);
  d.sign_words = sign_words;
  d.header = header;
  d.pack_jobs = reinterpret_cast<const PackJob*>(base + t.pack_jobs);
  d.segment_order = reinterpret_cast<const int32_t*>(base + t.segment_order);
  return d;
}

// What the windows of one frame share: the basis, the cut, the slot layout
// and the device copy of the per-frame tables (sign words, header).
class WindowSet {
 public:
  ~WindowSet() { cudaFree(shared_); }

  Status Init(PlanBasis basis, const WindowOptions& options, bool across_layers) {
    basis_ = std::move(basis);
    windows_ = CutWindows(basis_, std::max<uint64_t>(options.window_kv_bytes, 1), across_layers);
    if (!across_layers) first_ = FirstWindows(windows_, basis_.shape.layers);
    uint64_t ws = 0, tables = 0, io = 0;
    for (FrameWindow& w : windows_) {
      KVSERVE_ASSIGN_OR_RETURN(const Plan plan, BuildPlan(basis_, {w.record_begin, w.record_end}));
      w.max_bytes = plan.max_frame_bytes;
      ws = std::max(ws, plan.ws.total);
      tables = std::max(tables, LayoutTables(plan, PageBytes(w)).total);
      io = std::max(io, plan.max_frame_bytes);
    }
    tables_offset_ = Align(ws, kSlotAlign);
    io_offset_ = Align(tables_offset_ + tables, kSlotAlign);
    table_bytes_ = Align(tables, kSlotAlign);
    io_capacity_ = Align(io, kSlotAlign);
    slot_bytes_ = io_offset_ + io_capacity_;
    // The per-frame tables, once: sign words, then the header.
    const uint64_t sign_bytes = basis_.sign_words.size() * sizeof(uint64_t);
    const uint64_t bytes = Align(sign_bytes, kTableAlign) + basis_.header.size();
    std::vector<uint8_t> host(bytes);
    if (sign_bytes) std::memcpy(host.data(), basis_.sign_words.data(), sign_bytes);
    std::memcpy(host.data() + Align(sign_bytes, kTableAlign), basis_.header.data(), basis_.header.size());
    KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(&shared_), bytes),
                                       "cudaMalloc window tables"));
    KVSERVE_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy(shared_, host.data(), bytes, cudaMemcpyHostToDevice), "upload window tables"));
    sign_words_ = sign_bytes ? reinterpret_cast<const uint64_t*>(shared_) : nullptr;
    header_ = shared_ + Align(sign_bytes, kTableAlign);
    return Status::Ok();
  }

  // Builds window `w`'s plan, writes its tables to `host` (pinned) and
  // queues their copy into `slot`; returns the plan and the tables' device
  // layout. `paged`, when non-null, also stages that view's tables for the
  // window's tokens and sets `*view`.
  struct Staged {
    Plan plan;
    DeviceTables tables;
  };
  Result<Staged> Stage(int w, uint8_t* slot, uint8_t* host, const PagedKvView* paged, DeviceView* view,
                       Stream stream) const {
    if (w < 0 || w >= static_cast<int>(windows_.size()))
      return Status::InvalidArgument("window " + std::to_string(w) + " outside the frame's " +
                                     std::to_string(windows_.size()));
    if (slot == nullptr || reinterpret_cast<uintptr_t>(slot) % kSlotAlign != 0)
      return Status::InvalidArgument("a slot must be a non-null, 256-byte aligned device pointer");
    if (host == nullptr) return Status::InvalidArgument("window tables need host staging memory");
    const FrameWindow& fw = windows_[w];
    Staged s;
    KVSERVE_ASSIGN_OR_RETURN(s.plan, BuildPlan(basis_, {fw.record_begin, fw.record_end}));
    const TableLayout layout = LayoutTables(s.plan, PageBytes(fw));
    WriteTables(s.plan, layout, host);
    uint8_t* device_tables = slot + tables_offset_;
    if (paged != nullptr) {
      KVSERVE_RETURN_IF_ERROR(paged->Validate());
      if (!(paged->shape == basis_.shape) || paged->dtype != basis_.dtype)
        return Status::InvalidArgument("paged KV view shape/dtype differ from the frame's");
      const auto [first_token, tokens] = WindowTokens(basis_, fw);
      const int32_t b0 = first_token / paged->block_size;
      const int32_t b1 = (first_token + tokens - 1) / paged->block_size + 1;
      KVSERVE_ASSIGN_OR_RETURN(*view, PagedViewTables(*paged, b0, b1, host + layout.pages,
                                                      device_tables + layout.pages));
    }
    KVSERVE_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(device_tables, host, layout.total, cudaMemcpyHostToDevice, stream), "copy window tables"));
    s.tables = TablesAt(layout, device_tables, sign_words_, header_);
    return s;
  }

  const PlanBasis& basis() const { return basis_; }
  const std::vector<FrameWindow>& windows() const { return windows_; }
  int FirstWindow(int layer) const {
    return layer < 0 ? 0 : layer > basis_.shape.layers ? static_cast<int>(windows_.size()) : first_[layer];
  }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t table_bytes() const { return table_bytes_; }
  uint64_t io_offset() const { return io_offset_; }
  uint64_t io_capacity() const { return io_capacity_; }

 private:
  uint64_t PageBytes(const FrameWindow& w) const {
    return PagedTableBytes(basis_.shape.layers, MaxBlocks(WindowTokens(basis_, w).second));
  }

  PlanBasis basis_;
  std::vector<FrameWindow> windows_;
  std::vector<int> first_;
  uint64_t tables_offset_ = 0, io_offset_ = 0, table_bytes_ = 0, io_capacity_ = 0, slot_bytes_ = 0;
  uint8_t* shared_ = nullptr;
  const uint64_t* sign_words_ = nullptr;
  const uint8_t* header_ = nullptr;
};

class WindowedEncoderImpl final : public WindowedEncoder {
 public:
  Status Init(PlanBasis basis, const WindowOptions& options) {
    return set_.Init(std::move(basis), options, /*across_layers=*/false);
  }

  const std::vector<uint8_t>& header() const override { return set_.basis().header; }
  const std::vector<FrameWindow>& windows() const override { return set_.windows(); }
  int FirstWindow(int layer) const override { return set_.FirstWindow(layer); }
  uint64_t SlotBytes() const override { return set_.slot_bytes(); }
  uint64_t TableBytes() const override { return set_.table_bytes(); }
  uint64_t OutputOffset() const override { return set_.io_offset(); }
  bool FrameSizeIsStatic() const override { return set_.basis().profile.codec() == CodecType::kPack; }
  const Profile& profile() const override { return set_.basis().profile; }

  Status EncodeWindow(int w, const KvView& kv, uint8_t* slot, uint8_t* host_tables, Stream stream) override {
    const PlanBasis& b = set_.basis();
    if (kv.data == nullptr || !(kv.shape == b.shape) || kv.dtype != b.dtype)
      return Status::InvalidArgument("KV view shape/dtype differ from the frame's");
    KVSERVE_ASSIGN_OR_RETURN(auto staged, set_.Stage(w, slot, host_tables, nullptr, nullptr, stream));
    KVSERVE_RETURN_IF_ERROR(CheckView(kv.data, kv.dtype, kv.shape, kv.strides, staged.plan));
    return Run(staged, MakeDeviceView(kv.data, kv.dtype, kv.shape, kv.strides), slot, stream);
  }

  Status EncodeWindowPaged(int w, const PagedKvView& kv, uint8_t* slot, uint8_t* host_tables,
                           Stream stream) override {
    DeviceView view{};
    KVSERVE_ASSIGN_OR_RETURN(auto staged, set_.Stage(w, slot, host_tables, &kv, &view, stream));
    return Run(staged, view, slot, stream);
  }

 private:
  Status Run(const WindowSet::Staged& s, const DeviceView& view, uint8_t* slot, Stream stream) const {
    EncodeLaunch e;
    e.consts = s.plan.consts;
    e.tables = s.tables;
    e.layout = &s.plan.ws;
    e.workspace = slot;
    e.frame = slot + set_.io_offset();
    e.frame_capacity = s.plan.max_frame_bytes;
    e.header_bytes = 0;  // a window's bytes are records only
    e.direct = s.plan.direct;
    e.static_sizes = s.plan.static_sizes;
    e.pack_warps = s.plan.pack_warps;
    e.plan = &s.plan;
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeBegin(e, stream));
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeRange(e, view, WholePlan(s.plan), stream));
    return LaunchEncodeFinish(e, s.plan.static_frame_bytes, reinterpret_cast<uint64_t*>(slot + kSlotBytesWord),
                              stream);
  }

  WindowSet set_;
};

class WindowedDecoderImpl final : public WindowedDecoder {
 public:
  Status Init(PlanBasis basis, size_t header_bytes, const WindowOptions& options) {
    header_bytes_ = header_bytes;
    info_.version = pipeline::kFrameVersion;
    info_.dtype = basis.dtype;
    info_.shape = basis.shape;
    info_.profile = basis.profile;
    info_.chunk_count = basis.slots.size();
    return set_.Init(std::move(basis), options, /*across_layers=*/true);
  }

  uint64_t HeaderBytes() const override { return header_bytes_; }
  const FrameInfo& info() const override { return info_; }
  const std::vector<FrameWindow>& windows() const override { return set_.windows(); }
  uint64_t SlotBytes() const override { return set_.slot_bytes(); }
  uint64_t TableBytes() const override { return set_.table_bytes(); }
  uint64_t InputOffset() const override { return set_.io_offset(); }
  uint64_t InputCapacity() const override { return set_.io_capacity(); }

  Result<int> WindowOfRecord(std::span<const uint8_t> record) const override {
    pipeline::RecordHeader h;
    KVSERVE_RETURN_IF_ERROR(pipeline::ReadRecordHeader(record, &h));
    const PlanBasis& b = set_.basis();
    const bool in_shape = h.layer < static_cast<uint32_t>(b.shape.layers) && h.kind <= 1 &&
                          h.token_begin < static_cast<uint32_t>(b.shape.tokens);
    const int64_t index =
        in_shape ? pipeline::SlotIndex(b.shape, b.consts.chunk_tokens, b.coded_tokens, static_cast<int>(h.layer),
                                       static_cast<int>(h.kind), h.type, static_cast<int>(h.token_begin))
                 : -1;
    if (index < 0 || b.slots[index].tokens != static_cast<int>(h.tokens))
      return Status::Corruption("a record (layer " + std::to_string(h.layer) + ", token " +
                                std::to_string(h.token_begin) + ") names no record of the frame");
    const std::vector<FrameWindow>& w = set_.windows();
    auto it = std::upper_bound(w.begin(), w.end(), index,
                               [](int64_t i, const FrameWindow& fw) { return i < fw.record_begin; });
    return static_cast<int>(it - w.begin()) - 1;
  }

  Status DecodeWindow(int w, uint8_t* slot, uint64_t bytes, const MutableKvView& out, uint8_t* keep_mask,
                      uint8_t* host_tables, Stream stream) override {
    const PlanBasis& b = set_.basis();
    if (out.data == nullptr || !(out.shape == b.shape) || out.dtype != b.dtype)
      return Status::InvalidArgument("destination shape/dtype differ from the frame's");
    KVSERVE_ASSIGN_OR_RETURN(auto staged, set_.Stage(w, slot, host_tables, nullptr, nullptr, stream));
    KVSERVE_RETURN_IF_ERROR(CheckView(out.data, out.dtype, out.shape, out.strides, staged.plan));
    return Run(staged, MakeDeviceView(out.data, out.dtype, out.shape, out.strides), slot, bytes, keep_mask,
               stream);
  }

  Status DecodeWindowPaged(int w, uint8_t* slot, uint64_t bytes, const MutablePagedKvView& out,
                           uint8_t* keep_mask, uint8_t* host_tables, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(out.Validate());
    const PagedKvView view_in = out.AsConst();
    DeviceView view{};
    KVSERVE_ASSIGN_OR_RETURN(auto staged, set_.Stage(w, slot, host_tables, &view_in, &view, stream));
    return Run(staged, view, slot, bytes, keep_mask, stream);
  }

 private:
  Status Run(const WindowSet::Staged& s, const DeviceView& view, uint8_t* slot, uint64_t bytes,
             uint8_t* keep_mask, Stream stream) const {
    if (bytes > set_.io_capacity())
      return Status::Corruption("window records of " + std::to_string(bytes) + " bytes exceed the " +
                                std::to_string(set_.io_capacity()) + " the frame's plan allows");
    DecodeLaunch d;
    d.consts = s.plan.consts;
    d.tables = s.tables;
    d.layout = &s.plan.ws;
    d.workspace = slot;
    d.bytes = slot + set_.io_offset();
    d.bytes_len = bytes;
    d.records_start = 0;
    d.static_base = 0;
    d.range = WholePlan(s.plan);
    d.static_sizes = s.plan.static_sizes;
    d.pack_warps = s.plan.pack_warps;
    d.keep_mask = keep_mask;
    d.reset_errors = true;
    return LaunchDecode(d, view, stream);
  }

  WindowSet set_;
  size_t header_bytes_ = 0;
  FrameInfo info_;
};

}  // namespace

Status SlotStatusToStatus(const SlotStatus& status, const FrameWindow& window) {
  return DeviceErrorStatus(status.error, window.record_begin);
}

Result<std::unique_ptr<WindowedEncoder>> WindowedEncoder::Create(const Profile& profile, const KvShape& shape,
                                                                 DType dtype, const HeadScores* head_scores,
                                                                 WindowOptions options) {
  KVSERVE_RETURN_IF_ERROR(CheckSupported(profile, shape));
  if (!Available()) return Status::NotSupported("no CUDA device");
  KVSERVE_ASSIGN_OR_RETURN(const std::vector<uint8_t> state, EncoderState(profile, shape, head_scores));
  KVSERVE_ASSIGN_OR_RETURN(PlanBasis basis, BuildPlanBasis(profile, shape, dtype, state, /*for_decode=*/false));
  auto impl = std::make_unique<WindowedEncoderImpl>();
  KVSERVE_RETURN_IF_ERROR(impl->Init(std::move(basis), options));
  return std::unique_ptr<WindowedEncoder>(std::move(impl));
}

Result<std::unique_ptr<WindowedDecoder>> WindowedDecoder::Create(std::span<const uint8_t> header,
                                                                 WindowOptions options) {
  if (!Available()) return Status::NotSupported("no CUDA device");
  KVSERVE_ASSIGN_OR_RETURN(auto basis, DecodeBasis(header));
  auto impl = std::make_unique<WindowedDecoderImpl>();
  KVSERVE_RETURN_IF_ERROR(impl->Init(std::move(basis.first), basis.second, options));
  return std::unique_ptr<WindowedDecoder>(std::move(impl));
}

}  // namespace kvserve::cuda
