// Copyright kvserve authors. Transform throughput on one [8][1024][128] fp32
// chunk (4 MiB), in bytes of fp32 input processed per second.
//
//   build-*/bench/transforms_bench --benchmark_filter=Hadamard
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/stages.h"
#include "transforms/affine.h"
#include "transforms/delta.h"
#include "transforms/hadamard.h"

namespace kvserve::transforms {
namespace {

constexpr int kHeads = 8;
constexpr int kTokens = 1024;
constexpr int kDim = 128;

struct BenchChunk {
  std::vector<float> values;
  pipeline::ChunkInfo info;
  BenchChunk() : values(static_cast<size_t>(kHeads) * kTokens * kDim) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : values) v = normal(rng);
    info.layer = 3;
    info.num_layers = 32;
    info.kind = KvKind::kKey;
    info.kv_heads = kHeads;
    info.head_dim = kDim;
    info.tokens = kTokens;
    info.total_tokens = kTokens;
  }
  pipeline::ChunkTensor tensor() { return {values.data(), kHeads, kTokens, kDim}; }
  int64_t bytes() const { return static_cast<int64_t>(values.size() * sizeof(float)); }
};

// state.range(0): 0 = forward, 1 = inverse.
void RunTransform(benchmark::State& state, const pipeline::Transform& transform) {
  BenchChunk chunk;
  std::vector<uint8_t> side;
  pipeline::ByteWriter writer(&side);
  if (!transform.Forward(chunk.info, chunk.tensor(), writer).ok()) {
    state.SkipWithError("forward failed");
    return;
  }
  const bool inverse = state.range(0) == 1;
  for (auto _ : state) {
    Status status;
    if (inverse) {
      pipeline::ByteReader reader(side);
      status = transform.Inverse(chunk.info, chunk.tensor(), reader);
    } else {
      side.clear();
      status = transform.Forward(chunk.info, chunk.tensor(), writer);
    }
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(chunk.values.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * chunk.bytes());
}

void BM_HadamardAvx2(benchmark::State& state) {
  if (!Avx2Available()) {
    state.SkipWithError("no AVX2");
    return;
  }
  RunTransform(state, HadamardTransform(0x5eed, KernelPath::kAvx2));
}
void BM_HadamardScalar(benchmark::State& state) {
  RunTransform(state, HadamardTransform(0x5eed, KernelPath::kScalar));
}
void BM_Affine(benchmark::State& state) { RunTransform(state, AffineTransform()); }
void BM_Delta(benchmark::State& state) { RunTransform(state, DeltaTransform(0)); }

BENCHMARK(BM_HadamardAvx2)->ArgName("inverse")->Arg(0)->Arg(1);
BENCHMARK(BM_HadamardScalar)->ArgName("inverse")->Arg(0)->Arg(1);
BENCHMARK(BM_Affine)->ArgName("inverse")->Arg(0)->Arg(1);
BENCHMARK(BM_Delta)->ArgName("inverse")->Arg(0)->Arg(1);

}  // namespace
}  // namespace kvserve::transforms

BENCHMARK_MAIN();
