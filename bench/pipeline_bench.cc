// Copyright kvserve authors. Whole-pipeline encode and decode throughput of
// every preset on a synthetic Llama-3-8B-shaped slice (8 layers, 8 KV heads,
// 1024 tokens, head_dim 128, bf16 = 32 MiB), single-threaded and on all
// cores. bytes_per_second counts uncompressed KV bytes; the CR counter is the
// compression ratio with every frame byte counted.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv_file.h"
#include "kvserve/profile.h"

namespace kvserve {
namespace {

struct Fixture {
  KvCache cache;
  HeadScores scores;
};

const Fixture& SharedFixture() {
  static const Fixture* fixture = [] {
    SynthOptions o;
    o.shape = KvShape{8, 8, 1024, 128};
    o.dtype = DType::kBF16;
    o.seed = 1;
    auto cache = SynthesizeKv(o);
    if (!cache.ok()) {
      fprintf(stderr, "pipeline_bench: %s\n", cache.status().ToString().c_str());
      std::exit(1);
    }
    auto* f = new Fixture{std::move(*cache), SynthesizeHeadScores(8, 8, 1)};
    return f;
  }();
  return *fixture;
}

bool NeedsScores(const Profile& p) {
  return p.quantizer() == QuantizerType::kMixHQ || p.quantizer() == QuantizerType::kDuo;
}

void BM_Encode(benchmark::State& state, std::string spec, int threads) {
  const Fixture& f = SharedFixture();
  auto profile = Profile::Parse(spec);
  if (!profile.ok()) return state.SkipWithError(profile.status().ToString().c_str());
  EncodeOptions options;
  options.threads = threads;
  options.head_scores = NeedsScores(*profile) ? &f.scores : nullptr;
  auto encoder = EncoderContext::Create(*profile, options);
  if (!encoder.ok()) return state.SkipWithError(encoder.status().ToString().c_str());
  std::vector<uint8_t> frame;
  frame.reserve(f.cache.size_bytes() + (1 << 20));
  for (auto _ : state) {
    frame.clear();
    VectorSink sink(&frame);
    Status s = (*encoder)->Encode(f.cache.view(), sink);
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(frame.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * f.cache.view().LogicalBytes());
  state.counters["CR"] = static_cast<double>(f.cache.view().LogicalBytes()) / frame.size();
}

void BM_Decode(benchmark::State& state, std::string spec, int threads) {
  const Fixture& f = SharedFixture();
  auto profile = Profile::Parse(spec);
  if (!profile.ok()) return state.SkipWithError(profile.status().ToString().c_str());
  EncodeOptions options;
  options.threads = threads;
  options.head_scores = NeedsScores(*profile) ? &f.scores : nullptr;
  auto encoder = EncoderContext::Create(*profile, options);
  if (!encoder.ok()) return state.SkipWithError(encoder.status().ToString().c_str());
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  if (Status s = (*encoder)->Encode(f.cache.view(), sink); !s.ok())
    return state.SkipWithError(s.ToString().c_str());
  DecodeOptions decode_options;
  decode_options.threads = threads;
  auto decoder = DecoderContext::Create(decode_options);
  if (!decoder.ok()) return state.SkipWithError(decoder.status().ToString().c_str());
  KvCache out(f.cache.dtype(), f.cache.shape());
  std::vector<uint8_t> keep_mask;
  for (auto _ : state) {
    Status s = (*decoder)->Decode(frame, out.mutable_view(), &keep_mask);
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(out.bytes());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * f.cache.view().LogicalBytes());
  state.counters["CR"] = static_cast<double>(f.cache.view().LogicalBytes()) / frame.size();
}

void RegisterAll() {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const Preset& preset : Presets()) {
    for (int threads : {1, all}) {
      if (threads == all && all == 1) continue;
      const std::string suffix = "/" + std::string(preset.name) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("BM_Encode" + suffix).c_str(), BM_Encode,
                                   std::string(preset.spec), threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("BM_Decode" + suffix).c_str(), BM_Decode,
                                   std::string(preset.spec), threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
