// Copyright kvserve authors. `kvserve bench-runtime`: prefill and decode
// throughput of the runtime on a random-weight model, beside the sgemm rate
// of the same BLAS measured in the same run.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/runtime_bench.h"
#include "kvserve/runtime.h"

namespace kvserve::cli {
namespace {

using BenchRuntimeArgs = lab::RuntimeBenchOptions;

int RunBenchRuntime(const BenchRuntimeArgs& a) {
  auto r = lab::RunRuntimeBench(a);
  if (!r.ok()) return ReportError("bench-runtime", r.status());
  fmt::print("{}", r->Text(a));
  fmt::print("{}", r->Json(a));
  return 0;
}

RunFn SetupBenchRuntime(CLI::App& sub) {
  auto a = std::make_shared<BenchRuntimeArgs>();
  // ~30 M parameters: 8 x 2.95 M per layer + 2 x 8000 x 512 embedding/head.
  a->spec.vocab = 8000;
  a->spec.hidden = 512;
  a->spec.intermediate = 1408;
  a->spec.layers = 8;
  a->spec.heads = 8;
  a->spec.kv_heads = 4;
  sub.description(
      "Prefill and decode throughput of the runtime on a random-weight Llama-style model "
      "(default ~30 M parameters, 2K context), beside the sgemm GFLOP/s of the same BLAS "
      "measured in the same run. Prefill GFLOP/s counts matmul and causal-attention FLOPs.");
  sub.add_option("--layers", a->spec.layers)->capture_default_str();
  sub.add_option("--hidden", a->spec.hidden)->capture_default_str();
  sub.add_option("--intermediate", a->spec.intermediate)->capture_default_str();
  sub.add_option("--heads", a->spec.heads)->capture_default_str();
  sub.add_option("--kv-heads", a->spec.kv_heads)->capture_default_str();
  sub.add_option("--vocab", a->spec.vocab)->capture_default_str();
  sub.add_option("--context", a->context, "prompt tokens")->capture_default_str();
  sub.add_option("--decode-tokens", a->decode_tokens)->capture_default_str();
  sub.add_option("--repeats", a->repeats, "prefill runs (best is reported)")->capture_default_str();
  sub.add_option("--sgemm-n", a->sgemm_n, "size of the sgemm probe")->capture_default_str();
  sub.add_option("--threads", a->threads, "worker threads (0 = all cores)")->capture_default_str();
  return [a] { return RunBenchRuntime(*a); };
}

}  // namespace

KVSERVE_COMMAND(bench_runtime, "Benchmark runtime prefill/decode against the BLAS sgemm rate",
                SetupBenchRuntime);

}  // namespace kvserve::cli
