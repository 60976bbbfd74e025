// Copyright kvserve authors. Consistency of the CUDA backend with the CPU
// reference: for every GPU-supported preset and for random profiles drawn
// from the parameter table, GPU frame bytes == CPU frame bytes, and the CPU
// decoding of the GPU frame == the GPU decoding of the CPU frame, bit for bit
// (values and keep masks). Plus the shared host/device pieces (XXH3, grid
// params) against libxxhash and the CPU quantizer, which run without a GPU.
// GPU tests skip cleanly when no device is present.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/grid.cuh"
#include "cuda/plan.h"
#include "cuda/rows.cuh"
#include "cuda/rans_magic.cuh"
#include "cuda/record_hash.cuh"
#include "cuda/xxh3.cuh"
#include "cuda/cuda_test_util.h"
#include "kvserve/codec.h"
#include "kvserve/controller.h"
#include "kvserve/cuda.h"
#include "kvserve/kv.h"
#include "kvserve/kv_file.h"
#include "kvserve/paged.h"
#include "kvserve/profile.h"
#include "quantizers/grid_kernels.h"

namespace kvserve::cuda {
namespace {

using namespace kvserve::cuda::testing;  // NOLINT: the shared test helpers

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

const uint8_t kHostSecret[192] = KVSERVE_XXH3_SECRET;

std::vector<uint64_t> HostBlockTermsForTest(const uint8_t* buf, uint64_t len) {
  const xxh3::Keys keys = xxh3::MakeKeys();
  const uint64_t nb = len > 240 ? (len - 1) / 1024 : 0;
  std::vector<uint64_t> terms(8 * nb + 8, 0);
  for (uint64_t b = 0; b < nb; ++b)
    for (int l = 0; l < 32; ++l) {
      uint32_t w[8];
      std::memcpy(w, buf + 1024 * b + 32 * l, 32);
      uint64_t c[4] = {0, 0, 0, 0};
      xxh3::QuarterStripeTerms(keys, w, l >> 1, 4 * (l & 1), c);
      for (int k = 0; k < 4; ++k) terms[8 * b + 4 * (l & 1) + k] += c[k];
    }
  return terms;
}

// ------------------------------------------------------------ host checks

TEST(CudaHost, Xxh3MatchesLibxxhashForEveryLengthClass) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const xxh3::Secret secret{kHostSecret};
  for (size_t len = 0; len <= 2100; ++len)
    ASSERT_EQ(xxh3::Hash64(buf.data() + (len % 7), len, secret), XXH3_64bits(buf.data() + (len % 7), len))
        << len;
  for (size_t len : {4095, 4096, 4097, 65536, 69999})
    ASSERT_EQ(xxh3::Hash64(buf.data(), len, secret), XXH3_64bits(buf.data(), len)) << len;
}

// The parallel form (per-block terms, then the scramble chain) equals
// XXH3-64 on every length class, on the host.
TEST(CudaHost, ParallelXxh3FormMatchesLibxxhash) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf(20000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const xxh3::Keys keys = xxh3::MakeKeys();
  for (uint64_t len = 241; len < buf.size(); len += 1 + rng() % 97) {
    const std::vector<uint64_t> terms = HostBlockTermsForTest(buf.data(), len);
    uint64_t acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = xxh3::InitAcc(i);
    const uint64_t nb = (len - 1) / 1024;
    for (uint64_t b = 0; b < nb; ++b)
      for (int i = 0; i < 8; ++i) acc[i] = xxh3::ScrambleOne(acc[i] + terms[8 * b + i], keys.scramble[i]);
    const int stripes = static_cast<int>(((len - 1) - 1024 * nb) / 64);
    for (int l = 0; l < 2 * stripes; ++l) {
      uint32_t w[8];
      std::memcpy(w, buf.data() + 1024 * nb + 32 * l, 32);
      uint64_t c[4] = {0, 0, 0, 0};
      xxh3::QuarterStripeTerms(keys, w, l >> 1, 4 * (l & 1), c);
      for (int k = 0; k < 4; ++k) acc[4 * (l & 1) + k] += c[k];
    }
    for (int i = 0; i < 8; ++i) {
      uint64_t data, partner;
      std::memcpy(&data, buf.data() + len - 64 + 8 * i, 8);
      std::memcpy(&partner, buf.data() + len - 64 + 8 * (i ^ 1), 8);
      const uint64_t key = data ^ keys.last[i];
      acc[i] += (key & 0xFFFFFFFFull) * (key >> 32) + partner;
    }
    ASSERT_EQ(xxh3::FinishLong(acc, keys, len), XXH3_64bits(buf.data(), len)) << len;
  }
}

// Division by multiplication is exact for every frequency and every state
// the coder can hold (random states plus the edges around multiples).
TEST(CudaHost, RansReciprocalDivisionIsExact) {
  std::mt19937 rng(13);
  for (uint32_t f = 1; f <= (1u << 15); ++f) {
    const RansDivisor d = MakeRansDivisor(f);
    const uint32_t probes[] = {0u, 1u, f - 1, f, f + 1, 0xFFFFFFFFu, 0xFFFFFFFFu - f, 0x80000000u,
                               (0xFFFFFFFFu / f) * f, (0xFFFFFFFFu / f) * f - 1};
    for (uint32_t x : probes) ASSERT_EQ(RansDivide(x, d), x / f) << "f " << f << " x " << x;
    for (int i = 0; i < 64; ++i) {
      const uint32_t x = rng();
      ASSERT_EQ(RansDivide(x, d), x / f) << "f " << f << " x " << x;
    }
  }
}

TEST(CudaHost, GridParamsMatchCpuQuantizer) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int i = 0; i < 200000; ++i) {
    const int levels = 2 + static_cast<int>(rng() % 255);
    const bool sym = rng() & 1, f16 = rng() & 1;
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);
    float a = u(rng) * mag, b = u(rng) * mag;
    if (rng() % 8 == 0) b = a;
    if (a > b) std::swap(a, b);
    quantizers::GridParams ref;
    const Status st = quantizers::ComputeGridParams(
        {levels, sym, f16 ? ScaleDType::kF16 : ScaleDType::kF32}, a, b, &ref);
    float scale = -1, zero = -1;
    const uint32_t code = GridParamsFor(levels, sym, f16, a, b, &scale, &zero);
    ASSERT_EQ(st.ok(), code == kDevOk) << a << " " << b;
    if (!st.ok()) continue;
    ASSERT_EQ(FloatBits(scale), FloatBits(ref.scale)) << levels << " " << a << " " << b;
    ASSERT_EQ(FloatBits(zero), FloatBits(ref.zero)) << levels << " " << a << " " << b;
  }
}

