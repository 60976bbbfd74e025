// Copyright kvserve authors. `kvserve bench-runtime`: prefill and decode
// throughput of the runtime on a random-weight model, beside the sgemm rate
// of the same BLAS measured in the same run.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/runtime.h"

namespace kvserve::cli {
namespace {

struct BenchRuntimeArgs {
  RandomModelSpec spec;
  int context = 2048;
  int decode_tokens = 32;
  int threads = 0;
  int sgemm_n = 1024;
  int repeats = 2;
};

int RunBenchRuntime(BenchRuntimeArgs a) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("kvserve_bench_runtime_{}", ::getpid()))
          .string();
  if (Status s = WriteRandomModel(dir, a.spec); !s.ok()) return ReportError("bench-runtime", s);
  auto model = Model::Load(dir, RuntimeOptions{a.threads});
  std::filesystem::remove_all(dir);
  if (!model.ok()) return ReportError("bench-runtime", model.status());
  const ModelConfig& c = (*model)->config();
  const int64_t params = c.NonEmbeddingParameters() + int64_t{c.vocab_size} * c.hidden_size;
  fmt::print("model: {} layers, hidden {}, heads {}/{} (q/kv), head_dim {}, ffn {}, vocab {}: "
             "{:.1f} M params\n",
             c.layers, c.hidden_size, c.heads, c.kv_heads, c.head_dim, c.intermediate_size,
             c.vocab_size, params / 1e6);
  fmt::print("blas: {}\n", BlasDescription());
  const double sgemm = MeasureSgemmGflops(a.sgemm_n, 3);
  fmt::print("sgemm {}^3: {:.1f} GFLOP/s\n", a.sgemm_n, sgemm);

  std::mt19937_64 rng(1);
  std::vector<int32_t> prompt(a.context);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
  double best_prefill = 1e30;
  PrefillResult kept;
  for (int r = 0; r < a.repeats; ++r) {
    const double t0 = NowSeconds();
    auto result = (*model)->Prefill(prompt);
    const double dt = NowSeconds() - t0;
    if (!result.ok()) return ReportError("bench-runtime", result.status());
    best_prefill = std::min(best_prefill, dt);
    kept = std::move(result).value();
  }
  const double prefill_flops = c.ForwardFlops(0, a.context, 1);
  const double prefill_gflops = prefill_flops / best_prefill / 1e9;
  fmt::print("prefill {} tokens: {:.3f} s, {:.0f} tokens/s, {:.1f} GFLOP/s = {:.0f}% of sgemm\n",
             a.context, best_prefill, a.context / best_prefill, prefill_gflops,
             100 * prefill_gflops / sgemm);

  Sampler greedy({});
  const double t0 = NowSeconds();
  double decode_flops = 0;
  for (int i = 0; i < a.decode_tokens; ++i) {
    const int32_t next = greedy.Sample(kept.kv.last_logits());
    decode_flops += c.ForwardFlops(kept.kv.tokens(), 1, 1);
    auto logits = (*model)->Decode(&kept.kv, std::span(&next, 1));
    if (!logits.ok()) return ReportError("bench-runtime", logits.status());
  }
  const double decode_s = NowSeconds() - t0;
  fmt::print("decode {} tokens at {}+ context: {:.3f} s, {:.1f} tokens/s, {:.1f} GFLOP/s\n",
             a.decode_tokens, a.context, decode_s, a.decode_tokens / decode_s,
             decode_flops / decode_s / 1e9);
  fmt::print("{{\"params_m\":{:.2f},\"context\":{},\"sgemm_gflops\":{:.2f},\"prefill_tokens_per_s\":"
             "{:.1f},\"prefill_gflops\":{:.2f},\"prefill_fraction_of_sgemm\":{:.3f},"
             "\"decode_tokens_per_s\":{:.2f}}}\n",
             params / 1e6, a.context, sgemm, a.context / best_prefill, prefill_gflops,
             prefill_gflops / sgemm, a.decode_tokens / decode_s);
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
