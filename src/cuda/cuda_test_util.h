// Copyright kvserve authors. Helpers of the CUDA consistency tests
// (cuda_test.cu, windows_test.cu): device buffers, synthetic caches in
// several layouts, the CPU reference's encode and decode, random profile
// specs and paged caches. Test-only; included once per test binary.
#ifndef KVSERVE_CUDA_CUDA_TEST_UTIL_H_
#define KVSERVE_CUDA_CUDA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "kvserve/codec.h"
#include "kvserve/cuda.h"
#include "kvserve/kv_file.h"
#include "kvserve/kv.h"
#include "kvserve/paged.h"
#include "kvserve/profile.h"

// Skips a GPU test on a machine without a CUDA device.
#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    if (!::kvserve::cuda::Available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace kvserve::cuda::testing {


template <typename T = uint8_t>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), n == 0 ? 1 : n) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A host KV cache in one of several layouts, with the structure of a real
// one (channel offsets, outlier channels, AR(1) along tokens).
struct HostCache {
  KvShape shape;
  DType dtype;
  KvStrides strides;
  std::vector<uint8_t> bytes;  // the whole (possibly padded) buffer
  size_t origin = 0;           // byte offset of element [0][0][0][0][0]
  KvView view() const { return KvView{bytes.data() + origin, dtype, shape, strides}; }
};

inline HostCache MakeCache(std::mt19937& rng, const KvShape& shape, DType dtype, int layout) {
  HostCache c{shape, dtype, {}, {}};
  const int64_t D = shape.head_dim, T = shape.tokens, H = shape.kv_heads, L = shape.layers;
  int64_t total = 0;
  switch (layout) {
    case 1:  // token-major, as a paged engine stores a layer: [layer][token][kind][head][dim]
      c.strides.dim = 1;
      c.strides.head = D;
      c.strides.kind = H * D;
      c.strides.token = 2 * H * D;
      c.strides.layer = T * 2 * H * D;
      total = L * c.strides.layer;
      break;
    case 2:  // padded rows (dim stride 1, token stride D + 8)
      c.strides.dim = 1;
      c.strides.token = D + 8;
      c.strides.head = (D + 8) * T;
      c.strides.kind = c.strides.head * H;
      c.strides.layer = c.strides.kind * 2;
      total = L * c.strides.layer;
      break;
    case 3:  // dim not contiguous: [layer][kind][head][dim][token]
      c.strides.token = 1;
      c.strides.dim = T;
      c.strides.head = D * T;
      c.strides.kind = H * D * T;
      c.strides.layer = 2 * H * D * T;
      total = L * c.strides.layer;
      break;
    case 4:  // each layer's V before its K (negative kind stride)
      c.strides = KvStrides::Contiguous(shape);
      c.strides.kind = -H * T * D;
      total = shape.NumElements();
      break;
    default:
      c.strides = KvStrides::Contiguous(shape);
      total = shape.NumElements();
  }
  const size_t es = DTypeSize(dtype);
  if (layout == 4) c.origin = static_cast<size_t>(H * T * D) * es;
  c.bytes.assign(static_cast<size_t>(total) * es, 0xA5);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 8) - 3);
  for (int l = 0; l < L; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < H; ++h) {
        std::vector<float> mean(D), scale(D), prev(D, 0.f);
        for (int d = 0; d < D; ++d) {
          mean[d] = k == 0 ? normal(rng) * 2.f : 0.f;
          scale[d] = (rng() % 16 == 0) ? 8.f : 1.f;
        }
        for (int t = 0; t < T; ++t)
          for (int d = 0; d < D; ++d) {
            prev[d] = 0.8f * prev[d] + 0.3f * normal(rng);
            float x = magnitude * (mean[d] + scale[d] * prev[d]);
            if (rng() % 97 == 0) x = 0.0f;
            if (rng() % 211 == 0) x = -0.0f;
            const int64_t e = l * c.strides.layer + k * c.strides.kind + h * c.strides.head +
                              t * c.strides.token + d * c.strides.dim;
            StoreFromFloat(x, reinterpret_cast<std::byte*>(c.bytes.data() + c.origin + e * es), dtype);
          }
      }
  return c;
}

