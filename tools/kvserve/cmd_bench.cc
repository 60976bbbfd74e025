// Copyright kvserve authors. `kvserve bench`: one table of compression ratio
// and codec throughput per preset, with memcpy as the yardstick
// (experiments/codec_bench.h on the CPU; kvserve/cuda.h's bench on the GPU).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/codec_bench.h"
#include "kvserve/kv_file.h"
#include "kvserve/version.h"
#if KVSERVE_HAVE_CUDA
#include "experiments/cuda_bench.h"
#endif

namespace kvserve::cli {
namespace {

struct BenchArgs {
  lab::CodecBenchOptions options;
  std::string dtype = "bf16";
  std::vector<std::string> presets;
  std::string device = "cpu";
  bool json = false;
};

int RunBench(BenchArgs a) {
  if (a.device == "cuda") {
#if KVSERVE_HAVE_CUDA
    // The GPU table (docs/benchmarks.md "CUDA"): Llama-3.1-8B shape at the
    // given token count, device-to-device copy as the yardstick.
    cuda::BenchOptions options;
    options.tokens = {a.options.tokens};
    options.repeats = a.options.repeat;
    options.presets = SplitProfileList(a.presets);
    auto rows = cuda::RunBench(options);
    if (!rows.ok()) return ReportError("bench", rows.status());
    std::fputs(cuda::FormatBenchTable(*rows).c_str(), stdout);
    return 0;
#else
    return ReportError("bench", Status::NotSupported(
                                    "--device cuda: this kvserve was built without "
                                    "-DKVSERVE_CUDA=ON (scripts/test.sh enables it when nvcc is installed)"));
#endif
  }
  if (a.device != "cpu") {
    return ReportError("bench", Status::InvalidArgument("--device " + a.device +
                                                        ": expected cpu or cuda"));
  }
  auto dtype = ParseDType(a.dtype);
  if (!dtype.ok()) return ReportError("bench", dtype.status());
  a.options.dtype = *dtype;
  a.options.presets = SplitProfileList(a.presets);
  auto report = lab::RunCodecBench(a.options, [](const std::string& line) { Progress("bench", "{}", line); });
  if (!report.ok()) return ReportError("bench", report.status());
  if (a.json) {
    std::cout << lab::CodecBenchJson(*report).dump(2) << "\n";
  } else {
    fmt::print("{}", lab::CodecBenchText(*report));
  }
  return 0;
}

RunFn SetupBench(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.description(
      "Benchmark presets on one KV cache and print ONE table: compression ratio (every frame "
      "byte counted), encode, decode and round-trip throughput s_p = 1/(1/enc + 1/dec), all in "
      "GB/s of uncompressed KV (best of --repeat), plus memcpy of the same bytes with the same "
      "thread count, measured in the same run, as the yardstick. The cache is synthetic "
      "(`kvserve synth` model) unless --input names a KV file; mixhq and duo use synthetic "
      "head scores unless --head-scores is given.");
  std::string shapes;
  for (const auto& p : SynthShapePresets()) shapes += (shapes.empty() ? "" : ", ") + std::string(p.name);
  sub.add_option("--shape", a->options.shape, "synthetic shape preset: " + shapes)->capture_default_str();
  sub.add_option("--tokens", a->options.tokens, "tokens of the synthetic cache")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub.add_option("--dtype", a->dtype, "dtype of the synthetic cache: f32, f16, bf16")
      ->capture_default_str();
  sub.add_option("--seed", a->options.seed, "seed of the synthetic cache and head scores")
      ->capture_default_str();
  sub.add_option("--input", a->options.input, "benchmark this KV file instead of a synthetic cache");
  sub.add_option("--head-scores", a->options.head_scores, "head scores (JSON) for mixhq / duo");
  sub.add_option("-t,--threads", a->options.threads, "encoder/decoder and memcpy threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub.add_option("--presets", a->presets,
                 "presets or specs, comma-separated ('all' = every preset); default: none, "
                 "kivi-2, kivi-4, cachegen, mixhq, duo and the kvserve-* recompositions");
  sub.add_option("-r,--repeat", a->options.repeat, "timed runs per measurement; the best counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub.add_option("--device", a->device, "backend: cpu, or cuda (the GPU table; needs a -DKVSERVE_CUDA=ON build and a GPU)")
      ->capture_default_str();
  sub.add_flag("--json", a->json, "print JSON instead of the table");
  sub.footer("Example: kvserve bench --shape llama3-8b --tokens 4096 --presets kivi-2,kvserve-h2r");
  return [a] { return RunBench(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(bench, "Benchmark presets: CR, encode/decode/round-trip GB/s vs memcpy", kvserve::cli::SetupBench);