TEST(CudaHost, IntegerHalfConversionMatchesCpu) {
  // The device's fp32 -> fp16 conversion (common.cuh) against the CPU's.
  std::mt19937 rng(13);
  for (uint32_t e = 0; e < 256; ++e)
    for (int k = 0; k < 4000; ++k) {
      uint32_t m = rng() & 0x7FFFFFu;
      if (k < 8) m = (k & 1) ? 0x7FFFFFu : (k == 2 ? 0x1000u : (k == 4 ? 0x2000u : 0u));
      const uint32_t bits = ((rng() & 1u) << 31) | (e << 23) | m;
      const float f = BitsFloat(bits);
      if (f != f) continue;  // NaN payloads are unspecified
      ASSERT_EQ(FloatToHalfBitsInteger(f), FloatToHalf(f)) << std::hex << bits;
    }
}

TEST(CudaHost, UnsupportedProfilesAreReported) {
  const KvShape shape{2, 2, 64, 128};
  EXPECT_EQ(CheckSupported(*Profile::Parse("zstd"), shape).code(), StatusCode::kNotSupported);
  EXPECT_EQ(CheckSupported(*Profile::Parse("lz4"), shape).code(), StatusCode::kNotSupported);
  EXPECT_EQ(CheckSupported(*Profile::Parse("kivi-2"), KvShape{2, 2, 64, 96}).code(),
            StatusCode::kNotSupported);
  EXPECT_TRUE(CheckSupported(*Profile::Parse("kvserve-h2r"), shape).ok());
}

// The rANS kernels' segment order: within each layer, and over the whole
// frame, a permutation of the segments with the longest first; for the
// stateless rANS presets and a uniform rANS profile on seeded random shapes
// (with and without raw residual records), and none for pack frames.
TEST(CudaHost, RansSegmentOrderIsLongestFirstPerLayerAndWhole) {
  std::mt19937 rng(31);
  int with_raw = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const KvShape shape{1 + static_cast<int>(rng() % 4), 1 + static_cast<int>(rng() % 4),
                        1 + static_cast<int>(rng() % 1200), 64 << (rng() % 2)};
    // Quantizers without state (mixhq's and duo's depend on head scores).
    for (const char* spec : {"kvserve-h2r", "kvserve-htok", "cachegen", "identity+uniform(k=3,v=5)+rans"}) {
      SCOPED_TRACE(std::string(spec) + " tokens " + std::to_string(shape.tokens));
      auto plan = BuildPlan(*Profile::Parse(spec), shape, DType::kBF16, {}, false);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const int64_t S = static_cast<int64_t>(plan->segments.size());
      ASSERT_EQ(static_cast<int64_t>(plan->segment_order.size()), 2 * S);
      auto check = [&](int64_t at, int64_t begin, int64_t end) {
        std::vector<int32_t> got(plan->segment_order.begin() + at, plan->segment_order.begin() + at + (end - begin));
        for (size_t k = 1; k < got.size(); ++k)
          EXPECT_GE(plan->segments[got[k - 1]].count, plan->segments[got[k]].count) << "position " << k;
        std::sort(got.begin(), got.end());
        for (int64_t k = 0; k < end - begin; ++k) ASSERT_EQ(got[k], begin + k) << "not a permutation";
      };
      for (int l = 0; l < shape.layers; ++l)
        check(plan->layer_segments[l], plan->layer_segments[l], plan->layer_segments[l + 1]);
      check(S, 0, S);
      if (!plan->raw_records.empty()) ++with_raw;  // raw residual segments take part
    }
  }
  EXPECT_GT(with_raw, 0) << "no shape had raw residual records";
  EXPECT_TRUE(BuildPlan(*Profile::Parse("kivi-2"), KvShape{2, 2, 300, 128}, DType::kBF16, {}, false)
                  ->segment_order.empty());
}

// ------------------------------------------------------------ GPU helpers

// The whole consistency property for one (profile, cache); head scores
// `real` when given, else synthesized for the cache's shape.
void CheckConsistent(const Profile& p, const HostCache& cache, const std::string& label,
                     const HeadScores* real = nullptr) {
  SCOPED_TRACE(label + " " + p.ToString() + " shape " + std::to_string(cache.shape.layers) + "x" +
               std::to_string(cache.shape.kv_heads) + "x" + std::to_string(cache.shape.tokens) + "x" +
               std::to_string(cache.shape.head_dim) + " dtype " + std::string(DTypeName(cache.dtype)));
  const HeadScores synthesized = SynthesizeHeadScores(cache.shape.layers, cache.shape.kv_heads, 3);
  const HeadScores& scores = real != nullptr ? *real : synthesized;
  const std::vector<uint8_t> cpu = CpuEncode(p, cache.view(), &scores);
  const GpuFrame gpu = GpuEncode(p, cache, &scores);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  ASSERT_EQ(gpu.bytes.size(), cpu.size());
  const size_t diff = FirstDifference(gpu.bytes, cpu);
  ASSERT_EQ(diff, SIZE_MAX) << "frames differ at byte " << diff;
  const Decoded on_gpu = GpuDecode(cpu, cache.shape, cache.dtype);
  ASSERT_TRUE(on_gpu.status.ok()) << on_gpu.status.ToString();
  EXPECT_EQ(on_gpu.locate_flags, 0u) << "the parallel record location missed a record";
  const Decoded on_cpu = CpuDecode(gpu.bytes, cache.shape, cache.dtype);
  ASSERT_TRUE(on_cpu.status.ok()) << on_cpu.status.ToString();
  const size_t vdiff = FirstDifference(on_gpu.values, on_cpu.values);
  ASSERT_EQ(vdiff, SIZE_MAX) << "decoded values differ at byte " << vdiff;
  ASSERT_EQ(on_gpu.mask, on_cpu.mask);
}

