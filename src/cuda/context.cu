// Copyright kvserve authors. cuda::Encoder and cuda::Decoder: own the plan's
// device tables and the pinned frame header, check arguments, and launch the
// kernel sequences of encode.cu / decode.cu on the caller's stream.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/context_internal.h"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "cuda/rows.cuh"
#include "kvserve/cuda.h"
#include "pipeline/frame_format.h"
#include "pipeline/stages.h"

namespace kvserve::cuda {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // an allocation failure is not sticky: clear it
    return Status::ResourceExhausted(std::string(what) + ": out of device memory");
  }
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace {

template <typename T>
Status Upload(const std::vector<T>& v, T** out) {
  *out = nullptr;
  if (v.empty()) return Status::Ok();
  KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaMalloc(reinterpret_cast<void**>(out), v.size() * sizeof(T)),
                                     "cudaMalloc plan table"));
  return CudaStatus(cudaMemcpy(*out, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
                    "upload plan table");
}

// Owns the device copy of a plan's tables.
class PlanTables {
 public:
  ~PlanTables() {
    cudaFree(records_);
    cudaFree(runs_);
    cudaFree(segments_);
    cudaFree(tiles_);
    cudaFree(raw_spans_);
    cudaFree(raw_records_);
    cudaFree(sign_words_);
    cudaFree(header_);
    cudaFree(pack_jobs_);
    cudaFree(segment_order_);
  }
  Status Init(const Plan& plan) {
    KVSERVE_RETURN_IF_ERROR(Upload(plan.records, &records_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.runs, &runs_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.segments, &segments_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.tiles, &tiles_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.raw_spans, &raw_spans_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.raw_records, &raw_records_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.header, &header_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.pack_jobs, &pack_jobs_));
    KVSERVE_RETURN_IF_ERROR(Upload(plan.segment_order, &segment_order_));
    return Upload(plan.sign_words, &sign_words_);
  }
  DeviceTables tables() const {
    return DeviceTables{records_,     runs_,   segments_,  tiles_,         raw_spans_,
                        raw_records_, sign_words_, header_, pack_jobs_, segment_order_};
  }

 private:
  RecordDesc* records_ = nullptr;
  RunDesc* runs_ = nullptr;
  SegmentDesc* segments_ = nullptr;
  TileDesc* tiles_ = nullptr;
  RawSpan* raw_spans_ = nullptr;
  int32_t* raw_records_ = nullptr;
  uint64_t* sign_words_ = nullptr;
  uint8_t* header_ = nullptr;
  PackJob* pack_jobs_ = nullptr;
  int32_t* segment_order_ = nullptr;
};

}  // namespace

// A device view of `data` with `strides`; vec16 when every lane's 16
// elements are contiguous and 16-byte aligned (rows start 16-byte aligned).
DeviceView MakeDeviceView(const void* data, DType dtype, const KvShape& shape, const KvStrides& s) {
  DeviceView v{};
  v.data = static_cast<uint8_t*>(const_cast<void*>(data));
  v.layer = s.layer;
  v.kind = s.kind;
  v.head = s.head;
  v.token = s.token;
  v.dim = s.dim;
  v.dtype = static_cast<int>(dtype);
  v.elem_bytes = static_cast<int>(DTypeSize(dtype));
  const int64_t es = v.elem_bytes;
  auto aligned = [&](int64_t stride, int extent) { return extent == 1 || (stride * es) % 16 == 0; };
  v.vec16 = s.dim == 1 && reinterpret_cast<uintptr_t>(data) % 16 == 0 && aligned(s.layer, shape.layers) &&
            (s.kind * es) % 16 == 0 && aligned(s.head, shape.kv_heads) && aligned(s.token, shape.tokens);
  return v;
}

uint64_t PagedTableBytes(int layers, int32_t blocks) {
  return 16 * static_cast<uint64_t>(layers) + 4 * static_cast<uint64_t>(blocks);
}

