// Copyright kvserve authors. The online controller; see kvserve/controller.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "controller/bandit.h"
#include "controller/codec_drift.h"
#include "controller/envelope.h"
#include "kvserve/controller.h"

namespace kvserve {

using controller_internal::BanditCandidate;
using controller_internal::BanditChoice;
using controller_internal::BanditOptions;
using controller_internal::CodecDrift;
using controller_internal::CodecDriftOptions;
using controller_internal::ParametricEnvelope;
using controller_internal::PlaneLine;
using controller_internal::ResidualBandit;

class Controller::Impl {
 public:
  // The profiles a request may use: q_p(w) >= q_min selects exactly the
  // profiles whose quality is at least the smallest distinct quality value
  // >= q_min, so there is one bucket per distinct quality value (plus the
  // raw-only bucket), and bucket j holds precisely the floor-feasible set.
  struct Bucket {
    std::vector<int> members;  // compressed profiles, q >= threshold
    ParametricEnvelope envelope;
    int most_conservative = ProfileTable::kRaw;
  };
  struct Workload {
    std::vector<double> thresholds;  // distinct qualities, descending
    std::vector<Bucket> buckets;     // thresholds.size() + 1
    int env_base = 0;
  };
  struct Optimum {
    int profile = ProfileTable::kRaw;
    double predicted = 0.0;
    std::array<int, 2> neighbours{};
    int neighbour_count = 0;
  };

  Impl(ProfileTable t, ControllerOptions o) : table(std::move(t)), options(o) {}

  Status Build() {
    const int profiles = table.size();
    int env_count = 0;
    for (int w = 0; w < static_cast<int>(table.workloads().size()); ++w) {
      Workload wl;
      std::vector<std::pair<double, int>> eligible;
      for (int p = 1; p < profiles; ++p) {
        const double q = table.Quality(p, w);
        if (std::isfinite(q)) eligible.push_back({q, p});
      }
      std::sort(eligible.begin(), eligible.end(), std::greater<>());
      for (const auto& [q, p] : eligible) {
        if (wl.thresholds.empty() || wl.thresholds.back() != q) wl.thresholds.push_back(q);
      }
      wl.buckets.resize(wl.thresholds.size() + 1);
      for (size_t j = 0; j < wl.buckets.size(); ++j) {
        Bucket& b = wl.buckets[j];
        std::vector<PlaneLine> lines = {{0.0, 0.0, 1.0, ProfileTable::kRaw}};
        double best_q = -kInfinity, best_g = kInfinity;
        for (const auto& [q, p] : eligible) {
          if (j == 0 || q < wl.thresholds[j - 1]) continue;
          b.members.push_back(p);
          const ProfileCost& c = table.profile(p);
          const double g = c.CodecSecondsPerByte();
          if (q > best_q || (q == best_q && g < best_g)) {
            best_q = q;
            best_g = g;
            b.most_conservative = p;
          }
          // cr <= 1 lies on or above raw everywhere: never strictly optimal.
          if (c.compression_ratio > 1.0) {
            lines.push_back({c.overhead_seconds, g, 1.0 / c.compression_ratio, p});
          }
        }
        if (options.model.kind == LatencyModelKind::kSerial) {
          b.envelope = ParametricEnvelope::Build(std::move(lines));
        }
      }
      wl.env_base = env_count;
      env_count += static_cast<int>(wl.buckets.size()) * profiles;
      workloads.push_back(std::move(wl));
    }
    BanditOptions bo;
    bo.epsilon = options.epsilon;
    bo.exploration_margin = options.exploration_margin;
    bo.alpha = options.residual_alpha;
    bo.cooldown_violations = options.cooldown_violations;
    bo.cooldown_window = options.cooldown_window;
    bo.cooldown_seconds = options.cooldown_seconds;
    bo.seed = options.seed;
    bo.relax = options.residual_relax;
    bandit = std::make_unique<ResidualBandit>(options.bandit ? env_count : 0, profiles, bo);
    drift = std::make_unique<CodecDrift>(profiles, CodecDriftOptions{});
    return Status::Ok();
  }

