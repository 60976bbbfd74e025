// Copyright kvserve authors. Residual-corrected epsilon-greedy bandit (paper
// §6.2), internal to the controller.
//
// One environment per (workload, quality bucket, envelope interval); the
// controller names the interval by its model-optimal profile. Each
// environment holds kSlots candidate slots (the model optimum, up to two
// envelope neighbours, and raw as the safety arm), each with:
//   ratio  EWMA of observed / predicted latency (a multiplicative residual:
//          requests in one environment differ in size by orders of magnitude,
//          so an additive residual in seconds would not transfer between
//          them; the ratio does);
//   count  uses;
//   a bit history of SLO violations over the last M uses and a cool-down
//          deadline set when K of them were violations.
// State per environment is constant-size.
#ifndef KVSERVE_SRC_CONTROLLER_BANDIT_H_
#define KVSERVE_SRC_CONTROLLER_BANDIT_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace kvserve::controller_internal {

struct BanditOptions {
  double epsilon = 0.05;
  double exploration_margin = 0.10;
  double alpha = 0.25;
  int cooldown_violations = 3;  // K
  int cooldown_window = 10;     // M <= 64
  double cooldown_seconds = 10.0;
  uint64_t seed = 1;
  // Per passed-over decision, a used candidate's log ratio shrinks by
  // relax / count (ControllerOptions::residual_relax).
  double relax = 0.2;
};

struct BanditCandidate {
  int profile = 0;
  double predicted_seconds = 0.0;
  bool is_raw = false;
};

struct BanditChoice {
  bool any = false;  // false: every candidate is cooling down or over budget
  int profile = -1;
  double predicted_seconds = 0.0;
  double corrected_seconds = 0.0;
  bool explored = false;
};

// Thread safety: thread-safe; environments are guarded by striped mutexes.
class ResidualBandit {
 public:
  static constexpr int kSlots = 4;

  // `profiles` bounds the profile indices (for the global ratios).
  ResidualBandit(int environments, int profiles, BanditOptions options);

  // Picks among `candidates` (at most kSlots, distinct profiles) of
  // environment `env`: drops those cooling down at `now` or whose corrected
  // latency exceeds `budget_seconds`, then with probability 1 - epsilon the
  // lowest corrected latency, else a uniformly random other survivor whose
  // corrected latency is within (1 + exploration_margin) of the greedy one's
  // and does not exceed raw's (when raw is a candidate).
  // A candidate never used in this environment starts from the profile's
  // global ratio (an EWMA over all environments; 1 before any observation),
  // so drift learned in one interval is not paid again in every other.
  // Every used candidate not picked relaxes towards ratio 1 (relax / count
  // of its log), so one bad sample cannot shut a profile out for good.
  BanditChoice Choose(int env, std::span<const BanditCandidate> candidates,
                      double budget_seconds, double now_seconds);

  // Records one use of `profile` in `env`. Ignored if `profile` holds no slot
  // there (evicted meanwhile).
  void Update(int env, int profile, double predicted_seconds,
              double observed_seconds, bool slo_violated, double now_seconds);

  // For tests: the slot state of `profile` in `env`; count 0 if absent.
  struct SlotView {
    int64_t count = 0;
    double ratio = 1.0;
    double cooldown_until = 0.0;
  };
  SlotView Inspect(int env, int profile) const;

 private:
  struct Slot {
    int32_t profile = -1;
    uint32_t count = 0;
    double ratio = 1.0;
    uint64_t history = 0;  // bit i = violation i uses ago
    uint32_t history_len = 0;
    double cooldown_until = -1e300;
  };
  struct Environment {
    std::array<Slot, kSlots> slots;
    uint64_t rng = 0;
  };
  static constexpr int kStripes = 64;

  std::mutex& StripeFor(int env) const { return stripes_[env % kStripes]; }

  double GlobalRatio(int profile) const;

  BanditOptions options_;
  std::vector<Environment> envs_;
  mutable std::mutex global_mu_;
  std::vector<double> global_ratio_;   // per profile
  std::vector<uint32_t> global_count_;
  mutable std::array<std::mutex, kStripes> stripes_;
};

}  // namespace kvserve::controller_internal

#endif  // KVSERVE_SRC_CONTROLLER_BANDIT_H_
