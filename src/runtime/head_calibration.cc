// Copyright kvserve authors. DuoAttention-style head calibration.
//
// For each prompt, prefill measures, at every layer and query head, how far
// the head's attention output moves when its attention is restricted to the
// first `sink_tokens` plus the last `recent_tokens` keys (the streaming
// pattern DuoAttention gives non-retrieval heads). The restriction is only
// measured, never propagated, so each (layer, head) is judged on the real
// activations. A kv head's score is the mean relative squared change over
// its query heads and all query rows beyond the window.
#include "kvserve/runtime.h"

namespace kvserve {

Result<HeadScores> CalibrateHeadScores(const Model& model,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const HeadCalibrationOptions& options) {
  if (options.sink_tokens < 0 || options.recent_tokens < 1) {
    return Status::InvalidArgument("head calibration: need sink >= 0 and recent >= 1");
  }
  StreamingProbe probe;
  probe.sink_tokens = options.sink_tokens;
  probe.recent_tokens = options.recent_tokens;
  bool any = false;
  for (const auto& prompt : prompts) {
    if (static_cast<int>(prompt.size()) <= options.sink_tokens + options.recent_tokens) continue;
    any = true;
    KVSERVE_ASSIGN_OR_RETURN(PrefillResult r, model.PrefillWithProbe(prompt, &probe));
    (void)r;
  }
  if (!any) {
    return Status::InvalidArgument("head calibration: no prompt longer than sink + recent (" +
                                   std::to_string(options.sink_tokens + options.recent_tokens) +
                                   " tokens)");
  }
  HeadScores scores;
  scores.layers = model.config().layers;
  scores.kv_heads = model.config().kv_heads;
  scores.scores.resize(probe.change_sum.size());
  for (size_t i = 0; i < scores.scores.size(); ++i) {
    scores.scores[i] =
        probe.rows[i] > 0 ? static_cast<float>(probe.change_sum[i] / probe.rows[i]) : 0.0f;
  }
  return scores;
}

}  // namespace kvserve
