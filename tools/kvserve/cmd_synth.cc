// Copyright kvserve authors. `kvserve synth`: write a synthetic KV file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/synth_files.h"
#include "kvserve/kv_file.h"

namespace kvserve::cli {
namespace {

using SynthArgs = lab::SynthFileOptions;

int RunSynth(const SynthArgs& a) {
  Status s = lab::WriteSynthFiles(a, ProgressTo("synth"));
  return s.ok() ? 0 : ReportError("synth", s);
}

RunFn SetupSynth(CLI::App& sub) {
  auto a = std::make_shared<SynthArgs>();
  sub.description(
      "Write a synthetic KV cache (a KV file, docs/kv-files.md) with the structure real ones "
      "have: per-channel outliers and non-zero channel means in K, RoPE-rotated channel pairs, "
      "correlated neighbouring tokens, roughly Gaussian V with smaller outliers. The file's "
      "metadata says \"synthetic\": \"true\". Deterministic for a given seed.");
  sub.add_option("-o,--output", a->output, "KV file to write (.safetensors)")->required();
  std::string shapes;
  for (const auto& p : SynthShapePresets()) shapes += fmt::format("\n  {}: {}", p.name, p.description);
  sub.add_option("--shape", a->shape, "shape preset:" + shapes)->capture_default_str();
  sub.add_option("--layers", a->layers, "override the preset's layer count")->check(CLI::Range(1, 1 << 16));
  sub.add_option("--kv-heads", a->kv_heads, "override the preset's KV head count")->check(CLI::Range(1, 1 << 16));
  sub.add_option("--tokens", a->tokens, "override the preset's token count")->check(CLI::Range(1, 1 << 24));
  sub.add_option("--head-dim", a->head_dim, "override the preset's head_dim (even)")->check(CLI::Range(2, 1 << 16));
  sub.add_option("--dtype", a->dtype, "element type: f32, f16 or bf16")->capture_default_str();
  sub.add_option("--seed", a->seed, "generator seed")->capture_default_str();
  sub.add_option("--head-scores", a->head_scores,
                 "also write synthetic per-head retrieval scores (JSON) for mixhq/duo");
  sub.add_option("--key-correlation", a->model.token_correlation_key,
                 "lag-1 correlation of neighbouring tokens in K, [0, 1)")->capture_default_str();
  sub.add_option("--value-correlation", a->model.token_correlation_value,
                 "lag-1 correlation of neighbouring tokens in V, [0, 1)")->capture_default_str();
  sub.add_option("--key-outlier-scale", a->model.key_outlier_scale,
                 "magnitude of K outlier channels relative to ordinary ones")->capture_default_str();
  sub.footer("Example: kvserve synth --shape llama3-8b --tokens 2048 -o kv.safetensors");
  return [a] { return RunSynth(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(synth, "Write a synthetic KV cache with realistic structure", kvserve::cli::SetupSynth);