std::vector<std::string> GpuPresets() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) {
    auto profile = Profile::Parse(p.spec);
    if (profile.ok() && CheckSupported(*profile, KvShape{1, 1, 1, 128}).ok())
      names.emplace_back(p.name);
  }
  return names;
}

// ------------------------------------------------------------ GPU tests

__global__ void BlockHashKernel(const uint8_t* buf, const uint64_t* lens, const uint64_t* offsets,
                                const uint64_t* terms, const uint64_t* term_offsets, uint64_t buf_len, int n,
                                uint64_t* out_bytes, uint64_t* out_terms) {
  __shared__ HashSmem hs;
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const uint8_t* p = buf + offsets[i];
    const uint64_t h1 = BlockHash64(p, lens[i], buf, buf + buf_len, nullptr, hs);
    __syncthreads();
    const uint64_t h2 = BlockHash64(p, lens[i], buf, buf + buf_len, terms + term_offsets[i], hs);
    __syncthreads();
    if (threadIdx.x == 0) {
      out_bytes[i] = h1;
      out_terms[i] = h2;
    }
  }
}

TEST(CudaDevice, BlockXxh3MatchesLibxxhash) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::vector<uint64_t> lens, offsets, term_offsets, terms;
  for (uint64_t l = 0; l < 2600; ++l) lens.push_back(l);
  for (uint64_t l : {4095, 4096, 4097, 8191, 30000, 39980, 65537}) lens.push_back(l);
  for (size_t i = 0; i < lens.size(); ++i) {
    offsets.push_back(rng() % (buf.size() - lens[i] + 1));  // every alignment
    const std::vector<uint64_t> t = HostBlockTermsForTest(buf.data() + offsets[i], lens[i]);
    term_offsets.push_back(terms.size());
    terms.insert(terms.end(), t.begin(), t.end());
  }
  DeviceBuffer<> dbuf(buf.size());
  DeviceBuffer<uint64_t> dlens(8 * lens.size()), doff(8 * lens.size()), dto(8 * lens.size()),
      dterms(8 * terms.size()), d1(8 * lens.size()), d2(8 * lens.size());
  CUDA_OK(cudaMemcpy(dbuf.ptr, buf.data(), buf.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dlens.ptr, lens.data(), 8 * lens.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(doff.ptr, offsets.data(), 8 * lens.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dto.ptr, term_offsets.data(), 8 * lens.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dterms.ptr, terms.data(), 8 * terms.size(), cudaMemcpyHostToDevice));
  KV_LAUNCH(BlockHashKernel, 128, kHashThreads)(dbuf.ptr, dlens.ptr, doff.ptr, dterms.ptr, dto.ptr, buf.size(),
                                          static_cast<int>(lens.size()), d1.ptr, d2.ptr);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint64_t> h1(lens.size()), h2(lens.size());
  CUDA_OK(cudaMemcpy(h1.data(), d1.ptr, 8 * lens.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h2.data(), d2.ptr, 8 * lens.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < lens.size(); ++i) {
    const uint64_t ref = XXH3_64bits(buf.data() + offsets[i], lens[i]);
    ASSERT_EQ(h1[i], ref) << "from bytes, len " << lens[i] << " offset " << offsets[i];
    ASSERT_EQ(h2[i], ref) << "from block terms, len " << lens[i] << " offset " << offsets[i];
  }
}

TEST(CudaDevice, EveryGpuPresetIsByteIdentical) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  const std::vector<KvShape> shapes = {{2, 2, 700, 128}, {3, 2, 130, 64}, {1, 3, 37, 256}, {2, 1, 300, 32}};
  for (const std::string& name : GpuPresets()) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const DType dtype = static_cast<DType>((i + 2) % 3);  // head_dim 128 in bf16 (the warp kernel)
      const HostCache cache = MakeCache(rng, shapes[i], dtype, static_cast<int>(i % 4));
      CheckConsistent(*Profile::Parse(name), cache, "preset " + name);
      if (HasFatalFailure()) return;
    }
  }
}