Result<DeviceView> PagedViewTables(const PagedKvView& kv, int32_t block_begin, int32_t block_end,
                                   uint8_t* tables, const uint8_t* device_tables) {
  const KvShape& s = kv.shape;
  const int64_t es = static_cast<int64_t>(DTypeSize(kv.dtype));
  const auto origin = reinterpret_cast<intptr_t>(kv.key_pages[0]);
  bool aligned = true;
  for (int l = 0; l < s.layers; ++l)
    for (int kind = 0; kind < 2; ++kind) {
      const auto p = reinterpret_cast<intptr_t>(kind == 0 ? kv.key_pages[l] : kv.value_pages[l]);
      if (p % es != 0) return Status::InvalidArgument("paged KV view: page pointers must be aligned to the element size");
      aligned = aligned && p % 16 == 0;
      const int64_t base = (p - origin) / es;
      std::memcpy(tables + 8 * (2 * l + kind), &base, 8);
    }
  std::memcpy(tables + 16 * s.layers, kv.block_table + block_begin, 4 * static_cast<size_t>(block_end - block_begin));
  DeviceView v{};
  v.data = reinterpret_cast<uint8_t*>(origin);
  v.head = kv.strides.head;
  v.token = kv.strides.slot;
  v.dim = 1;
  v.block = kv.strides.block;
  v.block_size = kv.block_size;
  v.block_shift = (kv.block_size & (kv.block_size - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(kv.block_size)) : -1;
  v.page_base = reinterpret_cast<const int64_t*>(device_tables);
  // Indexed by the absolute block (token / block_size): entry block_begin
  // is the first one copied.
  v.block_table = reinterpret_cast<const int32_t*>(device_tables + 16 * s.layers) - block_begin;
  v.dtype = static_cast<int>(kv.dtype);
  v.elem_bytes = static_cast<int>(es);
  auto ok16 = [&](int64_t stride, int extent) { return extent <= 1 || (stride * es) % 16 == 0; };
  v.vec16 = aligned && ok16(kv.strides.block, kv.TableBlocks()) && ok16(kv.strides.slot, kv.block_size) &&
            ok16(kv.strides.head, s.kv_heads);
  return v;
}

// A device view of a paged cache (kvserve/paged.h). Its page pointers (as
// element offsets from layer 0's K pages) and block table are copied into
// the workspace's pages region, stream-ordered from host memory (the copy
// is staged by the driver before this returns, so the view's host arrays
// may change afterwards).
Result<DeviceView> PagedDeviceView(const PagedKvView& kv, const Plan& plan, void* workspace, Stream stream) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  if (!(kv.shape == plan.shape) || kv.dtype != plan.dtype)
    return Status::InvalidArgument("paged KV view shape/dtype differ from the plan's");
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kWsAlign != 0)
    return Status::InvalidArgument("workspace must be non-null and 256-byte aligned");
  const int32_t blocks = kv.TableBlocks();
  std::vector<uint8_t> tables(PagedTableBytes(kv.shape.layers, blocks));
  uint8_t* dst = static_cast<uint8_t*>(workspace) + plan.ws.pages;
  KVSERVE_ASSIGN_OR_RETURN(const DeviceView v, PagedViewTables(kv, 0, blocks, tables.data(), dst));
  KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, tables.data(), tables.size(), cudaMemcpyHostToDevice, stream),
                                     "copy the paged view's tables"));
  return v;
}

Status CheckView(const void* data, DType dtype, const KvShape& shape, const KvStrides& strides,
                 const Plan& plan) {
  if (data == nullptr) return Status::InvalidArgument("KV view has no data");
  if (!(shape == plan.shape) || dtype != plan.dtype)
    return Status::InvalidArgument("KV view shape/dtype differ from the plan's");
  if (strides.layer < 0 || strides.head < 0 || strides.token < 0 || strides.dim < 0)
    return Status::InvalidArgument("KV view strides must be non-negative (only the kind stride may be negative)");
  if (reinterpret_cast<uintptr_t>(data) % DTypeSize(dtype) != 0)
    return Status::InvalidArgument("KV view data must be aligned to its element size");
  return Status::Ok();
}

