// Copyright kvserve authors. `kvserve synth`: write a synthetic KV file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/kv_file.h"

namespace kvserve::cli {
namespace {

struct SynthArgs {
  std::string output;
  std::string shape = "small";
  int layers = 0, kv_heads = 0, tokens = 0, head_dim = 0;
  std::string dtype = "bf16";
  uint64_t seed = 1;
  std::string head_scores;
  SynthOptions model;
};

int RunSynth(const SynthArgs& a) {
  auto preset = FindSynthShapePreset(a.shape);
  if (!preset.ok()) return ReportError("synth", preset.status());
  auto dtype = ParseDType(a.dtype);
  if (!dtype.ok()) return ReportError("synth", dtype.status());
  SynthOptions o = a.model;
  o.shape = preset->shape;
  if (a.layers > 0) o.shape.layers = a.layers;
  if (a.kv_heads > 0) o.shape.kv_heads = a.kv_heads;
  if (a.tokens > 0) o.shape.tokens = a.tokens;
  if (a.head_dim > 0) o.shape.head_dim = a.head_dim;
  o.dtype = *dtype;
  o.seed = a.seed;
  const double start = NowSeconds();
  Progress("synth", "generating {} cache {} (layers x kv_heads x tokens x head_dim), {}, seed {}",
           DTypeName(o.dtype), ShapeString(o.shape),
           HumanBytes(static_cast<uint64_t>(o.shape.NumElements()) * DTypeSize(o.dtype)), o.seed);
  auto cache = SynthesizeKv(o);
  if (!cache.ok()) return ReportError("synth", cache.status());
  KvFileMetadata meta = SynthMetadata(o);
  meta["synth.shape_preset"] = a.shape;
  Progress("synth", "writing {}", a.output);
  if (Status s = SaveKvFile(a.output, cache->view(), meta); !s.ok()) return ReportError("synth", s);
  if (!a.head_scores.empty()) {
    const HeadScores scores = SynthesizeHeadScores(o.shape.layers, o.shape.kv_heads, o.seed);
    if (Status s = scores.Save(a.head_scores); !s.ok()) return ReportError("synth", s);
    Progress("synth", "wrote synthetic head scores {}", a.head_scores);
  }
  Progress("synth", "done in {:.1f} s", NowSeconds() - start);
  return 0;
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