// Every row of the shipped profile tables (configs/profiles/*.json: what the
// controller serves) that the CUDA codec runs is byte-identical with the CPU
// at the shipped model's KV shape (8 layers, 2 KV heads, head_dim 64), with
// its head scores, at a task prompt's length in f16 (the wire dtype) and a
// shorter one in bf16 in the paged token-major layout (shorter in the host
// simulator). Rows with zstd or lz4
// (CPU codecs) are counted, not run.
TEST(CudaDevice, ShippedProfileTableRowsAreByteIdentical) {
  SKIP_WITHOUT_GPU();
  const char* env = std::getenv("KVSERVE_SOURCE_DIR");
  const std::filesystem::path root = env != nullptr ? env : KVSERVE_SOURCE_DIR;
  const std::filesystem::path model = root / "models" / "kvs-qwen2-9m";
  auto scores = HeadScores::Load((model / "head_scores.json").string());
  ASSERT_TRUE(scores.ok()) << scores.status().ToString() << " (set KVSERVE_SOURCE_DIR to the repository)";
  std::vector<std::filesystem::path> tables;
  for (const auto& entry : std::filesystem::directory_iterator(root / "configs" / "profiles"))
    if (entry.path().extension() == ".json") tables.push_back(entry.path());
  std::sort(tables.begin(), tables.end());
  ASSERT_GE(tables.size(), 5u);
  std::mt19937 rng(19);
#ifdef KVSERVE_SIM
  // The host simulator runs a GPU thread as a fiber: shorter prompts (still
  // longer than duo's sinks + recent window, so its pruning is exercised).
  const int long_tokens = 520, short_tokens = 130;
#else
  const int long_tokens = 2312, short_tokens = 700;
#endif
  const KvShape long_shape{scores->layers, scores->kv_heads, long_tokens, 64};
  const KvShape short_shape{scores->layers, scores->kv_heads, short_tokens, 64};
  const HostCache wire = MakeCache(rng, long_shape, DType::kF16, 0);
  const HostCache paged = MakeCache(rng, short_shape, DType::kBF16, 1);
  int checked = 0, cpu_codec = 0;
  for (const auto& path : tables) {
    auto table = ProfileTable::Load(path.string());
    ASSERT_TRUE(table.ok()) << path << ": " << table.status().ToString();
    for (const ProfileCost& row : table->profiles()) {
      auto profile = Profile::Parse(row.spec);
      ASSERT_TRUE(profile.ok()) << row.spec;
      const Status supported = CheckSupported(*profile, long_shape);
      if (supported.code() == StatusCode::kNotSupported) {
        ++cpu_codec;
        continue;
      }
      ASSERT_TRUE(supported.ok()) << row.spec << ": " << supported.ToString();
      CheckConsistent(*profile, wire, path.filename().string(), &*scores);
      if (HasFatalFailure()) return;
      CheckConsistent(*profile, paged, path.filename().string(), &*scores);
      if (HasFatalFailure()) return;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  std::printf("shipped table rows: %d byte-identical (CUDA codec and CPU), %d with a CPU-only codec (zstd, lz4)\n",
              checked, cpu_codec);
}


TEST(CudaDevice, RandomProfilesAreByteIdentical) {
  SKIP_WITHOUT_GPU();
  int wanted = 240;
  if (const char* env = std::getenv("KVSERVE_CUDA_TEST_PROFILES")) wanted = std::atoi(env);
  std::mt19937 rng(1234);
  int tested = 0, attempts = 0;
  while (tested < wanted && attempts < 100 * wanted) {
    ++attempts;
    // Shapes the CPU encoder rejects (e.g. a channel group not dividing
    // head_dim) are not consistency cases.
    static const int kDims[] = {32, 64, 128, 128, 128, 256};
    const std::optional<RandomCase> c = DrawCase(rng, kDims, 4);
    if (!c) continue;
    CheckConsistent(c->profile, c->cache, "random #" + std::to_string(tested));
    if (HasFatalFailure()) return;
    ++tested;
  }
  EXPECT_EQ(tested, wanted);
  std::printf("random profiles tested: %d (of %d drawn)\n", tested, attempts);
}

// The plans pack_warps.cu encodes (identity + pack, head_dim 128, bf16 or
// f16 rows of 16 bytes, in every layout that has them), and some it leaves
// to the tile kernel (odd channel-axis bit widths, small token groups).
TEST(CudaDevice, WarpKernelProfilesAreByteIdentical) {
  SKIP_WITHOUT_GPU();
  int wanted = 80;
  if (const char* env = std::getenv("KVSERVE_CUDA_TEST_PROFILES")) wanted = std::atoi(env);
  std::mt19937 rng(4321);
  int tested = 0, warp_plans = 0, attempts = 0;
  while (tested < wanted && attempts < 100 * wanted) {
    ++attempts;
    auto profile = Profile::Parse(RandomSpec(rng, /*pack_only=*/true));
    if (!profile.ok()) continue;
    const KvShape shape{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 3),
                        1 + static_cast<int>(rng() % 700), 128};
    const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 3);
    EncodeOptions opt;
    opt.head_scores = &scores;
    auto cpu = EncoderContext::Create(*profile, opt);
    if (!cpu.ok()) continue;
    const DType dtype = rng() % 2 == 0 ? DType::kBF16 : DType::kF16;
    static const int kLayouts[] = {0, 1, 2, 4};
    const HostCache cache = MakeCache(rng, shape, dtype, kLayouts[rng() % 4]);
    CountingSink counting;
    if (!(*cpu)->Encode(cache.view(), counting).ok()) continue;
    auto plan = BuildPlan(*profile, shape, dtype, {}, false);
    if (plan.ok() && plan->pack_warps) ++warp_plans;
    CheckConsistent(*profile, cache, "warp #" + std::to_string(tested));
    if (HasFatalFailure()) return;
    ++tested;
  }
  EXPECT_EQ(tested, wanted);
  EXPECT_GE(warp_plans, tested / 3);
  std::printf("warp-kernel profiles tested: %d (%d warp plans, %d drawn)\n", tested, warp_plans, attempts);
}

TEST(CudaDevice, LayerAtATimeEqualsWholeFrame) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  const HostCache cache = MakeCache(rng, KvShape{4, 2, 333, 128}, DType::kBF16, 1);
  // mixhq: 2- and 4-bit heads in one layer, so a layer's warp-kernel jobs
  // come from several code paths.
  const HeadScores scores = SynthesizeHeadScores(cache.shape.layers, cache.shape.kv_heads, 3);
  for (const char* spec : {"kivi-2", "mixhq", "kvserve-h2r", "cachegen"}) {
    const Profile p = *Profile::Parse(spec);
    const GpuFrame whole = GpuEncode(p, cache, &scores);
    const GpuFrame layered = GpuEncode(p, cache, &scores, /*by_layer=*/true);
    ASSERT_TRUE(whole.status.ok() && layered.status.ok()) << spec;
    EXPECT_EQ(whole.bytes, layered.bytes) << spec;
  }
}

// The byte ranges of each layer's records in a frame (records are in plan
// order: a layer's records are contiguous), from the record headers.
std::vector<std::pair<size_t, size_t>> LayerRanges(const std::vector<uint8_t>& frame, size_t header_bytes,
                                                   int layers) {
  std::vector<size_t> starts;
  for (size_t p = header_bytes; p + 20 <= frame.size();) {
    starts.push_back(p);
    uint32_t body = 0;
    std::memcpy(&body, frame.data() + p + 16, 4);
    p += 24 + body;
  }
  const size_t per_layer = starts.size() / layers;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (int l = 0; l < layers; ++l) {
    const size_t b = starts[l * per_layer];
    const size_t e = l + 1 < layers ? starts[(l + 1) * per_layer] : frame.size();
    ranges.emplace_back(b, e);
  }
  return ranges;
}