Result<ByteRange> StaticLayerRecordsOf(const Plan& plan, int layer) {
  if (layer < 0 || layer >= plan.shape.layers)
    return Status::InvalidArgument("layer " + std::to_string(layer) + " outside the plan's " +
                                   std::to_string(plan.shape.layers) + " layers");
  if (!plan.static_sizes) return Status::NotSupported("rans frames have no static record offsets");
  const PlanRange r = LayerOfPlan(plan, layer);
  if (r.record_end <= r.record_begin) return ByteRange{};
  const RecordDesc& first = plan.records[r.record_begin];
  const RecordDesc& last = plan.records[r.record_end - 1];
  return ByteRange{first.static_offset, last.static_offset + last.static_len - first.static_offset};
}

Status ReadDeviceError(void* workspace, const Plan& plan, Stream stream) {
  KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  uint32_t words[4] = {};
  uint8_t* err = static_cast<uint8_t*>(workspace) + plan.ws.error;
  KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(words, err, sizeof(words), cudaMemcpyDeviceToHost),
                                     "read device error"));
  KVSERVE_RETURN_IF_ERROR(CudaStatus(cudaMemset(err, 0, sizeof(words)), "reset device error"));
  return DeviceErrorStatus(words);
}

Status DeviceErrorStatus(const uint32_t words[4], int64_t record_base) {
  const std::string where = " (record " + std::to_string(record_base + words[kErrIndex]) + ", check " +
                            std::to_string(words[kErrDetail]) + ")";
  switch (words[kErrCode]) {
    case kDevOk:
      return Status::Ok();
    case kDevNonFinite:
      return Status::InvalidArgument("KV values must be finite (found NaN or infinity)" + where);
    case kDevGridRange:
      return Status::InvalidArgument("value range too large to quantise; use scale=f32" + where);
    case kDevCorrupt:
      return Status::Corruption("malformed frame" + where);
    default:
      return Status::Internal("device kernel invariant failed" + where);
  }
}

namespace {

class EncoderImpl final : public Encoder {
 public:
  Status Init(Plan plan) {
    plan_ = std::move(plan);
    return tables_.Init(plan_);
  }

  uint64_t WorkspaceBytes() const override { return plan_.ws.total; }
  uint64_t MaxFrameBytes() const override { return plan_.max_frame_bytes; }
  bool FrameSizeIsStatic() const override { return plan_.static_sizes; }
  uint64_t HeaderBytes() const override { return plan_.header.size(); }
  Result<ByteRange> StaticLayerRecords(int layer) const override { return StaticLayerRecordsOf(plan_, layer); }
  const Profile& profile() const override { return plan_.profile; }