  Status Check(const ControllerRequest& r) const {
    if (r.workload < 0 || r.workload >= static_cast<int>(workloads.size())) {
      return Status::InvalidArgument("unknown workload index");
    }
    if (!(r.kv_bytes > 0.0) || !std::isfinite(r.kv_bytes)) {
      return Status::InvalidArgument("kv_bytes must be finite and > 0");
    }
    if (!(r.bandwidth > 0.0) || !std::isfinite(r.bandwidth)) {
      return Status::InvalidArgument("bandwidth must be finite and > 0");
    }
    if (std::isnan(r.quality_min) || std::isnan(r.slo_seconds) ||
        std::isnan(r.model_seconds)) {
      return Status::InvalidArgument("NaN in request");
    }
    if (!(r.bandwidth_log_sigma >= 0.0)) {
      return Status::InvalidArgument("bandwidth_log_sigma must be >= 0");
    }
    if (!(r.source_seconds >= 0.0) || !std::isfinite(r.source_seconds)) {
      return Status::InvalidArgument("source_seconds must be finite and >= 0");
    }
    if (!r.frame_bytes.empty()) {
      if (r.frame_bytes.size() != static_cast<size_t>(table.size()))
        return Status::InvalidArgument("frame_bytes must have one entry per table profile");
      for (double b : r.frame_bytes)
        if (!std::isfinite(b)) return Status::InvalidArgument("frame_bytes must be finite");
    }
    return Status::Ok();
  }

  int BucketIndex(const Workload& wl, double quality_min) const {
    // Number of distinct qualities >= q_min (thresholds are descending).
    return static_cast<int>(std::upper_bound(wl.thresholds.begin(), wl.thresholds.end(),
                                             quality_min, std::greater<>()) -
                            wl.thresholds.begin());
  }

  // Profile p's compression ratio for request r: from the request's own
  // frame size when the caller gives it, else the table's.
  double RequestCr(int p, const ControllerRequest& r) const {
    if (p != ProfileTable::kRaw && static_cast<size_t>(p) < r.frame_bytes.size() &&
        r.frame_bytes[p] > 0.0)
      return r.kv_bytes / r.frame_bytes[p];
    return table.profile(p).compression_ratio;
  }

  // Profile p's table row with compression ratio `cr` (numbers only: no
  // allocation on the decision path).
  static ProfileCost WithCr(const ProfileCost& row, double cr) {
    ProfileCost c;
    c.compression_ratio = cr;
    c.encode_bytes_per_second = row.encode_bytes_per_second;
    c.decode_bytes_per_second = row.decode_bytes_per_second;
    c.overhead_seconds = row.overhead_seconds;
    c.streamed = row.streamed;
    return c;
  }

  // factor * T(V, B * factor, S / factor) with profile p at compression
  // ratio `cr` and source time S: the profile's time with its codec (and t0)
  // `factor` times slower, the link and the source unchanged.
  double PredictAt(int p, double cr, double kv_bytes, double bandwidth, double factor,
                   double source_seconds) const {
    const ProfileCost& row = table.profile(p);
    const double source = source_seconds / factor;
    if (cr == row.compression_ratio)
      return factor * PredictSeconds(options.model, row, kv_bytes, bandwidth * factor, source);
    return factor * PredictSeconds(options.model, WithCr(row, cr), kv_bytes, bandwidth * factor, source);
  }

  double Predict(int p, const ControllerRequest& r) const {
    return PredictAt(p, RequestCr(p, r), r.kv_bytes, r.bandwidth, 1.0, r.source_seconds);
  }