inline std::vector<uint8_t> CpuEncode(const Profile& p, const KvView& kv, const HeadScores* scores) {
  EncodeOptions opt;
  opt.head_scores = scores;
  auto enc = EncoderContext::Create(p, opt);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  std::vector<uint8_t> out;
  VectorSink sink(&out);
  const Status st = (*enc)->Encode(kv, sink);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

struct GpuFrame {
  Status status;
  std::vector<uint8_t> bytes;
};

inline GpuFrame GpuEncode(const Profile& p, const HostCache& cache, const HeadScores* scores,
                   bool by_layer = false) {
  GpuFrame r;
  auto enc = Encoder::Create(p, cache.shape, cache.dtype, scores);
  if (!enc.ok()) {
    r.status = enc.status();
    return r;
  }
  DeviceBuffer<> in(cache.bytes.size()), ws((*enc)->WorkspaceBytes()),
      frame((*enc)->MaxFrameBytes());
  DeviceBuffer<uint64_t> size(8);
  (void)cudaMemcpy(in.ptr, cache.bytes.data(), cache.bytes.size(), cudaMemcpyHostToDevice);
  KvView dv = cache.view();
  dv.data = in.ptr + cache.origin;
  cudaStream_t stream = nullptr;
  if (by_layer) {
    r.status = (*enc)->Begin(ws.ptr, frame.ptr, stream);
    for (int l = 0; l < cache.shape.layers && r.status.ok(); ++l)
      r.status = (*enc)->EncodeLayer(l, dv, ws.ptr, frame.ptr, stream);
    if (r.status.ok()) r.status = (*enc)->Finish(ws.ptr, size.ptr, stream);
  } else {
    r.status = (*enc)->Encode(dv, ws.ptr, frame.ptr, size.ptr, stream);
  }
  if (!r.status.ok()) return r;
  r.status = (*enc)->Check(ws.ptr, stream);
  if (!r.status.ok()) return r;
  uint64_t n = 0;
  (void)cudaMemcpy(&n, size.ptr, 8, cudaMemcpyDeviceToHost);
  EXPECT_LE(n, (*enc)->MaxFrameBytes());
  r.bytes.resize(n);
  (void)cudaMemcpy(r.bytes.data(), frame.ptr, n, cudaMemcpyDeviceToHost);
  return r;
}

struct Decoded {
  Status status;
  std::vector<uint8_t> values;  // contiguous
  std::vector<uint8_t> mask;
  // The workspace error block's flags word after Decode, before Check
  // resets it (decode.cu's kErrFlags; the block is at workspace offset 0):
  // 0 when the parallel record location found every record; otherwise the
  // sequential walk ran.
  uint32_t locate_flags = 0;
  size_t windows = 0;  // a windowed decode's window count
};

inline Decoded GpuDecode(const std::vector<uint8_t>& frame, const KvShape& shape, DType dtype) {
  Decoded r;
  auto dec = Decoder::Create(frame);
  if (!dec.ok()) {
    r.status = dec.status();
    return r;
  }
  const size_t out_bytes = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  const size_t mask_bytes = static_cast<size_t>(shape.layers) * 2 * shape.kv_heads * shape.tokens;
  DeviceBuffer<> f(frame.size()), ws((*dec)->WorkspaceBytes()), out(out_bytes), mask(mask_bytes);
  (void)cudaMemcpy(f.ptr, frame.data(), frame.size(), cudaMemcpyHostToDevice);
  (void)cudaMemset(out.ptr, 0x5A, out_bytes);
  (void)cudaMemset(mask.ptr, 7, mask_bytes);
  MutableKvView view{out.ptr, dtype, shape, KvStrides::Contiguous(shape)};
  r.status = (*dec)->Decode(f.ptr, frame.size(), view, mask.ptr, ws.ptr, nullptr);
  uint32_t error_block[4] = {};  // read before Check, which resets it
  (void)cudaMemcpy(error_block, ws.ptr, sizeof(error_block), cudaMemcpyDeviceToHost);
  r.locate_flags = error_block[kErrFlags];
  if (r.status.ok()) r.status = (*dec)->Check(ws.ptr, nullptr);
  if (!r.status.ok()) return r;
  r.values.resize(out_bytes);
  r.mask.resize(mask_bytes);
  (void)cudaMemcpy(r.values.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost);
  (void)cudaMemcpy(r.mask.data(), mask.ptr, mask_bytes, cudaMemcpyDeviceToHost);
  return r;
}

inline Decoded CpuDecode(const std::vector<uint8_t>& frame, const KvShape& shape, DType dtype) {
  Decoded r;
  auto dec = DecoderContext::Create();
  r.values.assign(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype), 0x5A);
  std::vector<uint8_t> mask;
  MutableKvView view{r.values.data(), dtype, shape, KvStrides::Contiguous(shape)};
  r.status = (*dec)->Decode(frame, view, &mask);
  r.mask = mask;
  return r;
}

inline size_t FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return a.size() == b.size() ? SIZE_MAX : n;
}