  Status Encode(const KvView& kv, void* workspace, uint8_t* frame, uint64_t* frame_bytes,
                Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckView(kv.data, kv.dtype, kv.shape, kv.strides, plan_));
    KVSERVE_RETURN_IF_ERROR(Begin(workspace, frame, stream));
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeRange(Launch(workspace, frame), View(kv), WholePlan(plan_), stream));
    next_layer_ = plan_.shape.layers;
    return Finish(workspace, frame_bytes, stream);
  }

  Status EncodePaged(const PagedKvView& kv, void* workspace, uint8_t* frame, uint64_t* frame_bytes,
                     Stream stream) override {
    KVSERVE_ASSIGN_OR_RETURN(const DeviceView view, PagedDeviceView(kv, plan_, workspace, stream));
    KVSERVE_RETURN_IF_ERROR(Begin(workspace, frame, stream));
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeRange(Launch(workspace, frame), view, WholePlan(plan_), stream));
    next_layer_ = plan_.shape.layers;
    return Finish(workspace, frame_bytes, stream);
  }

  Status EncodeLayerPaged(int layer, const PagedKvView& kv, void* workspace, uint8_t* frame,
                          Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckLayerCall(layer, frame));
    KVSERVE_RETURN_IF_ERROR(CheckBuffers(workspace, frame));
    KVSERVE_ASSIGN_OR_RETURN(const DeviceView view, PagedDeviceView(kv, plan_, workspace, stream));
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeRange(Launch(workspace, frame), view, LayerOfPlan(plan_, layer), stream));
    ++next_layer_;
    return Status::Ok();
  }

  Status Begin(void* workspace, uint8_t* frame, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckBuffers(workspace, frame));
    active_ = false;
    KVSERVE_RETURN_IF_ERROR(LaunchEncodeBegin(Launch(workspace, frame), stream));
    next_layer_ = 0;
    active_ = true;
    frame_ = frame;
    return Status::Ok();
  }

  Status EncodeLayer(int layer, const KvView& kv, void* workspace, uint8_t* frame,
                     Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckLayerCall(layer, frame));
    KVSERVE_RETURN_IF_ERROR(CheckView(kv.data, kv.dtype, kv.shape, kv.strides, plan_));
    KVSERVE_RETURN_IF_ERROR(CheckBuffers(workspace, frame));
    KVSERVE_RETURN_IF_ERROR(
        LaunchEncodeRange(Launch(workspace, frame), View(kv), LayerOfPlan(plan_, layer), stream));
    ++next_layer_;
    return Status::Ok();
  }

  Status Finish(void* workspace, uint64_t* frame_bytes, Stream stream) override {
    if (!active_) return Status::InvalidArgument("Finish called before Begin");
    active_ = false;
    if (next_layer_ != plan_.shape.layers)
      return Status::InvalidArgument("Finish: layer " + std::to_string(next_layer_) +
                                     " was not encoded");
    return LaunchEncodeFinish(Launch(workspace, nullptr), plan_.static_frame_bytes, frame_bytes,
                              stream);
  }

  Status Check(void* workspace, Stream stream) override {
    return ReadDeviceError(workspace, plan_, stream);
  }

  void set_timing(StageEvents* timing) { timing_ = timing; }

 private:
  Status CheckLayerCall(int layer, const uint8_t* frame) const {
    if (!active_) return Status::InvalidArgument("EncodeLayer called before Begin");
    if (layer != next_layer_)
      return Status::InvalidArgument("the CUDA encoder takes layers in order: expected layer " +
                                     std::to_string(next_layer_) + ", got " + std::to_string(layer));
    if (frame != frame_) return Status::InvalidArgument("EncodeLayer: not the frame buffer given to Begin");
    return Status::Ok();
  }
  Status CheckBuffers(void* workspace, uint8_t* frame) const {
    if (frame == nullptr || reinterpret_cast<uintptr_t>(frame) % 16 != 0)
      return Status::InvalidArgument("frame buffer must be a non-null, 16-byte aligned device pointer");
    if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kWsAlign != 0)
      return Status::InvalidArgument("workspace must be non-null and 256-byte aligned");
    return Status::Ok();
  }
  EncodeLaunch Launch(void* workspace, uint8_t* frame) const {
    EncodeLaunch e;
    e.consts = plan_.consts;
    e.tables = tables_.tables();
    e.layout = &plan_.ws;
    e.workspace = static_cast<uint8_t*>(workspace);
    e.frame = frame;
    e.frame_capacity = plan_.max_frame_bytes;
    e.header_bytes = plan_.header.size();
    e.direct = plan_.direct;
    e.static_sizes = plan_.static_sizes;
    e.pack_warps = plan_.pack_warps;
    e.plan = &plan_;
    e.timing = timing_;
    return e;
  }
  DeviceView View(const KvView& kv) const {
    return MakeDeviceView(kv.data, kv.dtype, kv.shape, kv.strides);
  }

  Plan plan_;
  PlanTables tables_;
  int next_layer_ = 0;
  bool active_ = false;
  uint8_t* frame_ = nullptr;
  StageEvents* timing_ = nullptr;
};

