// Copyright kvserve authors. `kvserve bench-runtime`'s measurement: prefill
// and decode throughput of the runtime on a random-weight model, beside the
// sgemm rate of the same BLAS measured in the same run. Not part of the
// installed library.
#ifndef KVSERVE_EXPERIMENTS_RUNTIME_BENCH_H_
#define KVSERVE_EXPERIMENTS_RUNTIME_BENCH_H_

#include <cstdint>
#include <string>

#include "kvserve/runtime.h"

namespace kvserve::lab {

struct RuntimeBenchOptions {
  RandomModelSpec spec;
  int context = 2048;      // prompt tokens
  int decode_tokens = 32;  // greedy steps after the prefill
  int threads = 0;         // 0 = all cores
  int sgemm_n = 1024;      // the sgemm probe is n x n x n
  int repeats = 2;         // prefill runs; the fastest counts
};

struct RuntimeBenchResult {
  ModelConfig config;
  int64_t parameters = 0;  // non-embedding + embedding
  std::string blas;        // BlasDescription()
  double sgemm_gflops = 0;
  double prefill_seconds = 0;  // best of `repeats`
  double prefill_gflops = 0;   // matmul + causal-attention FLOPs
  double decode_seconds = 0;
  double decode_gflops = 0;
  // The model, BLAS, sgemm, prefill and decode lines `kvserve
  // bench-runtime` prints before the JSON.
  std::string Text(const RuntimeBenchOptions& o) const;
  // The one-line JSON `kvserve bench-runtime` ends with.
  std::string Json(const RuntimeBenchOptions& o) const;
};

// Writes the random model of o.spec to a temporary directory (removed once
// loaded), measures sgemm, prefills a seeded random prompt of o.context
// tokens o.repeats times and decodes o.decode_tokens greedy tokens after
// it. The runtime's errors are returned.
Result<RuntimeBenchResult> RunRuntimeBench(const RuntimeBenchOptions& o);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_RUNTIME_BENCH_H_