// A random valid spec string drawn from the parameter table.
// pack_only: identity transform and pack codec (the warp kernel's plans).
inline std::string RandomSpec(std::mt19937& rng, bool pack_only = false) {
  auto pick = [&](std::initializer_list<const char*> v) {
    return std::string(*(v.begin() + rng() % v.size()));
  };
  auto chance = [&](int pct) { return static_cast<int>(rng() % 100) < pct; };
  const std::string t = pack_only ? "identity" : pick({"identity", "delta", "hadamard", "affine"});
  const std::string q = pick({"uniform", "kivi", "layermix", "mixhq", "tokenmix", "duo", "raw", "kivi", "uniform"});
  const std::string c = pack_only ? "pack" : pick({"pack", "rans", "rans"});
  std::vector<std::string> tp, qp, cp;
  int chunk_value = 256;
  if (chance(60)) chunk_value = std::stoi(pick({"16", "32", "64", "128", "512", "48", "96", "200", "1024"}));
  if (t == "hadamard" && chance(50)) tp.push_back("seed=" + std::to_string(rng() % 2147483647u));
  if (t == "delta" && chance(70)) tp.push_back("anchor=" + std::to_string(1 + rng() % chunk_value));
  if (q != "raw") {
    const bool bits_kv = q == "uniform" || q == "kivi" || q == "duo";
    if (bits_kv) {
      if (chance(40)) qp.push_back("k=" + std::to_string(1 + rng() % 8));
      else if (chance(25)) qp.push_back("levels_k=" + std::to_string(2 + rng() % 255));
      if (chance(40)) qp.push_back("v=" + std::to_string(1 + rng() % 8));
      else if (chance(25)) qp.push_back("levels_v=" + std::to_string(2 + rng() % 255));
    }
    if (chance(50)) qp.push_back("group=" + pick({"0", "1", "2", "4", "8", "16", "64", "128", "256"}));
    if ((q == "uniform" || q == "layermix") && chance(50)) qp.push_back("axis_k=" + pick({"token", "channel"}));
    if ((q == "uniform" || q == "layermix") && chance(50)) qp.push_back("axis_v=" + pick({"token", "channel"}));
    if (chance(30)) qp.push_back("sym=1");
    if (chance(40)) qp.push_back("residual=" + pick({"0", "1", "5", "64", "128", "300"}));
    if ((q == "tokenmix" || q == "duo") && chance(60)) qp.push_back("sinks=" + std::to_string(rng() % 40));
    if ((q == "tokenmix" || q == "duo") && chance(60)) qp.push_back("recent=" + std::to_string(rng() % 300));
    if (q == "mixhq" || q == "tokenmix") {
      const int low = 1 + rng() % 8, high = low + rng() % (9 - low);
      if (chance(60)) {
        qp.push_back("high=" + std::to_string(high));
        qp.push_back("low=" + std::to_string(low));
      }
    }
    if ((q == "mixhq" || q == "duo") && chance(50)) qp.push_back("heads=" + std::to_string(rng() % 101));
    if (chance(40)) qp.push_back("scale=" + pick({"f16", "f32"}));
    if (q == "layermix" && chance(60)) {
      qp.push_back("first=" + std::to_string(1 + rng() % 8));
      qp.push_back("last=" + std::to_string(1 + rng() % 8));
    }
  }
  if (c == "rans" && chance(60)) cp.push_back("table=" + std::to_string(8 + rng() % 8));
  auto comp = [](const std::string& name, const std::vector<std::string>& ps) {
    std::string s = name;
    if (!ps.empty()) {
      s += "(";
      for (size_t i = 0; i < ps.size(); ++i) s += (i ? "," : "") + ps[i];
      s += ")";
    }
    return s;
  };
  std::string spec = comp(t, tp) + "+" + comp(q, qp) + "+" + comp(c, cp);
  if (chunk_value != 256) spec += "+pipeline(chunk=" + std::to_string(chunk_value) + ")";
  return spec;
}
// One request's KV in an engine's per-layer page caches (host memory): a
// random block table over more blocks than it needs, other slots poisoned.
struct HostPages {
  std::vector<std::vector<uint8_t>> layers;
  std::vector<void*> pointers;
  std::vector<int32_t> table;
  int32_t num_blocks = 0, block_size = 0;
  PagedLayout layout = PagedLayout::kVllm;
};

inline HostPages MakePages(std::mt19937& rng, const KvShape& s, DType dtype, PagedLayout layout, int block_size) {
  HostPages p;
  p.layout = layout;
  p.block_size = block_size;
  const int32_t need = (s.tokens + block_size - 1) / block_size;
  p.num_blocks = need + 3 + static_cast<int32_t>(rng() % 5);
  const PagedLayerGeometry geo = *DescribePagedLayout(layout, p.num_blocks, block_size, s.kv_heads, s.head_dim);
  std::vector<int32_t> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(ids.begin(), ids.begin() + need);
  for (int l = 0; l < s.layers; ++l) {
    p.layers.emplace_back(static_cast<size_t>(geo.layer_elements) * DTypeSize(dtype), 0xA5);
    p.pointers.push_back(p.layers.back().data());
  }
  return p;
}

