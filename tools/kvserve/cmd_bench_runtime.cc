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
  const ModelConfig& c = r->config;
  fmt::print("model: {} layers, hidden {}, heads {}/{} (q/kv), head_dim {}, ffn {}, vocab {}: "
             "{:.1f} M params\n",
             c.layers, c.hidden_size, c.heads, c.kv_heads, c.head_dim, c.intermediate_size,
             c.vocab_size, r->parameters / 1e6);
  fmt::print("blas: {}\n", r->blas);
  fmt::print("sgemm {}^3: {:.1f} GFLOP/s\n", a.sgemm_n, r->sgemm_gflops);
  fmt::print("prefill {} tokens: {:.3f} s, {:.0f} tokens/s, {:.1f} GFLOP/s = {:.0f}% of sgemm\n",
             a.context, r->prefill_seconds, a.context / r->prefill_seconds, r->prefill_gflops,
             100 * r->prefill_gflops / r->sgemm_gflops);
  fmt::print("decode {} tokens at {}+ context: {:.3f} s, {:.1f} tokens/s, {:.1f} GFLOP/s\n",
             a.decode_tokens, a.context, r->decode_seconds, a.decode_tokens / r->decode_seconds,
             r->decode_gflops);
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