class DecoderImpl final : public Decoder {
 public:
  Status Init(Plan plan, size_t header_bytes) {
    plan_ = std::move(plan);
    header_bytes_ = header_bytes;
    info_.version = pipeline::kFrameVersion;
    info_.dtype = plan_.dtype;
    info_.shape = plan_.shape;
    info_.profile = plan_.profile;
    info_.chunk_count = plan_.records.size();
    return tables_.Init(plan_);
  }

  uint64_t WorkspaceBytes() const override { return plan_.ws.total; }
  uint64_t HeaderBytes() const override { return header_bytes_; }
  const FrameInfo& info() const override { return info_; }
  Result<ByteRange> StaticLayerRecords(int layer) const override { return StaticLayerRecordsOf(plan_, layer); }

  Status Decode(const uint8_t* frame, uint64_t frame_bytes, const MutableKvView& out,
                uint8_t* keep_mask, void* workspace, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckArgs(frame, out, workspace));
    if (frame_bytes < header_bytes_) return Status::Corruption("frame shorter than its header");
    DecodeLaunch d = Launch(frame, frame_bytes, keep_mask, workspace);
    d.records_start = header_bytes_;
    d.static_base = 0;
    d.range = WholePlan(plan_);
    layer_errors_reset_ = false;
    return LaunchDecode(d, MakeDeviceView(out.data, out.dtype, out.shape, out.strides), stream);
  }

  Status DecodePaged(const uint8_t* frame, uint64_t frame_bytes, const MutablePagedKvView& out,
                     uint8_t* keep_mask, void* workspace, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckBytes(frame, workspace));
    if (frame_bytes < header_bytes_) return Status::Corruption("frame shorter than its header");
    KVSERVE_ASSIGN_OR_RETURN(const DeviceView view, PagedDeviceView(out.AsConst(), plan_, workspace, stream));
    DecodeLaunch d = Launch(frame, frame_bytes, keep_mask, workspace);
    d.records_start = header_bytes_;
    d.static_base = 0;
    d.range = WholePlan(plan_);
    layer_errors_reset_ = false;
    return LaunchDecode(d, view, stream);
  }

  Status DecodeLayerPaged(int layer, const uint8_t* records, uint64_t bytes, const MutablePagedKvView& out,
                          uint8_t* keep_mask, void* workspace, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckLayer(layer));
    KVSERVE_RETURN_IF_ERROR(CheckBytes(records, workspace));
    KVSERVE_ASSIGN_OR_RETURN(const DeviceView view, PagedDeviceView(out.AsConst(), plan_, workspace, stream));
    return LaunchLayer(layer, records, bytes, view, keep_mask, workspace, stream);
  }

  Status DecodeLayer(int layer, const uint8_t* records, uint64_t bytes, const MutableKvView& out,
                     uint8_t* keep_mask, void* workspace, Stream stream) override {
    KVSERVE_RETURN_IF_ERROR(CheckLayer(layer));
    KVSERVE_RETURN_IF_ERROR(CheckArgs(records, out, workspace));
    return LaunchLayer(layer, records, bytes, MakeDeviceView(out.data, out.dtype, out.shape, out.strides), keep_mask,
                       workspace, stream);
  }

 private:
  Status CheckLayer(int layer) const {
    if (layer < 0 || layer >= plan_.shape.layers)
      return Status::InvalidArgument("DecodeLayer: layer " + std::to_string(layer) + " outside the frame's " +
                                     std::to_string(plan_.shape.layers) + " layers");
    return Status::Ok();
  }
  Status LaunchLayer(int layer, const uint8_t* records, uint64_t bytes, const DeviceView& view, uint8_t* keep_mask,
                     void* workspace, Stream stream) {
    if (!layer_errors_reset_) {
      if (cudaMemsetAsync(static_cast<uint8_t*>(workspace) + plan_.ws.error, 0, 64, stream) != cudaSuccess)
        return Status::Internal("DecodeLayer: reset error block");
      layer_errors_reset_ = true;
    }
    DecodeLaunch d = Launch(records, bytes, keep_mask, workspace);
    d.range = LayerOfPlan(plan_, layer);
    d.records_start = 0;
    d.static_base = static_cast<int64_t>(plan_.records[d.range.record_begin].static_offset);
    d.reset_errors = false;
    return LaunchDecode(d, view, stream);
  }

 public:
  Status Check(void* workspace, Stream stream) override {
    layer_errors_reset_ = false;
    return ReadDeviceError(workspace, plan_, stream);
  }

  void set_timing(StageEvents* timing) { timing_ = timing; }

 private:
  Status CheckArgs(const uint8_t* bytes, const MutableKvView& out, void* workspace) const {
    KVSERVE_RETURN_IF_ERROR(CheckView(out.data, out.dtype, out.shape, out.strides, plan_));
    return CheckBytes(bytes, workspace);
  }
  Status CheckBytes(const uint8_t* bytes, void* workspace) const {
    if (bytes == nullptr || reinterpret_cast<uintptr_t>(bytes) % 16 != 0)
      return Status::InvalidArgument("frame must be a 16-byte aligned device pointer");
    if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kWsAlign != 0)
      return Status::InvalidArgument("workspace must be non-null and 256-byte aligned");
    return Status::Ok();
  }
  DecodeLaunch Launch(const uint8_t* bytes, uint64_t len, uint8_t* keep_mask, void* workspace) const {
    DecodeLaunch d;
    d.consts = plan_.consts;
    d.tables = tables_.tables();
    d.layout = &plan_.ws;
    d.workspace = static_cast<uint8_t*>(workspace);
    d.bytes = bytes;
    d.bytes_len = len;
    d.static_sizes = plan_.static_sizes;
    d.pack_warps = plan_.pack_warps;
    d.keep_mask = keep_mask;
    d.timing = timing_;
    return d;
  }

  Plan plan_;
  PlanTables tables_;
  size_t header_bytes_ = 0;
  FrameInfo info_;
  bool layer_errors_reset_ = false;
  StageEvents* timing_ = nullptr;
};

}  // namespace

