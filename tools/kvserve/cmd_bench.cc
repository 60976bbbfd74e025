// Copyright kvserve authors. `kvserve bench`: one table of CR and encode /
// decode / round-trip throughput per preset, with memcpy as the yardstick.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"
#include "kvserve/version.h"
#include "measure.h"
#if KVSERVE_HAVE_CUDA
#include "kvserve/cuda.h"
#endif

namespace kvserve::cli {
namespace {

// Seconds of CPU time this process has used (user + system).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

// The 1-minute load average, or -1 where /proc/loadavg is unavailable.
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

struct BenchArgs {
  std::string shape = "llama3-8b";
  int tokens = 2048;
  std::string dtype = "bf16";
  int threads = 0;
  std::vector<std::string> presets;
  int repeat = 3;
  std::string device = "cpu";
  std::string input;
  std::string head_scores;
  uint64_t seed = 1;
  bool json = false;
};

std::vector<std::string> DefaultPresets() {
  std::vector<std::string> names = {"none", "kivi-2", "kivi-4", "cachegen", "mixhq", "duo"};
  for (const auto& p : Presets()) {
    if (p.name.substr(0, 8) == "kvserve-") names.emplace_back(p.name);
  }
  return names;
}

int RunBench(const BenchArgs& a) {
  if (a.device == "cuda") {
#if KVSERVE_HAVE_CUDA
    // The GPU table (docs/benchmarks.md "CUDA"): Llama-3.1-8B shape at the
    // given token count, device-to-device copy as the yardstick.
    cuda::BenchOptions options;
    options.tokens = {a.tokens};
    options.repeats = a.repeat;
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
  std::vector<std::string> names = SplitProfileList(a.presets);
  if (names.empty()) names = DefaultPresets();
  if (names.size() == 1 && names[0] == "all") {
    names.clear();
    for (const auto& p : Presets()) names.emplace_back(p.name);
  }
  std::vector<Profile> profiles;
  for (const auto& n : names) {
    auto p = ResolveProfile(n);
    if (!p.ok()) return ReportError("bench", p.status());
    profiles.push_back(*p);
  }
  const int threads = ResolveThreads(a.threads);

  // The cache: a KV file, or a synthetic one of the requested shape.
  KvCache cache;
  std::string source;
  if (!a.input.empty()) {
    Progress("bench", "reading {}", a.input);
    KvFileMetadata meta;
    auto loaded = LoadKvFile(a.input, &meta);
    if (!loaded.ok()) return ReportError("bench", loaded.status());
    cache = std::move(*loaded);
    source = a.input + (meta.count("synthetic") && meta["synthetic"] == "true" ? " (synthetic)" : "");
  } else {
    auto preset = FindSynthShapePreset(a.shape);
    if (!preset.ok()) return ReportError("bench", preset.status());
    auto dtype = ParseDType(a.dtype);
    if (!dtype.ok()) return ReportError("bench", dtype.status());
    SynthOptions o;
    o.shape = preset->shape;
    o.shape.tokens = a.tokens;
    o.dtype = *dtype;
    o.seed = a.seed;
    Progress("bench", "generating synthetic {} {} cache {}", a.shape, DTypeName(o.dtype),
             ShapeString(o.shape));
    auto synth = SynthesizeKv(o);
    if (!synth.ok()) return ReportError("bench", synth.status());
    cache = std::move(*synth);
    source = fmt::format("synthetic {} (seed {})", a.shape, a.seed);
  }
  const KvView view = cache.view();
  const uint64_t bytes = static_cast<uint64_t>(view.LogicalBytes());

  // Head scores for mixhq / duo: a file, or synthetic ones matching the cache.
  HeadScores scores;
  if (!a.head_scores.empty()) {
    auto loaded = HeadScores::Load(a.head_scores);
    if (!loaded.ok()) return ReportError("bench", loaded.status());
    scores = std::move(*loaded);
  } else {
    scores = SynthesizeHeadScores(view.shape.layers, view.shape.kv_heads, a.seed);
  }

  const double load_before = LoadAverage();
  const double wall_start = NowSeconds();
  const double cpu_start = ProcessCpuSeconds();
  Progress("bench", "memcpy yardstick: {} over {} threads", HumanBytes(bytes), threads);
  double memcpy_seconds = MeasureMemcpySeconds(cache.bytes(), cache.size_bytes(), threads, a.repeat);

  struct Row {
    std::string name, spec;
    uint64_t frame_bytes;
    double cr, enc, dec, sp;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < profiles.size(); ++i) {
    MeasureOptions mo;
    mo.threads = threads;
    mo.repeat = a.repeat;
    mo.head_scores = NeedsHeadScores(profiles[i]) ? &scores : nullptr;
    mo.progress = [&](const std::string& phase) {
      Progress("bench", "{}/{} {}: {}", i + 1, profiles.size(), names[i], phase);
    };
    auto run = RunCodec(view, profiles[i], mo);
    if (!run.ok()) return ReportError("bench", run.status().WithContext(names[i]));
    Row r{names[i], profiles[i].ToString(), run->frame.size(), 0, 0, 0, 0};
    r.cr = static_cast<double>(bytes) / run->frame.size();
    r.enc = GBPerSecond(bytes, run->encode_seconds);
    r.dec = GBPerSecond(bytes, run->decode_seconds);
    r.sp = RoundTripRate(r.enc, r.dec);
    rows.push_back(r);
  }
  // Measure the yardstick again at the end and keep the best: the machine
  // may be busier at one moment than another.
  memcpy_seconds = std::min(
      memcpy_seconds, MeasureMemcpySeconds(cache.bytes(), cache.size_bytes(), threads, a.repeat));
  const double memcpy_rate = GBPerSecond(bytes, memcpy_seconds);
  // How much of the machine the run got: on a shared machine the codec
  // figures (long, CPU-bound) suffer more than memcpy (short, memory-bound).
  const double cores_used = (ProcessCpuSeconds() - cpu_start) / (NowSeconds() - wall_start);
  const double load_after = LoadAverage();

  if (a.json) {
    nlohmann::json j{{"source", source},
                     {"dtype", DTypeName(view.dtype)},
                     {"shape", {{"layers", view.shape.layers},
                                {"kv_heads", view.shape.kv_heads},
                                {"tokens", view.shape.tokens},
                                {"head_dim", view.shape.head_dim}}},
                     {"bytes", bytes},
                     {"threads", threads},
                     {"repeat", a.repeat},
                     {"device", a.device},
                     {"memcpy_gbps", memcpy_rate},
                     {"cores_used", cores_used},
                     {"load_average_before", load_before},
                     {"load_average_after", load_after}};
    for (const auto& r : rows)
      j["results"].push_back({{"preset", r.name},
                              {"spec", r.spec},
                              {"frame_bytes", r.frame_bytes},
                              {"compression_ratio", r.cr},
                              {"encode_gbps", r.enc},
                              {"decode_gbps", r.dec},
                              {"round_trip_gbps", r.sp},
                              {"round_trip_over_memcpy", r.sp / memcpy_rate}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  size_t w = 8;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  fmt::print("kvserve bench: {}, {} {} = {}, {} threads, best of {}, device {}\n", source,
             DTypeName(view.dtype), ShapeString(view.shape), HumanBytes(bytes), threads, a.repeat,
             a.device);
  fmt::print("GB/s = 1e9 bytes of uncompressed KV per second; s_p = 1/(1/enc + 1/dec)\n");
  fmt::print("{:<{}} {:>8} {:>9} {:>9} {:>9} {:>10}\n", "preset", w, "CR", "enc GB/s", "dec GB/s",
             "s_p GB/s", "s_p/memcpy");
  for (const auto& r : rows) {
    fmt::print("{:<{}} {:>7.2f}x {:>9.3f} {:>9.3f} {:>9.3f} {:>10.3f}\n", r.name, w, r.cr, r.enc,
               r.dec, r.sp, r.sp / memcpy_rate);
  }
  fmt::print("{:<{}} {:>8} {:>9.3f}  (same {} bytes, {} threads, best of {})\n", "memcpy", w, "",
             memcpy_rate, bytes, threads, a.repeat);
  fmt::print("machine: this run averaged {:.2f} busy cores of {} threads; 1-min load average {:.2f} "
             "before, {:.2f} after\n",
             cores_used, threads, load_before, load_after);
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
  sub.add_option("--shape", a->shape, "synthetic shape preset: " + shapes)->capture_default_str();
  sub.add_option("--tokens", a->tokens, "tokens of the synthetic cache")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub.add_option("--dtype", a->dtype, "dtype of the synthetic cache: f32, f16, bf16")
      ->capture_default_str();
  sub.add_option("--seed", a->seed, "seed of the synthetic cache and head scores")
      ->capture_default_str();
  sub.add_option("--input", a->input, "benchmark this KV file instead of a synthetic cache");
  sub.add_option("--head-scores", a->head_scores, "head scores (JSON) for mixhq / duo");
  sub.add_option("-t,--threads", a->threads, "encoder/decoder and memcpy threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub.add_option("--presets", a->presets,
                 "presets or specs, comma-separated ('all' = every preset); default: none, "
                 "kivi-2, kivi-4, cachegen, mixhq, duo and the kvserve-* recompositions");
  sub.add_option("-r,--repeat", a->repeat, "timed runs per measurement; the best counts")
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
