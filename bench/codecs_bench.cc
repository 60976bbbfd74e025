// Copyright kvserve authors. Codec throughput on 4M symbols of a realistic
// quantised distribution (rounded Gaussian, as uniform 2-/4-bit quantisers
// produce on KV activations). Bytes/s are symbols (1 byte each) per second.
//
//   build-bench/bench/codecs_bench --benchmark_filter=Rans
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/lz4_codec.h"
#include "codecs/pack.h"
#include "codecs/rans.h"
#include "codecs/zstd_codec.h"

namespace kvserve::codecs {
namespace {

constexpr size_t kSymbols = size_t{4} << 20;

// Rounded normal with sigma = levels / 5 around the middle level: the
// empirical shape of 2- and 4-bit uniform quantisation of K/V.
pipeline::CodeSegment QuantisedSegment(int bits) {
  std::mt19937_64 rng(0xbe5c + bits);
  const int levels = 1 << bits;
  pipeline::CodeSegment seg;
  seg.levels = static_cast<uint16_t>(levels);
  seg.symbols.resize(kSymbols);
  std::normal_distribution<double> normal((levels - 1) / 2.0, levels / 5.0);
  for (auto& s : seg.symbols) {
    s = static_cast<uint8_t>(std::clamp<long>(std::lround(normal(rng)), 0, levels - 1));
  }
  return seg;
}

void BM_Pack(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const auto impl = static_cast<PackImpl>(state.range(1));
  if (impl == PackImpl::kAvx2 && !CpuHasAvx2()) return state.SkipWithError("no AVX2");
  const auto seg = QuantisedSegment(bits);
  std::vector<uint8_t> packed(PackedSize(kSymbols, bits));
  for (auto _ : state) {
    PackSymbols(seg.symbols.data(), kSymbols, bits, packed.data(), impl);
    benchmark::DoNotOptimize(packed.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSymbols));
}

void BM_Unpack(benchmark::State& state) {
  const int bits = static_cast<int>(state.range(0));
  const auto impl = static_cast<PackImpl>(state.range(1));
  if (impl == PackImpl::kAvx2 && !CpuHasAvx2()) return state.SkipWithError("no AVX2");
  const auto seg = QuantisedSegment(bits);
  std::vector<uint8_t> packed(PackedSize(kSymbols, bits)), back(kSymbols);
  PackSymbols(seg.symbols.data(), kSymbols, bits, packed.data());
  for (auto _ : state) {
    if (!UnpackSymbols(packed, bits, kSymbols, seg.levels, back.data(), impl).ok()) {
      return state.SkipWithError("unpack failed");
    }
    benchmark::DoNotOptimize(back.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSymbols));
}

std::unique_ptr<pipeline::Codec> MakeCodec(int which) {
  switch (which) {
    case 0: return std::make_unique<RansCodec>(12);
    case 1: return std::make_unique<ZstdCodec>(3);
    default: return std::make_unique<Lz4Codec>(1);
  }
}

void BM_Encode(benchmark::State& state) {
  const auto seg = QuantisedSegment(static_cast<int>(state.range(0)));
  const auto codec = MakeCodec(static_cast<int>(state.range(1)));
  std::vector<uint8_t> out;
  for (auto _ : state) {
    out.clear();
    if (!codec->Encode(seg, &out).ok()) return state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSymbols));
  state.counters["bits_per_symbol"] = 8.0 * static_cast<double>(out.size()) / kSymbols;
}

void BM_Decode(benchmark::State& state) {
  const auto seg = QuantisedSegment(static_cast<int>(state.range(0)));
  const auto codec = MakeCodec(static_cast<int>(state.range(1)));
  std::vector<uint8_t> bytes, back(kSymbols);
  if (!codec->Encode(seg, &bytes).ok()) return state.SkipWithError("encode failed");
  for (auto _ : state) {
    if (!codec->Decode(bytes, seg.levels, kSymbols, back.data()).ok()) {
      return state.SkipWithError("decode failed");
    }
    benchmark::DoNotOptimize(back.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSymbols));
}

// Args: {bits, impl} with impl 0 = scalar, 1 = AVX2.
BENCHMARK(BM_Pack)->ArgsProduct({{1, 2, 3, 4, 8}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Unpack)->ArgsProduct({{1, 2, 3, 4, 8}, {0, 1}})->Unit(benchmark::kMillisecond);
// Args: {bits, codec} with codec 0 = rans(table=12), 1 = zstd(3), 2 = lz4(1).
BENCHMARK(BM_Encode)->ArgsProduct({{2, 4}, {0, 1, 2}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->ArgsProduct({{2, 4}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve::codecs

BENCHMARK_MAIN();
