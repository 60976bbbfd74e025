// Copyright kvserve authors. experiments/runtime_bench.h.
#include "experiments/runtime_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "experiments/lab.h"
#include "kvserve/profiler.h"
#include "kvserve/timing.h"

namespace kvserve::lab {

std::string RuntimeBenchResult::Text(const RuntimeBenchOptions& o) const {
  const ModelConfig& c = config;
  std::string out = fmt::format(
      "model: {} layers, hidden {}, heads {}/{} (q/kv), head_dim {}, ffn {}, vocab {}: {:.1f} M "
      "params\n",
      c.layers, c.hidden_size, c.heads, c.kv_heads, c.head_dim, c.intermediate_size, c.vocab_size,
      parameters / 1e6);
  out += fmt::format("blas: {}\nsgemm {}^3: {:.1f} GFLOP/s\n", blas, o.sgemm_n, sgemm_gflops);
  out += fmt::format(
      "prefill {} tokens: {:.3f} s, {:.0f} tokens/s, {:.1f} GFLOP/s = {:.0f}% of sgemm\n",
      o.context, prefill_seconds, o.context / prefill_seconds, prefill_gflops,
      100 * prefill_gflops / sgemm_gflops);
  out += fmt::format("decode {} tokens at {}+ context: {:.3f} s, {:.1f} tokens/s, {:.1f} GFLOP/s\n",
                     o.decode_tokens, o.context, decode_seconds, o.decode_tokens / decode_seconds,
                     decode_gflops);
  return out;
}

std::string RuntimeBenchResult::Json(const RuntimeBenchOptions& o) const {
  return fmt::format(
      "{{\"params_m\":{:.2f},\"context\":{},\"sgemm_gflops\":{:.2f},\"prefill_tokens_per_s\":"
      "{:.1f},\"prefill_gflops\":{:.2f},\"prefill_fraction_of_sgemm\":{:.3f},"
      "\"decode_tokens_per_s\":{:.2f}}}\n",
      parameters / 1e6, o.context, sgemm_gflops, o.context / prefill_seconds, prefill_gflops,
      prefill_gflops / sgemm_gflops, o.decode_tokens / decode_seconds);
}

Result<RuntimeBenchResult> RunRuntimeBench(const RuntimeBenchOptions& o) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("kvserve_bench_runtime_{}", ::getpid()))
          .string();
  KVSERVE_RETURN_IF_ERROR(WriteRandomModel(dir, o.spec));
  auto model = Model::Load(dir, RuntimeOptions{o.threads});
  std::filesystem::remove_all(dir);
  KVSERVE_RETURN_IF_ERROR(model.status());
  RuntimeBenchResult r;
  r.config = (*model)->config();
  const ModelConfig& c = r.config;
  r.parameters = c.NonEmbeddingParameters() + int64_t{c.vocab_size} * c.hidden_size;
  r.blas = BlasDescription();
  r.sgemm_gflops = MeasureSgemmGflops(o.sgemm_n, 3);
  std::mt19937_64 rng(1);
  std::vector<int32_t> prompt(o.context);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
  PrefillResult kept;
  KVSERVE_ASSIGN_OR_RETURN(r.prefill_seconds, FastestSeconds(o.repeats, [&](int) -> Status {
                             KVSERVE_ASSIGN_OR_RETURN(kept, (*model)->Prefill(prompt));
                             return Status::Ok();
                           }));
  r.prefill_gflops = c.ForwardFlops(0, o.context, 1) / r.prefill_seconds / 1e9;
  Sampler greedy({});
  const double t0 = NowSeconds();
  double decode_flops = 0;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const int32_t next = greedy.Sample(kept.kv.last_logits());
    decode_flops += c.ForwardFlops(kept.kv.tokens(), 1, 1);
    KVSERVE_RETURN_IF_ERROR((*model)->Decode(&kept.kv, std::span(&next, 1)).status());
  }
  r.decode_seconds = NowSeconds() - t0;
  r.decode_gflops = decode_flops / r.decode_seconds / 1e9;
  return r;
}

}  // namespace kvserve::lab
