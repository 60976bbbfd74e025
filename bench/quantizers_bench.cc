// Copyright kvserve authors. Quantizer throughput on one [8][256][128] fp32
// chunk (1 MiB), in bytes of fp32 input processed per second, for the AVX2
// path and the scalar reference (second argument: 1 = AVX2, 0 = scalar).
//
//   build-*/bench/quantizers_bench --benchmark_filter=Kivi
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/stages.h"
#include "quantizers/grid_kernels.h"
#include "quantizers/quantizers.h"

namespace kvserve::quantizers {
namespace {

constexpr int kHeads = 8;
constexpr int kTokens = 256;
constexpr int kDim = 128;

struct BenchChunk {
  std::vector<float> values;
  std::vector<float> out;
  pipeline::ChunkInfo info;
  explicit BenchChunk(KvKind kind)
      : values(static_cast<size_t>(kHeads) * kTokens * kDim), out(values.size()) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : values) v = normal(rng);
    info.layer = 3;
    info.num_layers = 32;
    info.kind = kind;
    info.kv_heads = kHeads;
    info.head_dim = kDim;
    info.tokens = kTokens;
    info.total_tokens = kTokens;
  }
  pipeline::ChunkTensor in_tensor() { return {values.data(), kHeads, kTokens, kDim}; }
  pipeline::ChunkTensor out_tensor() { return {out.data(), kHeads, kTokens, kDim}; }
  int64_t bytes() const { return static_cast<int64_t>(values.size() * sizeof(float)); }
};

std::unique_ptr<pipeline::Quantizer> Make(QuantizerType type, int bits) {
  QuantConfig c;
  c.type = type;
  c.bits_key = c.bits_value = bits;
  c.group = 32;
  auto q = NewQuantizerForEncode(c, KvShape{32, kHeads, kTokens, kDim}, nullptr);
  return std::move(q).value();
}

void SetIsa(const benchmark::State& state) {
  SetGridKernelIsaForTesting(state.range(1) ? GridKernelIsa::kAvx2 : GridKernelIsa::kScalar);
}

// KIVI-2: keys per channel over 32-token groups, values per token.
void BM_KiviQuantize(benchmark::State& state) {
  SetIsa(state);
  BenchChunk chunk(state.range(0) ? KvKind::kValue : KvKind::kKey);
  auto q = Make(QuantizerType::kKivi, 2);
  pipeline::QuantizedChunk out;
  for (auto _ : state) {
    if (!q->Quantize(chunk.info, chunk.in_tensor(), &out).ok()) state.SkipWithError("quantize");
    benchmark::DoNotOptimize(out.params.data());
  }
  state.SetBytesProcessed(state.iterations() * chunk.bytes());
  SetGridKernelIsaForTesting(GridKernelIsa::kAuto);
}
BENCHMARK(BM_KiviQuantize)->ArgNames({"value", "avx2"})->ArgsProduct({{0, 1}, {0, 1}});

void BM_KiviDequantize(benchmark::State& state) {
  SetIsa(state);
  BenchChunk chunk(state.range(0) ? KvKind::kValue : KvKind::kKey);
  auto q = Make(QuantizerType::kKivi, 2);
  pipeline::QuantizedChunk coded;
  if (!q->Quantize(chunk.info, chunk.in_tensor(), &coded).ok()) state.SkipWithError("quantize");
  for (auto _ : state) {
    if (!q->Dequantize(chunk.info, coded, chunk.out_tensor(), nullptr).ok()) {
      state.SkipWithError("dequantize");
    }
    benchmark::DoNotOptimize(chunk.out.data());
  }
  state.SetBytesProcessed(state.iterations() * chunk.bytes());
  SetGridKernelIsaForTesting(GridKernelIsa::kAuto);
}
BENCHMARK(BM_KiviDequantize)->ArgNames({"value", "avx2"})->ArgsProduct({{0, 1}, {0, 1}});

}  // namespace
}  // namespace kvserve::quantizers

BENCHMARK_MAIN();
