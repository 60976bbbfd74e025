// Copyright kvserve authors. experiments/quality_report.h.
#include "experiments/quality_report.h"

#include <fmt/format.h>

#include <cmath>

#include "experiments/lab.h"
#include "experiments/profile_inputs.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {

Result<QualityReport> EvaluateQualityProfile(QualityEvaluator& evaluator,
                                             const std::vector<EvalSample>& samples,
                                             const Profile& profile,
                                             const std::string& head_scores_path,
                                             QualityOptions o) {
  if (NeedsHeadScores(profile) && head_scores_path.empty()) {
    return Status::InvalidArgument("profile '" + profile.ToString() +
                                   "' needs per-head retrieval scores: pass --head-scores FILE "
                                   "(`kvserve head-scores --model DIR` on training-split prompts "
                                   "writes one)");
  }
  const ModelConfig& c = evaluator.model().config();
  KVSERVE_ASSIGN_OR_RETURN(
      auto scores,
      LoadHeadScoresFor(profile, head_scores_path, KvShape{c.layers, c.kv_heads, 1, c.head_dim}));
  o.head_scores = scores.get();
  return evaluator.Evaluate(samples, profile, o);
}

std::string Percent(double v) { return std::isfinite(v) ? fmt::format("{:.1f}%", 100 * v) : "n/a"; }

std::string QualityReportText(const QualityReport& r, DType wire_dtype) {
  const bool ppl = r.metric == QualityMetric::kPerplexity;
  std::string out =
      fmt::format("workload {}  profile {}  samples {}/{}{}\n", r.workload, r.profile,
                  r.samples_scored, r.samples_total, r.subset ? " (random subset)" : "");
  if (ppl) {
    out += fmt::format("  perplexity        {:.3f} (none {:.3f})\n", r.metric_value,
                       r.baseline_metric_value);
  } else {
    out += fmt::format("  exact match       {} (none {})\n", Percent(r.metric_value),
                       Percent(r.baseline_metric_value));
  }
  out += fmt::format("  relative quality  {}  95% CI [{}, {}]{}\n", Percent(r.relative),
                     Percent(r.relative_ci.low), Percent(r.relative_ci.high),
                     ppl ? "  (mean ppl_none/ppl)" : "");
  out += fmt::format("  token accuracy    {} (none {}), relative {} [{}, {}]\n",
                     Percent(r.token_accuracy), Percent(r.baseline_token_accuracy),
                     Percent(r.relative_token_accuracy), Percent(r.relative_token_accuracy_ci.low),
                     Percent(r.relative_token_accuracy_ci.high));
  out += fmt::format("  CR                {:.2f} (aggregate {:.2f}, vs {})\n", r.cr_mean,
                     r.cr_aggregate, DTypeName(wire_dtype));
  out += fmt::format("  encode / decode   {:.2f} / {:.2f} ms per sample\n", r.encode_ms_mean,
                     r.decode_ms_mean);
  out += fmt::format("  prefills {} (cache hits {}), {:.2f} s\n", r.prefills, r.prefill_cache_hits,
                     r.seconds);
  return out;
}

}  // namespace kvserve::lab
