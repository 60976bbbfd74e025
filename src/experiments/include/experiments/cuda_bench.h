// Copyright kvserve authors. The CUDA codec benchmark (the CLI's `kvserve
// bench --device cuda` and kvserve_cuda_bench; docs/benchmarks.md "CUDA"):
// report code of the lab, not of the installed library. Implemented in
// src/cuda/bench.cu, built as kvserve_cuda_bench_lib when the CUDA backend
// is.
#ifndef KVSERVE_EXPERIMENTS_CUDA_BENCH_H_
#define KVSERVE_EXPERIMENTS_CUDA_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/cuda.h"

namespace kvserve::cuda {

// One row of the benchmark table (docs/benchmarks.md "CUDA (H200)").
struct BenchRow {
  std::string preset;     // preset name or spec
  std::string stage;      // "pipeline", or a stage name for per-stage rows
  std::string direction;  // stage rows: "encode" or "decode"
  int tokens = 0;
  uint64_t input_bytes = 0;   // logical bytes of the cache
  uint64_t frame_bytes = 0;
  double encode_us = 0;       // median (stage rows: the stage's median in encode_us)
  double decode_us = 0;       // median
  double encode_gbps = 0;     // input_bytes / encode time
  double decode_gbps = 0;
  double sp_gbps = 0;         // 1 / (1/enc + 1/dec)
  double ratio = 0;           // input / frame
  // Roofline: bytes a call must read + write (encode: cache + frame; decode:
  // frame + cache; the copy row: 2x the cache), that over the call's time,
  // and its fraction of the same run's device-to-device copy rate.
  double traffic_bytes = 0;
  double encode_tbps = 0, decode_tbps = 0;      // (read + write) / time, TB/s
  double encode_of_copy = 0, decode_of_copy = 0;
  uint64_t stage_units = 0;   // stage rows: bytes or symbols the stage processes
  double stage_gbps = 0;      // stage_units / stage time
  bool ok = true;             // GPU frame == CPU frame where checked
  std::string note;
};

struct BenchOptions {
  std::vector<std::string> presets;  // empty: every GPU-supported preset
  std::vector<int> tokens = {1024, 8192, 32768};
  int layers = 32, kv_heads = 8, head_dim = 128;  // Llama-3.1-8B
  DType dtype = DType::kBF16;
  int repeats = 20;
  bool stages = true;          // per-stage rows (kernel groups timed with events)
  bool verify_with_cpu = true; // compare GPU frame bytes with the CPU encoder (first token count)
  // When non-empty, the benchmark writes the synthetic cache of `dump_tokens`
  // tokens (bf16 [layer][kind][head][token][dim]) and the rANS input symbols
  // of `dump_profile` for it (one byte each, segment by segment) to these
  // files, so other codecs can be measured on the same bytes.
  std::string dump_cache, dump_symbols;
  std::string dump_profile = "identity+kivi(k=2,v=2,residual=128)+rans";
  int dump_tokens = 8192;
};

// Runs the H200 benchmark: a synthetic Llama-shaped cache per token count,
// every preset encoded and decoded on device 0, timed with CUDA events
// (median of `repeats`), plus a "d2d-copy" yardstick row (cudaMemcpy
// device-to-device of the cache, reported as bytes copied / time). Returns
// the rows; NotSupported when no GPU is present.
Result<std::vector<BenchRow>> RunBench(const BenchOptions& options);
// The rows as Markdown tables (the format docs/benchmarks.md records): the
// pipeline rows with their roofline columns, then the stage rows.
std::string FormatBenchTable(const std::vector<BenchRow>& rows);

}  // namespace kvserve::cuda

#endif  // KVSERVE_EXPERIMENTS_CUDA_BENCH_H_
