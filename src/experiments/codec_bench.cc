// Copyright kvserve authors. The CPU codec bench (experiments/codec_bench.h).
#include "experiments/codec_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "kvserve/kv_file.h"
#include "kvserve/profile.h"
#include "kvserve/profiler.h"
#include "kvserve/timing.h"

namespace kvserve::lab {

std::vector<std::string> DefaultBenchPresets() {
  std::vector<std::string> names = {"none", "kivi-2", "kivi-4", "cachegen", "mixhq", "duo"};
  for (const auto& p : Presets()) {
    if (p.name.substr(0, 8) == "kvserve-") names.emplace_back(p.name);
  }
  return names;
}

Result<CodecBenchReport> RunCodecBench(const CodecBenchOptions& a, const Progress& progress) {
  std::vector<std::string> names = a.presets;
  if (names.empty()) names = DefaultBenchPresets();
  if (names.size() == 1 && names[0] == "all") {
    names.clear();
    for (const auto& p : Presets()) names.emplace_back(p.name);
  }
  std::vector<Profile> profiles;
  for (const auto& n : names) {
    auto p = Profile::Parse(n);
    if (!p.ok()) return p.status().WithContext("profile '" + n + "'");
    profiles.push_back(*p);
  }
  CodecBenchReport report;
  report.threads = ResolveThreads(a.threads);
  report.repeat = std::max(1, a.repeat);

  // The cache: a KV file, or a synthetic one of the requested shape.
  KvCache cache;
  if (!a.input.empty()) {
    Note(progress, "reading {}", a.input);
    KvFileMetadata meta;
    KVSERVE_ASSIGN_OR_RETURN(cache, LoadKvFile(a.input, &meta));
    report.source =
        a.input + (meta.count("synthetic") && meta["synthetic"] == "true" ? " (synthetic)" : "");
  } else {
    KVSERVE_ASSIGN_OR_RETURN(SynthShapePreset preset, FindSynthShapePreset(a.shape));
    SynthOptions o;
    o.shape = preset.shape;
    o.shape.tokens = a.tokens;
    o.dtype = a.dtype;
    o.seed = a.seed;
    Note(progress, "generating synthetic {} {} cache {}", a.shape, DTypeName(o.dtype),
         ShapeString(o.shape));
    KVSERVE_ASSIGN_OR_RETURN(cache, SynthesizeKv(o));
    report.source = fmt::format("synthetic {} (seed {})", a.shape, a.seed);
  }
  const KvView view = cache.view();
  report.dtype = view.dtype;
  report.shape = view.shape;
  report.bytes = static_cast<uint64_t>(view.LogicalBytes());

  // Head scores for mixhq / duo: a file, or synthetic ones matching the cache.
  HeadScores scores;
  if (!a.head_scores.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(scores, HeadScores::Load(a.head_scores));
  } else {
    scores = SynthesizeHeadScores(view.shape.layers, view.shape.kv_heads, a.seed);
  }

  report.load_before = LoadAverage();
  const double wall_start = NowSeconds();
  const double cpu_start = ProcessCpuSeconds();
  Note(progress, "memcpy yardstick: {} over {} threads", HumanBytes(report.bytes), report.threads);
  double memcpy_seconds =
      MeasureMemcpySeconds(cache.bytes(), cache.size_bytes(), report.threads, report.repeat);
  for (size_t i = 0; i < profiles.size(); ++i) {
    const bool needs_scores = NeedsHeadScores(profiles[i]);
    auto run = MeasureProfileCost(profiles[i], view,
                                  {.threads = report.threads,
                                   .repeats = report.repeat,
                                   .head_scores = needs_scores ? &scores : nullptr,
                                   .progress = [&](const std::string& phase) {
                                     Note(progress, "{}/{} {}: {}", i + 1, profiles.size(),
                                          names[i], phase);
                                   }});
    if (!run.ok()) return run.status().WithContext(names[i]);
    CodecBenchRow r;
    r.name = names[i];
    r.spec = profiles[i].ToString();
    r.frame_bytes = run->frame_bytes;
    r.compression_ratio = run->codec.compression_ratio;
    r.encode_gbps = GBPerSecond(report.bytes, run->encode_seconds);
    r.decode_gbps = GBPerSecond(report.bytes, run->decode_seconds);
    r.round_trip_gbps = RoundTripRate(r.encode_gbps, r.decode_gbps);
    report.rows.push_back(r);
  }
  // Measure the yardstick again at the end and keep the best: the machine
  // may be busier at one moment than another.
  memcpy_seconds = std::min(memcpy_seconds, MeasureMemcpySeconds(cache.bytes(), cache.size_bytes(),
                                                                 report.threads, report.repeat));
  report.memcpy_gbps = GBPerSecond(report.bytes, memcpy_seconds);
  // How much of the machine the run got: on a shared machine the codec
  // figures (long, CPU-bound) suffer more than memcpy (short, memory-bound).
  report.cores_used = (ProcessCpuSeconds() - cpu_start) / (NowSeconds() - wall_start);
  report.load_after = LoadAverage();
  return report;
}

std::string CodecBenchText(const CodecBenchReport& r) {
  size_t w = 8;
  for (const auto& row : r.rows) w = std::max(w, row.name.size());
  std::string out = fmt::format(
      "kvserve bench: {}, {} {} = {}, {} threads, best of {}, device cpu\n"
      "GB/s = 1e9 bytes of uncompressed KV per second; s_p = 1/(1/enc + 1/dec)\n",
      r.source, DTypeName(r.dtype), ShapeString(r.shape), HumanBytes(r.bytes), r.threads, r.repeat);
  out += fmt::format("{:<{}} {:>8} {:>9} {:>9} {:>9} {:>10}\n", "preset", w, "CR", "enc GB/s",
                     "dec GB/s", "s_p GB/s", "s_p/memcpy");
  for (const auto& row : r.rows) {
    out += fmt::format("{:<{}} {:>7.2f}x {:>9.3f} {:>9.3f} {:>9.3f} {:>10.3f}\n", row.name, w,
                       row.compression_ratio, row.encode_gbps, row.decode_gbps, row.round_trip_gbps,
                       row.round_trip_gbps / r.memcpy_gbps);
  }
  out += fmt::format("{:<{}} {:>8} {:>9.3f}  (same {} bytes, {} threads, best of {})\n", "memcpy",
                     w, "", r.memcpy_gbps, r.bytes, r.threads, r.repeat);
  out += fmt::format(
      "machine: this run averaged {:.2f} busy cores of {} threads; 1-min load average {:.2f} "
      "before, {:.2f} after\n",
      r.cores_used, r.threads, r.load_before, r.load_after);
  return out;
}

nlohmann::ordered_json CodecBenchJson(const CodecBenchReport& r) {
  nlohmann::ordered_json j{{"source", r.source},
                           {"dtype", DTypeName(r.dtype)},
                           {"shape",
                            {{"layers", r.shape.layers},
                             {"kv_heads", r.shape.kv_heads},
                             {"tokens", r.shape.tokens},
                             {"head_dim", r.shape.head_dim}}},
                           {"bytes", r.bytes},
                           {"threads", r.threads},
                           {"repeat", r.repeat},
                           {"device", "cpu"},
                           {"memcpy_gbps", r.memcpy_gbps},
                           {"cores_used", r.cores_used},
                           {"load_average_before", r.load_before},
                           {"load_average_after", r.load_after}};
  j["results"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["results"].push_back({{"preset", row.name},
                            {"spec", row.spec},
                            {"frame_bytes", row.frame_bytes},
                            {"compression_ratio", row.compression_ratio},
                            {"encode_gbps", row.encode_gbps},
                            {"decode_gbps", row.decode_gbps},
                            {"round_trip_gbps", row.round_trip_gbps},
                            {"round_trip_over_memcpy", row.round_trip_gbps / r.memcpy_gbps}});
  return j;
}

double MeasureMemcpySeconds(const void* src, size_t bytes, int threads, int repeat) {
  threads = std::max(1, threads);
  std::vector<std::byte> dst(bytes);
  std::memset(dst.data(), 1, bytes);  // prefault
  const auto* from = static_cast<const std::byte*>(src);
  const size_t slice = (bytes + threads - 1) / threads;
  auto best = FastestSeconds(repeat, [&](int) {
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      const size_t begin = std::min(bytes, slice * t);
      const size_t end = std::min(bytes, begin + slice);
      workers.emplace_back(
          [&, begin, end] { std::memcpy(dst.data() + begin, from + begin, end - begin); });
    }
    std::memcpy(dst.data(), from, std::min(bytes, slice));
    for (auto& w : workers) w.join();
    return Status::Ok();
  });
  return *best;  // (the copy cannot fail)
}

}  // namespace kvserve::lab