  Optimum FindOptimum(const Bucket& b, const ControllerRequest& r) const {
    Optimum o;
    // The envelope holds the table's ratios; a request with its own frame
    // sizes is evaluated profile by profile below.
    if (options.model.kind == LatencyModelKind::kSerial && r.frame_bytes.empty()) {
      const ParametricEnvelope::Hit hit =
          b.envelope.Query(1.0 / r.kv_bytes, 1.0 / r.bandwidth);
      o.profile = hit.id;
      const std::span<const int> seq = b.envelope.Sequence(hit.slab);
      if (hit.segment > 0) o.neighbours[o.neighbour_count++] = seq[hit.segment - 1];
      if (hit.segment + 1 < static_cast<int>(seq.size())) {
        o.neighbours[o.neighbour_count++] = seq[hit.segment + 1];
      }
      o.predicted = Predict(o.profile, r);
      return o;
    }
    // Streamed: each profile's time is convex piecewise linear in 1/B, not a
    // line, so evaluate every floor-feasible profile exactly (n is small);
    // likewise with request-specific compression ratios.
    std::array<std::pair<double, int>, 3> top;
    top.fill({kInfinity, -1});
    auto offer = [&](int p) {
      std::pair<double, int> item{Predict(p, r), p};
      for (auto& slot : top) {
        if (item < slot) std::swap(item, slot);
      }
    };
    offer(ProfileTable::kRaw);
    for (int p : b.members) offer(p);
    o.profile = top[0].second;
    o.predicted = top[0].first;
    for (int k = 1; k < 3; ++k) {
      if (top[k].second >= 0) o.neighbours[o.neighbour_count++] = top[k].second;
    }
    return o;
  }

  Decision Fallback(const Bucket& b, const ControllerRequest& r, double budget) const {
    Decision d;
    d.feasible = false;
    d.budget_seconds = budget;
    d.kv_bytes = r.kv_bytes;
    d.bandwidth = r.bandwidth;
    d.source_seconds = r.source_seconds;
    switch (options.fallback) {
      case FallbackPolicy::kRaw:
        d.profile = ProfileTable::kRaw;
        break;
      case FallbackPolicy::kMostConservative:
        d.profile = b.most_conservative;
        break;
      case FallbackPolicy::kRecompute:
        d.action = ControllerAction::kRecompute;
        d.profile = ProfileTable::kRaw;
        d.predicted_seconds = d.corrected_seconds = 0.0;
        return d;
      case FallbackPolicy::kFastest:  // only when every bandit arm cools down: raw
        d.profile = ProfileTable::kRaw;
        break;
    }
    d.predicted_seconds = d.corrected_seconds = Predict(d.profile, r);
    d.compression_ratio = RequestCr(d.profile, r);
    return d;
  }

  bool Learning() const { return options.bandit && options.learn_codec_drift; }

  // Profile p's KV-movement time for request r at `bandwidth` with its
  // codec `factor` times slower than the table: factor * T(V, B * factor),
  // exact for both models (the factor scales t0 and both codec times alike).
  double PredictWithFactor(int p, const ControllerRequest& r, double bandwidth,
                           double factor) const {
    return PredictAt(p, RequestCr(p, r), r.kv_bytes, bandwidth, factor, r.source_seconds);
  }

  // Theorem 6.1 at the request's bandwidth on the table's numbers (a
  // profile beyond its B*(V) is never chosen), and the risk guard: the
  // profile also beats raw at the pessimistic bandwidth `upper`, with its
  // learned codec factor.
  bool Safe(int p, const ControllerRequest& r, double raw, double upper, double factor) const {
    if (p == ProfileTable::kRaw) return true;
    if (!(Predict(p, r) < raw)) return false;
    if (options.risk_sigmas <= 0.0 || r.bandwidth_log_sigma == 0.0) {
      return factor == 1.0 || PredictWithFactor(p, r, r.bandwidth, factor) < raw;
    }
    if (!std::isfinite(upper)) return false;
    return PredictWithFactor(p, r, upper, factor) <
           PredictWithFactor(ProfileTable::kRaw, r, upper, 1.0);
  }

