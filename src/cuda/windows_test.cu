// Copyright kvserve authors. The windowed encoder and decoder
// (kvserve/cuda.h): a frame encoded window by window through two slots is
// byte-identical to the CPU encoder's frame, and records decoded window by
// window (in any order within a window, from contiguous or paged caches
// into contiguous or paged ones) give the CPU decode's values and keep
// mask; a corrupt record is reported by its window's slot, naming the
// frame's record index. Skips without a GPU; runs in the host simulator
// too (test_cuda_sim).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kvserve/controller.h"
#include "kvserve/cuda.h"
#include "kvserve/kv_file.h"

namespace kvserve::cuda {
namespace {

using namespace kvserve::cuda::testing;  // NOLINT: the shared test helpers

// Two slots and their pinned table staging, as a connector's ring holds them.
struct Slots {
  std::vector<std::unique_ptr<DeviceBuffer<>>> device;
  std::vector<uint8_t*> pinned;
  Slots(uint64_t slot_bytes, uint64_t table_bytes) {
    for (int i = 0; i < 2; ++i) {
      device.push_back(std::make_unique<DeviceBuffer<>>(slot_bytes));
      uint8_t* p = nullptr;
      (void)cudaMallocHost(reinterpret_cast<void**>(&p), table_bytes == 0 ? 1 : table_bytes);
      pinned.push_back(p);
    }
  }
  ~Slots() {
    for (uint8_t* p : pinned) cudaFreeHost(p);
  }
};

SlotStatus ReadStatus(uint8_t* slot) {
  SlotStatus s;
  (void)cudaStreamSynchronize(nullptr);
  (void)cudaMemcpy(&s, slot, sizeof(s), cudaMemcpyDeviceToHost);
  return s;
}

// A window cut: whole records in plan order from the first, each within
// the target unless it is one record, their KV adding up to the frame's.
void ExpectCutCoversTheFrame(const std::vector<FrameWindow>& windows, const WindowOptions& options,
                             const KvShape& shape, DType dtype) {
  uint64_t kv = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    EXPECT_LT(windows[w].record_begin, windows[w].record_end);
    EXPECT_EQ(windows[w].record_begin, w == 0 ? 0 : windows[w - 1].record_end);
    EXPECT_TRUE(windows[w].kv_bytes <= options.window_kv_bytes ||
                windows[w].record_end == windows[w].record_begin + 1);
    kv += windows[w].kv_bytes;
  }
  EXPECT_EQ(kv, static_cast<uint64_t>(shape.NumElements()) * DTypeSize(dtype));
}

// The frame of `cache` (or of `paged`, when given) encoded window by window.
GpuFrame WindowedEncode(const Profile& p, const HostCache& cache, const HeadScores* scores,
                        const WindowOptions& options, const PagedKvView* paged = nullptr) {
  GpuFrame r;
  auto enc = WindowedEncoder::Create(p, cache.shape, cache.dtype, scores, options);
  if (!enc.ok()) {
    r.status = enc.status();
    return r;
  }
  const std::vector<FrameWindow>& windows = (*enc)->windows();
  // The cut covers the frame; an encoder's windows are of one layer each.
  ExpectCutCoversTheFrame(windows, options, cache.shape, cache.dtype);
  for (int l = 0; l < cache.shape.layers; ++l)
    for (int w = (*enc)->FirstWindow(l); w < (*enc)->FirstWindow(l + 1); ++w) EXPECT_EQ(windows[w].layer, l);
  EXPECT_EQ((*enc)->FirstWindow(cache.shape.layers), static_cast<int>(windows.size()));

  DeviceBuffer<> in(cache.bytes.size());
  (void)cudaMemcpy(in.ptr, cache.bytes.data(), cache.bytes.size(), cudaMemcpyHostToDevice);
  KvView dv = cache.view();
  dv.data = in.ptr + cache.origin;
  Slots slots((*enc)->SlotBytes(), (*enc)->TableBytes());
  r.bytes = (*enc)->header();
  for (size_t w = 0; w < windows.size(); ++w) {
    uint8_t* slot = slots.device[w % 2]->ptr;
    r.status = paged != nullptr
                   ? (*enc)->EncodeWindowPaged(static_cast<int>(w), *paged, slot, slots.pinned[w % 2], nullptr)
                   : (*enc)->EncodeWindow(static_cast<int>(w), dv, slot, slots.pinned[w % 2], nullptr);
    if (!r.status.ok()) return r;
    const SlotStatus st = ReadStatus(slot);
    r.status = SlotStatusToStatus(st, windows[w]);
    if (!r.status.ok()) return r;
    EXPECT_LE(st.bytes, windows[w].max_bytes);
    const size_t at = r.bytes.size();
    r.bytes.resize(at + st.bytes);
    (void)cudaMemcpy(r.bytes.data() + at, slot + (*enc)->OutputOffset(), st.bytes, cudaMemcpyDeviceToHost);
  }
  return r;
}

// The records of `frame` per window of `dec`, each window's records in a
// random order.
std::vector<std::vector<uint8_t>> RecordsByWindow(const std::vector<uint8_t>& frame, const WindowedDecoder& dec,
                                                  std::mt19937& rng) {
  std::vector<std::vector<std::pair<size_t, size_t>>> spans(dec.windows().size());
  for (size_t p = dec.HeaderBytes(); p + 20 <= frame.size();) {
    uint32_t body = 0;
    std::memcpy(&body, frame.data() + p + 16, 4);
    auto w = dec.WindowOfRecord(std::span<const uint8_t>(frame).subspan(p));
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return {};
    spans[*w].push_back({p, 24 + body});
    p += 24 + body;
  }
  std::vector<std::vector<uint8_t>> out;
  for (auto& s : spans) {
    std::shuffle(s.begin(), s.end(), rng);
    out.emplace_back();
    for (const auto& [at, n] : s) out.back().insert(out.back().end(), frame.begin() + at, frame.begin() + at + n);
  }
  return out;
}

// `frame` decoded window by window into a contiguous device cache, or into
// `pages` (device page caches described by `paged`) when given.
Decoded WindowedDecode(const std::vector<uint8_t>& frame, const KvShape& shape, DType dtype,
                       const WindowOptions& options, std::mt19937& rng,
                       const MutablePagedKvView* paged = nullptr) {
  Decoded r;
  auto dec = WindowedDecoder::Create(frame, options);
  if (!dec.ok()) {
    r.status = dec.status();
    return r;
  }
  const size_t out_bytes = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  const size_t mask_bytes = static_cast<size_t>(shape.layers) * 2 * shape.kv_heads * shape.tokens;
  DeviceBuffer<> out(out_bytes), mask(mask_bytes);
  (void)cudaMemset(out.ptr, 0x5A, out_bytes);
  (void)cudaMemset(mask.ptr, 7, mask_bytes);
  const MutableKvView view{out.ptr, dtype, shape, KvStrides::Contiguous(shape)};
  // The cut covers the frame; (layer, kind) boundaries may fall inside a window.
  ExpectCutCoversTheFrame((*dec)->windows(), options, shape, dtype);
  r.windows = (*dec)->windows().size();
  Slots slots((*dec)->SlotBytes(), (*dec)->TableBytes());
  const std::vector<std::vector<uint8_t>> windows = RecordsByWindow(frame, **dec, rng);
  // Windows in a random order too: each is independent.
  std::vector<int> order(windows.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; i < order.size(); ++i) {
    const int w = order[i];
    uint8_t* slot = slots.device[i % 2]->ptr;
    EXPECT_LE(windows[w].size(), (*dec)->InputCapacity());
    (void)cudaMemcpy(slot + (*dec)->InputOffset(), windows[w].data(), windows[w].size(), cudaMemcpyHostToDevice);
    r.status = paged != nullptr ? (*dec)->DecodeWindowPaged(w, slot, windows[w].size(), *paged, mask.ptr,
                                                            slots.pinned[i % 2], nullptr)
                                : (*dec)->DecodeWindow(w, slot, windows[w].size(), view, mask.ptr,
                                                       slots.pinned[i % 2], nullptr);
    if (!r.status.ok()) return r;
    r.status = SlotStatusToStatus(ReadStatus(slot), (*dec)->windows()[w]);
    if (!r.status.ok()) return r;
  }
  r.values.resize(out_bytes);
  r.mask.resize(mask_bytes);
  (void)cudaMemcpy(r.values.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost);
  (void)cudaMemcpy(r.mask.data(), mask.ptr, mask_bytes, cudaMemcpyDeviceToHost);
  return r;
}

// Windows of a random size: from below one record to several records.
WindowOptions RandomWindows(std::mt19937& rng, const KvShape& shape, DType dtype) {
  const uint64_t row = static_cast<uint64_t>(shape.kv_heads) * shape.head_dim * DTypeSize(dtype);
  return WindowOptions{row * (1 + rng() % 600)};
}

TEST(CudaWindows, RandomProfilesEncodeAndDecodeByWindow) {
  SKIP_WITHOUT_GPU();
  int wanted = 60;
  if (const char* env = std::getenv("KVSERVE_CUDA_TEST_PROFILES")) wanted = std::max(4, std::atoi(env) / 3);
  std::mt19937 rng(2024);
  int tested = 0, attempts = 0, multi = 0, across = 0;
  while (tested < wanted && attempts < 100 * wanted) {
    ++attempts;
    static const int kDims[] = {32, 64, 128, 128, 256};
    const std::optional<RandomCase> c = DrawCase(rng, kDims, 5);
    if (!c) continue;
    const Profile* profile = &c->profile;
    const KvShape& shape = c->shape;
    const DType dtype = c->dtype;
    const HeadScores& scores = c->scores;
    const HostCache& cache = c->cache;
    SCOPED_TRACE("#" + std::to_string(tested) + " " + profile->ToString() + " shape " +
                 std::to_string(shape.layers) + "x" + std::to_string(shape.kv_heads) + "x" +
                 std::to_string(shape.tokens) + "x" + std::to_string(shape.head_dim));
    const std::vector<uint8_t> cpu = CpuEncode(*profile, cache.view(), &scores);
    const WindowOptions windows = RandomWindows(rng, shape, dtype);
    const GpuFrame gpu = WindowedEncode(*profile, cache, &scores, windows);
    ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
    ASSERT_EQ(FirstDifference(gpu.bytes, cpu), SIZE_MAX) << "windowed frame differs from the CPU's";
    const Decoded want = CpuDecode(cpu, shape, dtype);
    ASSERT_TRUE(want.status.ok());
    const Decoded got = WindowedDecode(cpu, shape, dtype, RandomWindows(rng, shape, dtype), rng);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    ASSERT_EQ(FirstDifference(got.values, want.values), SIZE_MAX) << "windowed decode differs";
    ASSERT_EQ(got.mask, want.mask);
    // Fewer windows than (layer, kind) runs: some window spans a boundary.
    across += got.windows < static_cast<size_t>(2 * shape.layers);
    if ((*WindowedEncoder::Create(*profile, shape, dtype, &scores, windows))->windows().size() >
        static_cast<size_t>(2 * shape.layers))
      ++multi;
    ++tested;
  }
  EXPECT_EQ(tested, wanted);
  EXPECT_GE(multi, tested / 4) << "too few cases cut a (layer, kind) into several windows";
  EXPECT_GE(across, tested / 8) << "too few cases decoded a window across (layer, kind) runs";
}

// Paged senders and receivers (vLLM and FlashInfer layouts, block sizes
// that do not divide the window's tokens), window by window.
TEST(CudaWindows, PagedCachesEncodeAndDecodeByWindow) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(77);
  const KvShape shape{2, 2, 333, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 7);
  const PagedLayout layouts[] = {PagedLayout::kVllm, PagedLayout::kVllmBlockFirst, PagedLayout::kFlashInferHnd};
  int round = 0;
  for (const char* spec : {"kivi-2", "none", "kvserve-h2r", "duo"}) {
    const PagedLayout layout = layouts[round % 3];
    const int block_size = round % 2 == 0 ? 16 : 7;
    ++round;
    SCOPED_TRACE(std::string(spec) + " " + std::string(PagedLayoutName(layout)) + " block " +
                 std::to_string(block_size));
    const Profile p = *Profile::Parse(spec);
    const std::vector<uint8_t> want = CpuEncode(p, cache.view(), &scores);
    DevicePagedCache sender(rng, shape, DType::kBF16, layout, block_size, &cache);
    const PagedKvView view = sender.view();
    const WindowOptions windows = RandomWindows(rng, shape, DType::kBF16);
    const GpuFrame got = WindowedEncode(p, cache, &scores, windows, &view);
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(FirstDifference(got.bytes, want), SIZE_MAX);

    const Decoded whole = CpuDecode(want, shape, DType::kBF16);
    // Random windows, then about 1.5 (layer, kind) runs per window: windows
    // that start inside one run and end inside the next (their tokens, the
    // union of both runs' ranges, name the pages).
    const uint64_t row = static_cast<uint64_t>(shape.kv_heads) * shape.head_dim * DTypeSize(DType::kBF16);
    for (const WindowOptions& w : {RandomWindows(rng, shape, DType::kBF16), WindowOptions{row * shape.tokens * 3 / 2}}) {
      DevicePagedCache receiver(rng, shape, DType::kBF16, layouts[round % 3], block_size == 16 ? 5 : 32);
      const MutablePagedKvView rview = receiver.mutable_view();
      const Decoded d = WindowedDecode(want, shape, DType::kBF16, w, rng, &rview);
      ASSERT_TRUE(d.status.ok()) << d.status.ToString();
      EXPECT_EQ(FirstDifference(receiver.Contiguous(), whole.values), SIZE_MAX);
      EXPECT_EQ(d.mask, whole.mask);
    }
  }
}

