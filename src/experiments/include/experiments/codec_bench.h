// Copyright kvserve authors. `kvserve bench` on the CPU: compression ratio and
// encode/decode/round-trip throughput of profiles on one KV cache, with a
// memcpy of the same bytes as the yardstick measured in the same run.
#ifndef KVSERVE_EXPERIMENTS_CODEC_BENCH_H_
#define KVSERVE_EXPERIMENTS_CODEC_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/kv.h"

namespace kvserve::lab {

struct CodecBenchOptions {
  std::string shape = "llama3-8b";  // synthetic cache shape preset (kvserve/kv_file.h)
  int tokens = 2048;
  DType dtype = DType::kBF16;
  int threads = 0;  // 0 = hardware concurrency
  // Preset names or specs; empty = DefaultBenchPresets(); {"all"} = every preset.
  std::vector<std::string> presets;
  int repeat = 3;           // timings are the best of `repeat`
  std::string input;        // a KV file instead of the synthetic cache
  std::string head_scores;  // head scores file for mixhq / duo (default: synthetic)
  uint64_t seed = 1;
};

struct CodecBenchRow {
  std::string name, spec;
  uint64_t frame_bytes = 0;
  double compression_ratio = 0;
  double encode_gbps = 0, decode_gbps = 0, round_trip_gbps = 0;  // 1e9 bytes of KV per second
};

struct CodecBenchReport {
  std::string source;  // "synthetic llama3-8b (seed 1)" or the file
  DType dtype = DType::kBF16;
  KvShape shape;
  uint64_t bytes = 0;  // logical bytes of the cache
  int threads = 0;
  int repeat = 0;
  double memcpy_gbps = 0;  // the best of two memcpy runs (start and end)
  double cores_used = 0;   // busy cores the run averaged: how much of the machine it got
  double load_before = -1, load_after = -1;
  std::vector<CodecBenchRow> rows;
};

// none, kivi-2, kivi-4, cachegen, mixhq, duo and the kvserve-* presets.
std::vector<std::string> DefaultBenchPresets();

// Runs the bench: every profile through MeasureProfileCost (kvserve/
// profiler.h). Errors: an unknown preset or shape, an unreadable file, a
// codec error (with the profile's name).
Result<CodecBenchReport> RunCodecBench(const CodecBenchOptions& options, const Progress& progress);

// The text table `kvserve bench` prints, and its --json form.
std::string CodecBenchText(const CodecBenchReport& report);
nlohmann::ordered_json CodecBenchJson(const CodecBenchReport& report);

// Best-of-`repeat` seconds to memcpy `bytes` bytes from `src` into a
// prefaulted buffer, split evenly over `threads` threads.
double MeasureMemcpySeconds(const void* src, size_t bytes, int threads, int repeat);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_CODEC_BENCH_H_