// Views of `pages` whose layer tensors start at `layer_data` (host or device).
inline PagedKvLayers LayersOf(const HostPages& pages, DType dtype, const KvShape& s, const std::vector<void*>& layer_data) {
  return *PagedKvLayers::Create(pages.layout, dtype, layer_data, pages.num_blocks, pages.block_size, s.kv_heads,
                                s.head_dim);
}

// Device copies of a request's page caches.
struct DevicePages {
  std::vector<std::unique_ptr<DeviceBuffer<>>> buffers;
  std::vector<void*> pointers;
  explicit DevicePages(const HostPages& p) {
    for (const auto& layer : p.layers) {
      buffers.push_back(std::make_unique<DeviceBuffer<>>(layer.size()));
      (void)cudaMemcpy(buffers.back()->ptr, layer.data(), layer.size(), cudaMemcpyHostToDevice);
      pointers.push_back(buffers.back()->ptr);
    }
  }
  void CopyBack(HostPages& p) const {
    for (size_t l = 0; l < buffers.size(); ++l)
      (void)cudaMemcpy(p.layers[l].data(), buffers[l]->ptr, p.layers[l].size(), cudaMemcpyDeviceToHost);
  }
};
// A random consistency case: a profile drawn from the parameter table
// (RandomSpec), a shape (1-3 layers and heads, 1-700 tokens, head_dim from
// `dims`), synthesized head scores, a dtype and a cache in one of the first
// `layouts` layouts of MakeCache -- or nullopt when the draw is no case (an
// invalid spec, or a shape the CPU encoder refuses for it).
struct RandomCase {
  Profile profile;
  KvShape shape;
  DType dtype = DType::kBF16;
  HeadScores scores;
  HostCache cache;
};

inline std::optional<RandomCase> DrawCase(std::mt19937& rng, std::span<const int> dims, int layouts) {
  auto profile = Profile::Parse(RandomSpec(rng));
  if (!profile.ok()) return std::nullopt;
  RandomCase c;
  c.profile = *profile;
  c.shape = KvShape{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 3),
                    1 + static_cast<int>(rng() % 700), dims[rng() % dims.size()]};
  c.scores = SynthesizeHeadScores(c.shape.layers, c.shape.kv_heads, 3);
  EncodeOptions opt;
  opt.head_scores = &c.scores;
  auto cpu = EncoderContext::Create(c.profile, opt);
  if (!cpu.ok()) return std::nullopt;
  c.dtype = static_cast<DType>(rng() % 3);
  c.cache = MakeCache(rng, c.shape, c.dtype, static_cast<int>(rng() % layouts));
  CountingSink counting;
  if (!(*cpu)->Encode(c.cache.view(), counting).ok()) return std::nullopt;
  return c;
}

// One request's KV in device page caches of `layout` and `block_size`
// (random block table over more blocks than it needs, other slots
// poisoned): filled with a cache's values (sender) or empty (receiver),
// read back as a contiguous [layer][kind][head][token][dim] buffer.
struct DevicePagedCache {
  KvShape shape;
  DType dtype;
  HostPages host;
  std::unique_ptr<DevicePages> device;
  std::unique_ptr<PagedKvLayers> layers;  // over the device pages

  DevicePagedCache(std::mt19937& rng, const KvShape& s, DType t, PagedLayout layout, int block_size,
                   const HostCache* fill = nullptr)
      : shape(s), dtype(t), host(MakePages(rng, s, t, layout, block_size)) {
    if (fill != nullptr) {
      const PagedKvLayers host_layers = LayersOf(host, t, s, host.pointers);
      EXPECT_TRUE(CopyToPages(fill->view(), *host_layers.MutableView(host.table, s.tokens)).ok());
    }
    device = std::make_unique<DevicePages>(host);
    layers = std::make_unique<PagedKvLayers>(LayersOf(host, t, s, device->pointers));
  }
  PagedKvView view() const { return *layers->View(host.table, shape.tokens); }
  MutablePagedKvView mutable_view() const { return *layers->MutableView(host.table, shape.tokens); }
  // The device pages' values, contiguous.
  std::vector<uint8_t> Contiguous() {
    device->CopyBack(host);
    std::vector<uint8_t> values(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype));
    const PagedKvLayers host_layers = LayersOf(host, dtype, shape, host.pointers);
    EXPECT_TRUE(CopyFromPages(*host_layers.View(host.table, shape.tokens),
                              MutableKvView{values.data(), dtype, shape, KvStrides::Contiguous(shape)})
                    .ok());
    return values;
  }
};

}  // namespace kvserve::cuda::testing

#endif  // KVSERVE_CUDA_CUDA_TEST_UTIL_H_