// DecodeLayer on each layer's records (layers in a random order, one
// layer's records shuffled) gives the whole-frame decode's values and mask.
TEST(CudaDevice, DecodeLayerEqualsWholeFrame) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  const KvShape shape{3, 2, 333, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 3);
  for (const char* spec : {"kivi-2", "none", "duo", "kvserve-h2r"}) {
    SCOPED_TRACE(spec);
    const Profile p = *Profile::Parse(spec);
    const std::vector<uint8_t> frame = CpuEncode(p, cache.view(), &scores);
    const Decoded whole = CpuDecode(frame, shape, DType::kBF16);
    ASSERT_TRUE(whole.status.ok());
    auto dec = Decoder::Create(frame);
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    const auto ranges = LayerRanges(frame, (*dec)->HeaderBytes(), shape.layers);
    const size_t out_bytes = whole.values.size(), mask_bytes = whole.mask.size();
    DeviceBuffer<> ws((*dec)->WorkspaceBytes()), out(out_bytes), mask(mask_bytes);
    CUDA_OK(cudaMemset(out.ptr, 0x5A, out_bytes));
    CUDA_OK(cudaMemset(mask.ptr, 7, mask_bytes));
    MutableKvView view{out.ptr, DType::kBF16, shape, KvStrides::Contiguous(shape)};
    std::vector<int> order(shape.layers);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::unique_ptr<DeviceBuffer<>>> keep_alive;
    for (int l : order) {
      std::vector<uint8_t> bytes(frame.begin() + ranges[l].first, frame.begin() + ranges[l].second);
      if (l == order.front()) {  // this layer's records in reverse order
        std::vector<std::vector<uint8_t>> recs;
        for (size_t q = 0; q < bytes.size();) {
          uint32_t body = 0;
          std::memcpy(&body, bytes.data() + q + 16, 4);
          recs.emplace_back(bytes.begin() + q, bytes.begin() + q + 24 + body);
          q += 24 + body;
        }
        bytes.clear();
        for (auto it = recs.rbegin(); it != recs.rend(); ++it) bytes.insert(bytes.end(), it->begin(), it->end());
      }
      keep_alive.push_back(std::make_unique<DeviceBuffer<>>(bytes.size()));
      CUDA_OK(cudaMemcpy(keep_alive.back()->ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      ASSERT_TRUE((*dec)->DecodeLayer(l, keep_alive.back()->ptr, bytes.size(), view, mask.ptr, ws.ptr, nullptr).ok());
    }
    ASSERT_TRUE((*dec)->Check(ws.ptr, nullptr).ok());
    std::vector<uint8_t> values(out_bytes), m(mask_bytes);
    CUDA_OK(cudaMemcpy(values.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(m.data(), mask.ptr, mask_bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(FirstDifference(values, whole.values), SIZE_MAX);
    EXPECT_EQ(m, whole.mask);
    // A layer's records with a flipped bit are reported at Check.
    std::vector<uint8_t> bad(frame.begin() + ranges[1].first, frame.begin() + ranges[1].second);
    bad[bad.size() / 2] ^= 0x10;
    DeviceBuffer<> dbad(bad.size());
    CUDA_OK(cudaMemcpy(dbad.ptr, bad.data(), bad.size(), cudaMemcpyHostToDevice));
    ASSERT_TRUE((*dec)->DecodeLayer(1, dbad.ptr, bad.size(), view, mask.ptr, ws.ptr, nullptr).ok());
    EXPECT_EQ((*dec)->Check(ws.ptr, nullptr).code(), StatusCode::kCorruption);
    EXPECT_EQ((*dec)->DecodeLayer(shape.layers, dbad.ptr, bad.size(), view, mask.ptr, ws.ptr, nullptr).code(),
              StatusCode::kInvalidArgument);
  }
}

// StaticLayerRecords names exactly the bytes of each layer's records (pack
// profiles), for the encoder and the decoder alike; rans has none.
TEST(CudaDevice, StaticLayerRecordsAreTheLayersBytes) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  const KvShape shape{3, 2, 200, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 5);
  for (const char* spec : {"kivi-2", "none", "duo", "kivi-4"}) {
    SCOPED_TRACE(spec);
    const Profile p = *Profile::Parse(spec);
    const std::vector<uint8_t> frame = CpuEncode(p, cache.view(), &scores);
    auto enc = Encoder::Create(p, shape, DType::kBF16, &scores);
    auto dec = Decoder::Create(frame);
    ASSERT_TRUE(enc.ok() && dec.ok());
    const auto ranges = LayerRanges(frame, (*dec)->HeaderBytes(), shape.layers);
    for (int l = 0; l < shape.layers; ++l)
      for (const Result<ByteRange>& r : {(*enc)->StaticLayerRecords(l), (*dec)->StaticLayerRecords(l)}) {
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->offset, ranges[l].first);
        EXPECT_EQ(r->offset + r->bytes, ranges[l].second);
      }
    EXPECT_EQ((*enc)->StaticLayerRecords(shape.layers).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*dec)->StaticLayerRecords(-1).status().code(), StatusCode::kInvalidArgument);
  }
  auto rans = Encoder::Create(*Profile::Parse("kvserve-h2r"), shape, DType::kBF16);
  ASSERT_TRUE(rans.ok());
  EXPECT_EQ((*rans)->StaticLayerRecords(0).status().code(), StatusCode::kNotSupported);
}

// A cache whose every V lies below its K (per-layer tensors allocated V
// first) is read through a negative kind stride, giving the contiguous
// cache's frame; a negative head stride is still refused.
TEST(CudaDevice, NegativeKindStrideEqualsContiguous) {
  SKIP_WITHOUT_GPU();
  const KvShape shape{2, 2, 150, 64};
  for (const char* spec : {"kivi-2", "none", "kvserve-h2r"}) {
    SCOPED_TRACE(spec);
    std::mt19937 a(9), b(9);
    const HostCache flat = MakeCache(a, shape, DType::kBF16, 0);
    const HostCache swapped = MakeCache(b, shape, DType::kBF16, 4);
    const Profile p = *Profile::Parse(spec);
    const GpuFrame g = GpuEncode(p, swapped, nullptr);
    ASSERT_TRUE(g.status.ok()) << g.status.ToString();
    EXPECT_EQ(FirstDifference(g.bytes, CpuEncode(p, flat.view(), nullptr)), SIZE_MAX);
  }
  HostCache bad = [&] {
    std::mt19937 c(9);
    return MakeCache(c, shape, DType::kBF16, 0);
  }();
  bad.strides.head = -bad.strides.head;
  EXPECT_EQ(GpuEncode(*Profile::Parse("kivi-2"), bad, nullptr).status.code(), StatusCode::kInvalidArgument);
}


// Frames encoded from pages (vLLM's two layouts, FlashInfer NHD and HND;
// random block tables; block sizes 16 and 32) equal the contiguous cache's
// frame, whole and layer by layer; frames decoded into a receiver's pages
// (another layout, block size and table) hold the contiguous decode's
// values and mask.
TEST(CudaDevice, PagedFramesEqualContiguousFrames) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  const KvShape shape{2, 2, 300, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 7);
  const PagedLayout layouts[] = {PagedLayout::kVllm, PagedLayout::kVllmBlockFirst, PagedLayout::kFlashInferNhd,
                                 PagedLayout::kFlashInferHnd};
  const char* specs[] = {"kivi-2", "none", "kvserve-h2r", "duo"};
  int round = 0;
  for (PagedLayout layout : layouts)
    for (int block_size : {16, 32}) {
      const char* spec = specs[round++ % 4];
      SCOPED_TRACE(std::string(PagedLayoutName(layout)) + " block " + std::to_string(block_size) + " " + spec);
      const Profile p = *Profile::Parse(spec);
      const std::vector<uint8_t> want = CpuEncode(p, cache.view(), &scores);
      DevicePagedCache sender(rng, shape, DType::kBF16, layout, block_size, &cache);
      const PagedKvView view = sender.view();

      auto enc = Encoder::Create(p, shape, DType::kBF16, &scores);
      ASSERT_TRUE(enc.ok());
      DeviceBuffer<> ws((*enc)->WorkspaceBytes()), frame((*enc)->MaxFrameBytes());
      DeviceBuffer<uint64_t> size(8);
      for (bool by_layer : {false, true}) {
        if (by_layer) {
          ASSERT_TRUE((*enc)->Begin(ws.ptr, frame.ptr, nullptr).ok());
          for (int l = 0; l < shape.layers; ++l)
            ASSERT_TRUE((*enc)->EncodeLayerPaged(l, view, ws.ptr, frame.ptr, nullptr).ok());
          ASSERT_TRUE((*enc)->Finish(ws.ptr, size.ptr, nullptr).ok());
        } else {
          ASSERT_TRUE((*enc)->EncodePaged(view, ws.ptr, frame.ptr, size.ptr, nullptr).ok());
        }
        ASSERT_TRUE((*enc)->Check(ws.ptr, nullptr).ok());
        uint64_t n = 0;
        (void)cudaMemcpy(&n, size.ptr, 8, cudaMemcpyDeviceToHost);
        std::vector<uint8_t> got(n);
        (void)cudaMemcpy(got.data(), frame.ptr, n, cudaMemcpyDeviceToHost);
        EXPECT_EQ(FirstDifference(got, want), SIZE_MAX) << (by_layer ? "layer by layer" : "whole");
      }

      // Receive into other pages: the next layout, the other block size, a new table.
      const PagedLayout rlayout = layouts[(static_cast<int>(layout) + 1) % 4];
      DevicePagedCache receiver(rng, shape, DType::kBF16, rlayout, block_size == 16 ? 32 : 16);
      const Decoded whole = CpuDecode(want, shape, DType::kBF16);
      ASSERT_TRUE(whole.status.ok());
      auto dec = Decoder::Create(want);
      ASSERT_TRUE(dec.ok());
      DeviceBuffer<> dws((*dec)->WorkspaceBytes()), dframe(want.size()), mask(whole.mask.size());
      (void)cudaMemcpy(dframe.ptr, want.data(), want.size(), cudaMemcpyHostToDevice);
      ASSERT_TRUE((*dec)->DecodePaged(dframe.ptr, want.size(), receiver.mutable_view(), mask.ptr, dws.ptr, nullptr).ok());
      ASSERT_TRUE((*dec)->Check(dws.ptr, nullptr).ok());
      const std::vector<uint8_t> values = receiver.Contiguous();
      std::vector<uint8_t> m(whole.mask.size());
      (void)cudaMemcpy(m.data(), mask.ptr, m.size(), cudaMemcpyDeviceToHost);
      EXPECT_EQ(FirstDifference(values, whole.values), SIZE_MAX);
      EXPECT_EQ(m, whole.mask);
    }
  // A table naming a block past the cache is refused before any launch.
  HostPages bad = MakePages(rng, shape, DType::kBF16, PagedLayout::kVllm, 16);
  DevicePages bdev(bad);
  bad.table[1] = bad.num_blocks;
  const PagedKvLayers blayers = LayersOf(bad, DType::kBF16, shape, bdev.pointers);
  PagedKvView bview = *blayers.View(bad.table, shape.tokens);
  auto enc = Encoder::Create(*Profile::Parse("kivi-2"), shape, DType::kBF16);
  DeviceBuffer<> ws((*enc)->WorkspaceBytes()), frame((*enc)->MaxFrameBytes());
  EXPECT_EQ((*enc)->EncodePaged(bview, ws.ptr, frame.ptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(CudaDevice, RecordsInAnyOrderAndCorruptionIsDetected) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  const HostCache cache = MakeCache(rng, KvShape{2, 2, 300, 64}, DType::kF16, 0);
  for (const char* spec : {"kivi-4", "kvserve-h4r"}) {
    const Profile p = *Profile::Parse(spec);
    const GpuFrame g = GpuEncode(p, cache, nullptr);
    ASSERT_TRUE(g.status.ok());
    const Decoded ref = CpuDecode(g.bytes, cache.shape, cache.dtype);
    ASSERT_TRUE(ref.status.ok());
    // In plan order the parallel location finds every record (the
    // sequential walk does not run).
    const Decoded plain = GpuDecode(g.bytes, cache.shape, cache.dtype);
    ASSERT_TRUE(plain.status.ok()) << plain.status.ToString();
    EXPECT_EQ(plain.values, ref.values) << spec;
    EXPECT_EQ(plain.locate_flags, 0u) << spec;
    // Swap the first two records: still a valid frame.
    auto info = InspectFrame(g.bytes);
    ASSERT_TRUE(info.ok());
    const ChunkEntry a = info->chunks[0], b = info->chunks[1];
    std::vector<uint8_t> swapped(g.bytes.begin(), g.bytes.begin() + a.offset);
    swapped.insert(swapped.end(), g.bytes.begin() + b.offset, g.bytes.begin() + b.offset + b.size);
    swapped.insert(swapped.end(), g.bytes.begin() + a.offset, g.bytes.begin() + a.offset + a.size);
    swapped.insert(swapped.end(), g.bytes.begin() + b.offset + b.size, g.bytes.end());
    const Decoded d = GpuDecode(swapped, cache.shape, cache.dtype);
    ASSERT_TRUE(d.status.ok()) << d.status.ToString();
    EXPECT_EQ(d.values, ref.values) << spec;
    EXPECT_NE(d.locate_flags, 0u) << spec << ": out of order, the sequential walk runs";
    // Any flipped byte after the header is caught (checksums) without a crash.
    const size_t header = g.bytes.size() - std::accumulate(info->chunks.begin(), info->chunks.end(), size_t{0},
                                                           [](size_t s, const ChunkEntry& c) { return s + c.size; });
    for (int k = 0; k < 20; ++k) {
      std::vector<uint8_t> bad = g.bytes;
      const size_t at = header + rng() % (bad.size() - header);
      bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      const Decoded e = GpuDecode(bad, cache.shape, cache.dtype);
      EXPECT_EQ(e.status.code(), StatusCode::kCorruption) << spec << " byte " << at;
    }
    std::vector<uint8_t> truncated(g.bytes.begin(), g.bytes.end() - 5);
    EXPECT_EQ(GpuDecode(truncated, cache.shape, cache.dtype).status.code(), StatusCode::kCorruption);
  }
}

TEST(CudaDevice, NonFiniteInputIsRejected) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  HostCache cache = MakeCache(rng, KvShape{1, 2, 300, 128}, DType::kF32, 0);
  const float nan = std::nanf("");
  std::memcpy(cache.bytes.data() + 4 * 1000, &nan, 4);
  const GpuFrame g = GpuEncode(*Profile::Parse("kivi-2"), cache, nullptr);
  EXPECT_EQ(g.status.code(), StatusCode::kInvalidArgument) << g.status.ToString();
  const GpuFrame raw = GpuEncode(*Profile::Parse("none"), cache, nullptr);
  EXPECT_TRUE(raw.status.ok());  // raw regions are bytes, never checked
  // bf16 and f16 (the warp kernel): NaN and infinities in keys and values.
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (int k = 0; k < 2; ++k) {
      const bool bf16 = dtype == DType::kBF16;  // NaN, -inf, +inf
      for (const uint16_t bits : {uint16_t(bf16 ? 0x7FC0 : 0x7E00), uint16_t(bf16 ? 0xFF80 : 0xFC00),
                                  uint16_t(bf16 ? 0x7F80 : 0x7C00)}) {
        HostCache c = MakeCache(rng, KvShape{1, 2, 300, 128}, dtype, 0);
        const size_t elem = static_cast<size_t>(k) * 2 * 300 * 128 + 128 * (rng() % 150) + rng() % 128;
        std::memcpy(c.bytes.data() + 2 * elem, &bits, 2);
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " kind " + std::to_string(k) + " bits " + std::to_string(bits));
        const GpuFrame f = GpuEncode(*Profile::Parse("kivi-2"), c, nullptr);
        EXPECT_EQ(f.status.code(), StatusCode::kInvalidArgument) << f.status.ToString();
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::cuda

// ------------------------------------------------------------ device pieces
// The building blocks the kernels use, run on the device and compared with
// their host reference: row loads from a strided view, and grid params.
namespace kvserve::cuda {
namespace {

template <int D>
__global__ void LoadRowsKernel(DeviceView v, int rows, float* out) {
  using G = RowGeo<D>;
  const int warp = threadIdx.x >> 5;
  for (int r0 = warp * G::kRowsPerWarp; r0 < rows; r0 += (blockDim.x / 32) * G::kRowsPerWarp) {
    const int r = r0 + G::Sub();
    float x[kLaneElems];
    LoadRow<D>(v, 0, 0, 0, r < rows ? r : 0, x);
    if (r < rows)
      for (int j = 0; j < kLaneElems; ++j) out[static_cast<int64_t>(r) * D + kLaneElems * G::Part() + j] = x[j];
  }
}

__global__ void GridKernel(const int* levels, const uint8_t* flags, const float* lo, const float* hi,
                           int n, uint32_t* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float scale = -1, zero = -1;
    const uint32_t code = GridParamsFor(levels[i], flags[i] & 1, flags[i] & 2, lo[i], hi[i], &scale, &zero);
    out[3 * i] = code;
    out[3 * i + 1] = FloatBits(scale);
    out[3 * i + 2] = FloatBits(zero);
  }
}

TEST(CudaDebug, DeviceRowLoadsMatchHost) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const HostCache cache = MakeCache(rng, KvShape{1, 1, 64, 128}, dtype, 0);
    DeviceBuffer<> in(cache.bytes.size());
    DeviceBuffer<float> out(64 * 128 * 4);
    CUDA_OK(cudaMemcpy(in.ptr, cache.bytes.data(), cache.bytes.size(), cudaMemcpyHostToDevice));
    DeviceView v{};
    v.data = in.ptr;
    v.layer = cache.strides.layer;
    v.kind = cache.strides.kind;
    v.head = cache.strides.head;
    v.token = cache.strides.token;
    v.dim = cache.strides.dim;
    v.dtype = static_cast<int>(dtype);
    v.elem_bytes = static_cast<int>(DTypeSize(dtype));
    for (int vec = 0; vec < 2; ++vec) {
      v.vec16 = vec;
      KV_LAUNCH(LoadRowsKernel<128>, 1, 256)(v, 64, out.ptr);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> got(64 * 128);
      CUDA_OK(cudaMemcpy(got.data(), out.ptr, got.size() * 4, cudaMemcpyDeviceToHost));
      for (int t = 0; t < 64; ++t)
        for (int d = 0; d < 128; ++d) {
          const float ref = LoadAsFloat(reinterpret_cast<const std::byte*>(cache.view().At(0, 0, 0, t, d)), dtype);
          ASSERT_EQ(FloatBits(got[t * 128 + d]), FloatBits(ref)) << "dtype " << DTypeName(dtype) << " vec " << vec
                                                                 << " t " << t << " d " << d;
        }
    }
  }
}

TEST(CudaDebug, DeviceGridParamsMatchHost) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int n = 100000;
  std::vector<int> levels(n);
  std::vector<uint8_t> flags(n);
  std::vector<float> lo(n), hi(n);
  for (int i = 0; i < n; ++i) {
    levels[i] = 2 + static_cast<int>(rng() % 255);
    flags[i] = static_cast<uint8_t>(rng() % 4);
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);
    float a = u(rng) * mag, b = u(rng) * mag;
    if (a > b) std::swap(a, b);
    lo[i] = a;
    hi[i] = b;
  }
  DeviceBuffer<int> dl(4 * n);
  DeviceBuffer<uint8_t> df(n);
  DeviceBuffer<float> dlo(4 * n), dhi(4 * n);
  DeviceBuffer<uint32_t> dout(12 * n);
  CUDA_OK(cudaMemcpy(dl.ptr, levels.data(), 4 * n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(df.ptr, flags.data(), n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dlo.ptr, lo.data(), 4 * n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dhi.ptr, hi.data(), 4 * n, cudaMemcpyHostToDevice));
  KV_LAUNCH(GridKernel, 64, 256)(dl.ptr, df.ptr, dlo.ptr, dhi.ptr, n, dout.ptr);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint32_t> out(3 * n);
  CUDA_OK(cudaMemcpy(out.data(), dout.ptr, 12 * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i) {
    float scale = -1, zero = -1;
    const uint32_t code = GridParamsFor(levels[i], flags[i] & 1, flags[i] & 2, lo[i], hi[i], &scale, &zero);
    if (code != out[3 * i] || (code == 0 && (FloatBits(scale) != out[3 * i + 1] || FloatBits(zero) != out[3 * i + 2]))) {
      ++bad;
      ADD_FAILURE() << "levels " << levels[i] << " flags " << int(flags[i]) << " lo " << lo[i] << " hi " << hi[i]
                    << ": host " << code << " " << std::hex << FloatBits(scale) << " " << FloatBits(zero)
                    << " device " << out[3 * i] << " " << out[3 * i + 1] << " " << out[3 * i + 2] << std::dec;
    }
  }
}

TEST(CudaDebug, EncodeWritesEveryByte) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  const HostCache cache = MakeCache(rng, KvShape{1, 1, 64, 128}, DType::kF32, 0);
  for (const char* spec : {"identity+kivi(k=2,v=2)+pack", "identity+uniform(axis_k=token,axis_v=token)+pack"}) {
    const Profile p = *Profile::Parse(spec);
    const std::vector<uint8_t> cpu = CpuEncode(p, cache.view(), nullptr);
    auto enc = Encoder::Create(p, cache.shape, cache.dtype, nullptr);
    ASSERT_TRUE(enc.ok());
    DeviceBuffer<> in(cache.bytes.size()), ws((*enc)->WorkspaceBytes()), frame((*enc)->MaxFrameBytes());
    CUDA_OK(cudaMemcpy(in.ptr, cache.bytes.data(), cache.bytes.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(frame.ptr, 0xCD, (*enc)->MaxFrameBytes()));
    KvView dv = cache.view();
    dv.data = in.ptr;
    ASSERT_TRUE((*enc)->Encode(dv, ws.ptr, frame.ptr, nullptr, nullptr).ok());
    ASSERT_TRUE((*enc)->Check(ws.ptr, nullptr).ok());
    std::vector<uint8_t> gpu(cpu.size());
    CUDA_OK(cudaMemcpy(gpu.data(), frame.ptr, gpu.size(), cudaMemcpyDeviceToHost));
    size_t diffs = 0, poison = 0, first = SIZE_MAX;
    for (size_t i = 0; i < cpu.size(); ++i)
      if (gpu[i] != cpu[i]) {
        ++diffs;
        poison += gpu[i] == 0xCD;
        if (first == SIZE_MAX) first = i;
      }
    std::string dump;
    if (first != SIZE_MAX) {
      char b[16];
      for (size_t i = first; i < std::min(cpu.size(), first + 24); ++i) {
        std::snprintf(b, sizeof(b), "%02x/%02x ", gpu[i], cpu[i]);
        dump += b;
      }
    }
    EXPECT_EQ(diffs, 0u) << spec << ": " << diffs << " bytes differ (" << poison << " never written), first at "
                         << first << " of " << cpu.size() << ", gpu/cpu: " << dump;
  }
}

}  // namespace
}  // namespace kvserve::cuda