  Result<Decision> Decide(const ControllerRequest& r) {
    KVSERVE_RETURN_IF_ERROR(Check(r));
    const Workload& wl = workloads[r.workload];
    const int j = BucketIndex(wl, r.quality_min);
    const Bucket& b = wl.buckets[j];
    const double budget = r.slo_seconds - r.model_seconds;
    // Shared codec drift D: every profile's time is D * T_table(V, B * D,
    // S / D), so the table's envelope at bandwidth B * D (source S / D)
    // gives the drifted optimum.
    const double shared = Learning() ? drift->Shared() : 1.0;
    ControllerRequest drifted = r;
    drifted.bandwidth = r.bandwidth * shared;
    drifted.source_seconds = r.source_seconds / shared;
    Optimum o = FindOptimum(b, drifted);
    o.predicted *= shared;
    const bool feasible = o.predicted <= budget;
    const bool best_effort = !feasible && options.fallback == FallbackPolicy::kFastest;
    if (!feasible && !best_effort) return Fallback(b, r, budget);
    const double raw = Predict(ProfileTable::kRaw, r);
    const double upper = options.risk_sigmas > 0.0
                             ? r.bandwidth * std::exp(options.risk_sigmas * r.bandwidth_log_sigma)
                             : r.bandwidth;
    Decision d;
    d.feasible = feasible;
    d.budget_seconds = budget;
    d.kv_bytes = r.kv_bytes;
    d.bandwidth = r.bandwidth;
    d.source_seconds = r.source_seconds;
    if (!options.bandit) {
      if (Safe(o.profile, r, raw, upper, 1.0)) {
        d.profile = o.profile;
        d.predicted_seconds = d.corrected_seconds = o.predicted;
        d.compression_ratio = RequestCr(o.profile, r);
      } else {
        d.profile = ProfileTable::kRaw;
        d.predicted_seconds = d.corrected_seconds = raw;
      }
      return d;
    }
    // Candidates: the optimum and its envelope neighbours that are safe
    // (Theorem 6.1 and the risk guard), nearest first, each predicted with
    // its learned codec factor, and raw as the safety arm.
    std::array<BanditCandidate, ResidualBandit::kSlots> cands;
    int n = 0;
    auto factor_of = [&](int p) { return Learning() ? drift->Factor(p) : 1.0; };
    if (o.profile != ProfileTable::kRaw) {
      const double f = factor_of(o.profile);
      if (Safe(o.profile, r, raw, upper, f)) {
        cands[n++] = {o.profile, PredictWithFactor(o.profile, r, r.bandwidth, f), false};
      }
    }
    std::array<std::pair<double, int>, 2> nb;
    int nb_count = 0;
    for (int k = 0; k < o.neighbour_count; ++k) {
      const int p = o.neighbours[k];
      if (p == ProfileTable::kRaw) continue;
      const double f = factor_of(p);
      if (Safe(p, r, raw, upper, f)) {
        nb[nb_count++] = {PredictWithFactor(p, r, r.bandwidth, f), p};
      }
    }
    if (nb_count == 2 && nb[1] < nb[0]) std::swap(nb[0], nb[1]);
    for (int k = 0; k < nb_count && n < options.candidates; ++k) {
      cands[n++] = {nb[k].second, nb[k].first, false};
    }
    cands[n++] = {ProfileTable::kRaw, raw, true};
    const int env = wl.env_base + j * table.size() + o.profile;
    // Best effort: no arm meets the budget, the fastest corrected one goes.
    const BanditChoice c = bandit->Choose(env, std::span<const BanditCandidate>(cands.data(), n),
                                          best_effort ? kInfinity : budget, r.now_seconds);
    if (!c.any) {
      Decision f = Fallback(b, r, budget);
      f.feasible = feasible;
      return f;
    }
    d.profile = c.profile;
    d.predicted_seconds = c.predicted_seconds;
    d.corrected_seconds = c.corrected_seconds;
    d.explored = c.explored;
    d.environment = env;
    d.compression_ratio = RequestCr(c.profile, r);
    d.codec_factor = factor_of(c.profile);
    return d;
  }

