// Copyright kvserve authors. Residual-corrected bandit; see bandit.h.
#include "controller/bandit.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace kvserve::controller_internal {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Uniform01(uint64_t& state) {
  return static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace

ResidualBandit::ResidualBandit(int environments, int profiles, BanditOptions options)
    : options_(options),
      envs_(static_cast<size_t>(std::max(environments, 0))),
      global_ratio_(static_cast<size_t>(std::max(profiles, 0)), 1.0),
      global_count_(static_cast<size_t>(std::max(profiles, 0)), 0) {
  uint64_t seed = options.seed;
  for (Environment& e : envs_) e.rng = SplitMix64(seed);
}

double ResidualBandit::GlobalRatio(int profile) const {
  std::lock_guard<std::mutex> lock(global_mu_);
  const size_t p = static_cast<size_t>(profile);
  return p < global_ratio_.size() && global_count_[p] > 0 ? global_ratio_[p] : 1.0;
}

BanditChoice ResidualBandit::Choose(int env,
                                    std::span<const BanditCandidate> candidates,
                                    double budget_seconds, double now_seconds) {
  BanditChoice choice;
  const int n = std::min(static_cast<int>(candidates.size()), kSlots);
  std::lock_guard<std::mutex> lock(StripeFor(env));
  Environment& e = envs_[static_cast<size_t>(env)];

  // Map candidates to slots; evict slots whose profile is not a candidate.
  std::array<int, kSlots> slot_of{};
  std::array<bool, kSlots> taken{};
  for (int c = 0; c < n; ++c) {
    slot_of[c] = -1;
    for (int s = 0; s < kSlots; ++s) {
      if (e.slots[s].profile == candidates[c].profile) {
        slot_of[c] = s;
        taken[s] = true;
      }
    }
  }
  for (int c = 0; c < n; ++c) {
    if (slot_of[c] >= 0) continue;
    for (int s = 0; s < kSlots; ++s) {
      if (!taken[s]) {
        e.slots[s] = Slot{};
        e.slots[s].profile = candidates[c].profile;
        e.slots[s].ratio = GlobalRatio(candidates[c].profile);
        slot_of[c] = s;
        taken[s] = true;
        break;
      }
    }
  }

  std::array<double, kSlots> corrected{};
  std::array<bool, kSlots> allowed{};
  double raw_corrected = std::numeric_limits<double>::infinity();
  int best = -1;
  for (int c = 0; c < n; ++c) {
    const Slot& s = e.slots[slot_of[c]];
    const double ratio = s.ratio;  // the global prior until first used here
    corrected[c] = candidates[c].predicted_seconds * ratio;
    allowed[c] = now_seconds >= s.cooldown_until && corrected[c] <= budget_seconds;
    if (candidates[c].is_raw && allowed[c]) raw_corrected = corrected[c];
    if (allowed[c] && (best < 0 || corrected[c] < corrected[best])) best = c;
  }
  if (best < 0) return choice;

  int pick = best;
  if (options_.epsilon > 0.0 && Uniform01(e.rng) < options_.epsilon) {
    std::array<int, kSlots> pool{};
    int pool_n = 0;
    for (int c = 0; c < n; ++c) {
      if (c != best && allowed[c] && corrected[c] <= raw_corrected &&
          corrected[c] <= corrected[best] * (1.0 + options_.exploration_margin)) {
        pool[pool_n++] = c;
      }
    }
    if (pool_n > 0) {
      pick = pool[SplitMix64(e.rng) % static_cast<uint64_t>(pool_n)];
      choice.explored = true;
    }
  }
  // The candidates passed over drift back towards the table's prediction,
  // the faster the less evidence their residual rests on.
  if (options_.relax > 0.0) {
    for (int c = 0; c < n; ++c) {
      Slot& s = e.slots[slot_of[c]];
      if (c == pick || s.count == 0 || s.ratio == 1.0) continue;
      s.ratio = std::exp(std::log(s.ratio) * (1.0 - options_.relax / s.count));
    }
  }
  choice.any = true;
  choice.profile = candidates[pick].profile;
  choice.predicted_seconds = candidates[pick].predicted_seconds;
  choice.corrected_seconds = corrected[pick];
  return choice;
}

void ResidualBandit::Update(int env, int profile, double predicted_seconds,
                            double observed_seconds, bool slo_violated,
                            double now_seconds) {
  if (!(predicted_seconds > 0.0) || !(observed_seconds > 0.0)) return;
  const double ratio = std::clamp(observed_seconds / predicted_seconds, 1e-2, 1e2);
  {
    std::lock_guard<std::mutex> lock(global_mu_);
    const size_t p = static_cast<size_t>(profile);
    if (p < global_ratio_.size()) {
      global_ratio_[p] = global_count_[p] == 0
                             ? ratio
                             : (1.0 - options_.alpha) * global_ratio_[p] + options_.alpha * ratio;
      ++global_count_[p];
    }
  }
  std::lock_guard<std::mutex> lock(StripeFor(env));
  Environment& e = envs_[static_cast<size_t>(env)];
  for (Slot& s : e.slots) {
    if (s.profile != profile) continue;
    s.ratio = s.count == 0 ? ratio : (1.0 - options_.alpha) * s.ratio + options_.alpha * ratio;
    ++s.count;
    const int window = std::clamp(options_.cooldown_window, 1, 64);
    s.history = (s.history << 1) | (slo_violated ? 1u : 0u);
    s.history_len = std::min<uint32_t>(s.history_len + 1, static_cast<uint32_t>(window));
    const uint64_t mask = window == 64 ? ~0ull : ((1ull << window) - 1);
    if (std::popcount(s.history & mask) >= options_.cooldown_violations) {
      s.cooldown_until = now_seconds + options_.cooldown_seconds;
      s.history = 0;
      s.history_len = 0;
    }
    return;
  }
}

ResidualBandit::SlotView ResidualBandit::Inspect(int env, int profile) const {
  std::lock_guard<std::mutex> lock(StripeFor(env));
  SlotView view;
  for (const Slot& s : envs_[static_cast<size_t>(env)].slots) {
    if (s.profile == profile) {
      view.count = s.count;
      view.ratio = s.ratio;
      view.cooldown_until = s.cooldown_until;
    }
  }
  return view;
}

}  // namespace kvserve::controller_internal