// A flipped byte in a record is reported by the slot of its window as
// Corruption naming the frame's index of a record of that window; a record
// header naming no record of the frame is refused by WindowOfRecord.
TEST(CudaWindows, CorruptRecordIsReportedByItsWindow) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  // f16 at head_dim 64 (the tile kernels), bf16 at 128 (kivi-2: the warp kernels).
  for (const char* spec : {"kivi-4", "kvserve-h4r", "kivi-2"}) {
    const bool warp = std::string(spec) == "kivi-2";
    const HostCache cache = MakeCache(rng, KvShape{2, 2, 300, warp ? 128 : 64}, warp ? DType::kBF16 : DType::kF16, 0);
    const Profile p = *Profile::Parse(spec);
    const std::vector<uint8_t> frame = CpuEncode(p, cache.view(), nullptr);
    const WindowOptions options{static_cast<uint64_t>(64 * 2 * 2 * cache.shape.head_dim)};  // a few records per window
    auto dec = WindowedDecoder::Create(frame, options);
    ASSERT_TRUE(dec.ok());
    const std::vector<std::vector<uint8_t>> windows = RecordsByWindow(frame, **dec, rng);
    ASSERT_GT(windows.size(), 4u);
    const int w = 1 + static_cast<int>(rng() % (windows.size() - 1));
    std::vector<uint8_t> bad = windows[w];
    bad[24 + rng() % (bad.size() - 28)] ^= 0x10;  // inside a record's body or checksum
    DeviceBuffer<> out(static_cast<size_t>(cache.shape.NumElements()) * 2);
    Slots slots((*dec)->SlotBytes(), (*dec)->TableBytes());
    (void)cudaMemcpy(slots.device[0]->ptr + (*dec)->InputOffset(), bad.data(), bad.size(), cudaMemcpyHostToDevice);
    const MutableKvView view{out.ptr, cache.dtype, cache.shape, KvStrides::Contiguous(cache.shape)};
    ASSERT_TRUE((*dec)->DecodeWindow(w, slots.device[0]->ptr, bad.size(), view, nullptr, slots.pinned[0], nullptr).ok());
    const Status s = SlotStatusToStatus(ReadStatus(slots.device[0]->ptr), (*dec)->windows()[w]);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << spec << ": " << s.ToString();
    std::vector<uint8_t> stray(frame.begin() + (*dec)->HeaderBytes(), frame.begin() + (*dec)->HeaderBytes() + 24);
    std::fill(stray.begin() + 8, stray.begin() + 12, 0xFF);  // token_begin past the frame
    EXPECT_EQ((*dec)->WindowOfRecord(stray).status().code(), StatusCode::kCorruption);
  }
}

}  // namespace
}  // namespace kvserve::cuda