  ProfileTable table;
  ControllerOptions options;
  std::vector<Workload> workloads;
  std::unique_ptr<ResidualBandit> bandit;
  std::unique_ptr<CodecDrift> drift;
};

Result<std::unique_ptr<Controller>> Controller::Create(ProfileTable table,
                                                       ControllerOptions options) {
  if (!(options.epsilon >= 0.0 && options.epsilon <= 1.0)) {
    return Status::InvalidArgument("epsilon must be in [0, 1]");
  }
  if (!(options.exploration_margin >= 0.0)) {
    return Status::InvalidArgument("exploration_margin must be >= 0");
  }
  if (!(options.residual_alpha > 0.0 && options.residual_alpha <= 1.0)) {
    return Status::InvalidArgument("residual_alpha must be in (0, 1]");
  }
  if (options.candidates < 1 || options.candidates > 3) {
    return Status::InvalidArgument("candidates must be 1..3");
  }
  if (options.cooldown_window < 1 || options.cooldown_window > 64 ||
      options.cooldown_violations < 1 ||
      options.cooldown_violations > options.cooldown_window) {
    return Status::InvalidArgument("need 1 <= K <= M <= 64 for the cool-down");
  }
  if (!(options.cooldown_seconds >= 0.0)) {
    return Status::InvalidArgument("cooldown_seconds must be >= 0");
  }
  if (options.model.layers < 1) return Status::InvalidArgument("layers must be >= 1");
  if (!(options.risk_sigmas >= 0.0)) return Status::InvalidArgument("risk_sigmas must be >= 0");
  if (!(options.residual_relax >= 0.0 && options.residual_relax < 1.0))
    return Status::InvalidArgument("residual_relax must be in [0, 1)");
  auto impl = std::make_unique<Impl>(std::move(table), options);
  KVSERVE_RETURN_IF_ERROR(impl->Build());
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() = default;

Result<Decision> Controller::Decide(const ControllerRequest& request) {
  return impl_->Decide(request);
}

Status Controller::Observe(const Decision& decision, double observed_seconds,
                           double now_seconds) {
  Observation o;
  o.observed_seconds = observed_seconds;
  o.now_seconds = now_seconds;
  return Observe(decision, o);
}

Status Controller::Observe(const Decision& decision, const Observation& observation) {
  const double observed_seconds = observation.observed_seconds;
  if (!(observed_seconds > 0.0) || !std::isfinite(observed_seconds)) {
    return Status::InvalidArgument("observed latency must be finite and > 0");
  }
  if (!std::isfinite(observation.codec_seconds)) {
    return Status::InvalidArgument("codec time must be finite");
  }
  if (!impl_->options.bandit || decision.environment < 0 ||
      decision.action != ControllerAction::kSend) {
    return Status::Ok();
  }
  if (impl_->Learning() && observation.codec_seconds > 0.0 &&
      decision.profile != ProfileTable::kRaw && decision.kv_bytes > 0.0) {
    const ProfileCost& p = impl_->table.profile(decision.profile);
    const double expected =
        p.overhead_seconds + decision.kv_bytes * p.CodecSecondsPerByte();
    impl_->drift->Observe(decision.profile, expected, observation.codec_seconds);
  }
  // The residual against the prediction at the bandwidth the transfer
  // measured, when known: what the latency model got wrong, not what the
  // bandwidth estimate did.
  double predicted = decision.predicted_seconds;
  if (observation.bandwidth > 0.0 && std::isfinite(observation.bandwidth) &&
      decision.kv_bytes > 0.0 && decision.profile >= 0 &&
      decision.profile < impl_->table.size()) {
    predicted = impl_->PredictAt(decision.profile, decision.compression_ratio, decision.kv_bytes,
                                 observation.bandwidth, decision.codec_factor, decision.source_seconds);
  }
  // A decision known not to meet its SLO (kFastest) says nothing about its
  // profile when it does not.
  impl_->bandit->Update(decision.environment, decision.profile, predicted, observed_seconds,
                        decision.feasible && observed_seconds > decision.budget_seconds,
                        observation.now_seconds);
  return Status::Ok();
}

const ProfileTable& Controller::table() const { return impl_->table; }
const ControllerOptions& Controller::options() const { return impl_->options; }

Result<int> Controller::ModelOptimum(const ControllerRequest& request) const {
  KVSERVE_RETURN_IF_ERROR(impl_->Check(request));
  const Impl::Workload& wl = impl_->workloads[request.workload];
  return impl_->FindOptimum(wl.buckets[impl_->BucketIndex(wl, request.quality_min)],
                            request)
      .profile;
}

}  // namespace kvserve