PlanRange WholePlan(const Plan& plan) {
  return PlanRange{0, static_cast<int64_t>(plan.records.size()),
                   0, static_cast<int64_t>(plan.segments.size()),
                   0, static_cast<int64_t>(plan.tiles.size()),
                   0, static_cast<int64_t>(plan.raw_spans.size()),
                   0, static_cast<int64_t>(plan.raw_records.size())};
}

PlanRange LayerOfPlan(const Plan& plan, int layer) {
  return PlanRange{plan.layer_records[layer],     plan.layer_records[layer + 1],
                   plan.layer_segments[layer],    plan.layer_segments[layer + 1],
                   plan.layer_tiles[layer],       plan.layer_tiles[layer + 1],
                   plan.layer_raw_spans[layer],   plan.layer_raw_spans[layer + 1],
                   plan.layer_raw_records[layer], plan.layer_raw_records[layer + 1],
                   layer};
}

void SetStageTiming(Encoder* encoder, StageEvents* timing) {
  static_cast<EncoderImpl*>(encoder)->set_timing(timing);
}
void SetStageTiming(Decoder* decoder, StageEvents* timing) {
  static_cast<DecoderImpl*>(decoder)->set_timing(timing);
}

bool Available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string DeviceName() {
  if (!Available()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

Status CheckSupported(const Profile& profile, const KvShape& shape) {
  KVSERVE_RETURN_IF_ERROR(profile.Validate());
  if (profile.codec() != CodecType::kPack && profile.codec() != CodecType::kRans)
    return Status::NotSupported("the CUDA backend runs the pack and rans codecs only, not " +
                                std::string(CodecName(profile.codec())));
  const int d = shape.head_dim;
  if (d != 32 && d != 64 && d != 128 && d != 256)
    return Status::NotSupported("the CUDA backend needs head_dim 32, 64, 128 or 256");
  return Status::Ok();
}

Result<std::vector<uint8_t>> EncoderState(const Profile& profile, const KvShape& shape,
                                          const HeadScores* head_scores) {
  // The quantizer state (mixhq bits, duo flags) exactly as the CPU encoder
  // derives it.
  KVSERVE_ASSIGN_OR_RETURN(auto quantizer,
                           pipeline::CreateQuantizerForEncode(profile, shape, head_scores));
  std::vector<uint8_t> state;
  pipeline::ByteWriter writer(&state);
  quantizer->SerializeState(writer);
  return state;
}

Result<std::pair<PlanBasis, size_t>> DecodeBasis(std::span<const uint8_t> header) {
  pipeline::FrameHeader h;
  KVSERVE_ASSIGN_OR_RETURN(size_t used, pipeline::ReadFrameHeader(header, &h));
  auto profile = Profile::Parse(h.profile_spec);
  if (!profile.ok())
    return Status::Corruption("frame names an invalid profile: " + profile.status().message());
  if (static_cast<uint32_t>(profile->Get(ParamId::kChunkTokens)) != h.chunk_tokens)
    return Status::Corruption("frame chunk size disagrees with its profile");
  KVSERVE_RETURN_IF_ERROR(CheckSupported(*profile, h.shape));
  auto basis = BuildPlanBasis(*profile, h.shape, h.dtype, h.state, /*for_decode=*/true);
  if (!basis.ok()) {
    if (basis.status().code() == StatusCode::kNotSupported) return basis.status();
    return Status::Corruption("frame header: " + basis.status().message());
  }
  if (static_cast<uint32_t>(basis->coded_tokens) != h.coded_tokens)
    return Status::Corruption("frame coded_tokens disagrees with its profile");
  return std::make_pair(std::move(basis).value(), used);
}

Result<std::unique_ptr<Encoder>> Encoder::Create(const Profile& profile, const KvShape& shape,
                                                 DType dtype, const HeadScores* head_scores) {
  KVSERVE_RETURN_IF_ERROR(CheckSupported(profile, shape));
  if (!Available()) return Status::NotSupported("no CUDA device");
  KVSERVE_ASSIGN_OR_RETURN(const std::vector<uint8_t> state, EncoderState(profile, shape, head_scores));
  KVSERVE_ASSIGN_OR_RETURN(Plan plan, BuildPlan(profile, shape, dtype, state, /*for_decode=*/false));
  auto impl = std::make_unique<EncoderImpl>();
  KVSERVE_RETURN_IF_ERROR(impl->Init(std::move(plan)));
  return std::unique_ptr<Encoder>(std::move(impl));
}

Result<std::unique_ptr<Decoder>> Decoder::Create(std::span<const uint8_t> header) {
  if (!Available()) return Status::NotSupported("no CUDA device");
  KVSERVE_ASSIGN_OR_RETURN(auto basis, DecodeBasis(header));
  KVSERVE_ASSIGN_OR_RETURN(Plan plan, BuildPlan(basis.first, RecordWindow{}));
  auto impl = std::make_unique<DecoderImpl>();
  KVSERVE_RETURN_IF_ERROR(impl->Init(std::move(plan), basis.second));
  return std::unique_ptr<Decoder>(std::move(impl));
}

}  // namespace kvserve::cuda
