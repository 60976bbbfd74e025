// Copyright kvserve authors. Token sampling and the generation loop.
#include <algorithm>
#include <cmath>

#include "kvserve/runtime.h"

namespace kvserve {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (options_.temperature <= 0.0f) {
    // Greedy; std::max_element returns the first (lowest id) maximum.
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  scratch_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scratch_[i] = {logits[i], static_cast<int32_t>(i)};
  std::sort(scratch_.begin(), scratch_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const double max_logit = scratch_[0].first;
  std::vector<double> probs(scratch_.size());
  double total = 0;
  for (size_t i = 0; i < scratch_.size(); ++i) {
    probs[i] = std::exp((scratch_[i].first - max_logit) / options_.temperature);
    total += probs[i];
  }
  // Smallest prefix (by probability) whose mass reaches top_p.
  const double top_p = std::clamp(static_cast<double>(options_.top_p), 1e-9, 1.0);
  size_t keep = 0;
  double mass = 0;
  while (keep < probs.size()) {
    mass += probs[keep] / total;
    ++keep;
    if (mass >= top_p) break;
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
  // 53 random bits -> uniform in [0, kept_total): deterministic across
  // platforms, unlike std::uniform_real_distribution.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept_total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

Result<std::vector<int32_t>> Generate(const Model& model, KvState* kv,
                                      std::span<const float> first_logits, int max_new_tokens,
                                      Sampler* sampler, bool stop_at_eos) {
  std::vector<int32_t> out;
  if (max_new_tokens <= 0) return out;
  const auto& eos = model.config().eos_token_ids;
  std::vector<float> logits(first_logits.begin(), first_logits.end());
  for (int i = 0; i < max_new_tokens; ++i) {
    const int32_t next = sampler->Sample(logits);
    out.push_back(next);
    if (stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    if (i + 1 == max_new_tokens) break;
    KVSERVE_ASSIGN_OR_RETURN(logits, model.Decode(kv, std::span<const int32_t>(&next, 1)));
  }
  return out;
}

}  // namespace kvserve
