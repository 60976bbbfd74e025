// Copyright kvserve authors. Checksum64 (libxxhash's XXH3 header built for
// AVX2 where the CPU has it, core/checksum.h) against the same hash from
// Debian's libxxhash shared library and a memcpy of the same bytes, measured
// in the same run. Bytes/s are input bytes per second.
//
//   build/release/bench/checksum_bench
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/checksum.h"

namespace kvserve {
namespace {

std::vector<uint8_t> RandomBytes(size_t n) {
  std::mt19937_64 rng(0xc5);
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

void BM_Checksum64(benchmark::State& state) {
  const auto bytes = RandomBytes(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(Checksum64(bytes.data(), bytes.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_LibxxhashXxh3(benchmark::State& state) {
  const auto bytes = RandomBytes(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(bytes.data(), bytes.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = RandomBytes(static_cast<size_t>(state.range(0)));
  std::vector<uint8_t> out(bytes.size());
  for (auto _ : state) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(BM_Checksum64)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20);
BENCHMARK(BM_LibxxhashXxh3)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20);
BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20);

}  // namespace
}  // namespace kvserve
