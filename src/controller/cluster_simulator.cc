// Copyright kvserve authors. N x M trace-driven serving simulation
// (include/kvserve/cluster_sim.h, docs/scale.md).
//
// Requests arrive (Poisson) at a router that queues each on the prefill
// worker with the fewest requests queued or running. A prefill worker serves
// its queue in order: prefill (T_model), then it chooses a decode worker and
// a profile and streams the KV (the worker is busy until the KV has moved:
// the true latency of the profile at the link's true bandwidth, with the
// seeded codec mismatch and noise), then starts its next request. The decode
// worker generates in the first free of its slots. Every policy chooses the
// decode worker the same way -- least predicted KV seconds at its estimate
// of each link (one estimator entry per peer, fed by its own transfers) plus
// the wait for a free slot -- and differs only in the profile: adaptive asks
// its controller (analytical optimum per peer, then Decide + Observe for the
// chosen one), the others use a fixed rule.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <string>

#include "kvserve/cluster_sim.h"

namespace kvserve {
namespace {

struct SimRequest {
  double arrival = 0;
  int workload = 0;        // index into options.workloads
  int table_workload = 0;  // index into the table's workloads
  double kv_bytes = 0;
  double model_seconds = 0;
  double generation_seconds = 0;
  double noise = 1;
  double goodput_noise = 1;
};

enum class Policy { kAdaptive, kRaw, kStaticBest, kStatic };

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

class Cluster {
 public:
  Cluster(const ProfileTable& table, const ClusterSimOptions& o) : table_(table), o_(o) {
    std::mt19937_64 rng(o.seed ^ 0x6c696e6b73ull);
    std::uniform_real_distribution<double> unit(0, 1);
    const double lo = std::log(o.link_gbps_min), hi = std::log(o.link_gbps_max);
    for (int i = 0; i < o.prefill_workers; ++i) {
      const double rack = std::exp((2 * unit(rng) - 1) * std::log(std::max(1.0, o.rack_spread)));
      for (int j = 0; j < o.decode_workers; ++j) {
        const double median = std::exp(lo + (hi - lo) * unit(rng)) * rack;
        Trace t = Trace::RandomWalk(median, median / 4, median * 2, o.link_walk_sigma, 1.0,
                                    o.duration_seconds * 1.5 + 60, rng());
        if (unit(rng) < o.drop_fraction) {
          const double from = unit(rng) * o.duration_seconds;
          t = t.WithBandwidthDrop(from, from + o.duration_seconds / 10, median / 10);
        }
        links_.push_back(std::move(t));
      }
    }
    std::normal_distribution<double> normal(0, o.profile_mismatch_sigma);
    mismatch_.push_back(1.0);
    for (int p = 1; p < table.size(); ++p) mismatch_.push_back(std::exp(normal(rng)));
  }

  double Bandwidth(int i, int j, double t) const {
    return links_[static_cast<size_t>(i) * o_.decode_workers + j].BandwidthAt(t);
  }
  double MeanGbps() const {
    double sum = 0;
    int n = 0;
    for (const Trace& t : links_)
      for (double s = 0; s < o_.duration_seconds; s += 10, ++n) sum += t.BandwidthAt(s);
    return n ? BytesPerSecondToGbps(sum / n) : 0;
  }
  ProfileCost TrueProfile(int p) const {
    ProfileCost c = table_.profile(p);
    if (p != ProfileTable::kRaw) {
      c.encode_bytes_per_second /= mismatch_[p];
      c.decode_bytes_per_second /= mismatch_[p];
      c.overhead_seconds *= mismatch_[p];
    }
    return c;
  }
  double CodecSeconds(int p, double kv_bytes) const {
    if (p == ProfileTable::kRaw) return 0;
    const ProfileCost c = TrueProfile(p);
    return c.overhead_seconds + kv_bytes * c.CodecSecondsPerByte();
  }

 private:
  const ProfileTable& table_;
  const ClusterSimOptions& o_;
  std::vector<Trace> links_;
  std::vector<double> mismatch_;
};

struct PolicyRun {
  ClusterPolicyResult result;
  std::vector<ClusterChoiceBucket> choices;
};

// Spread assumed for a peer no transfer has measured yet.
constexpr double kUnknownPeerLogSigma = 0.5;

constexpr double kBucketEdges[] = {0, 5, 20, 50, std::numeric_limits<double>::infinity()};

class Runner {
 public:
  Runner(const ProfileTable& table, const ClusterSimOptions& o, const Cluster& cluster,
         const std::vector<SimRequest>& requests)
      : table_(table), o_(o), cluster_(cluster), requests_(requests) {
    for (int j = 0; j < o.decode_workers; ++j) keys_.push_back("decode-" + std::to_string(j));
    // static-best: per workload the highest-CR profile that meets its floor.
    for (const SimulatedWorkload& w : o.workloads) {
      const int tw = table.WorkloadIndex(w.name).value();
      int best = ProfileTable::kRaw;
      double best_cr = 1;
      for (int p = 1; p < table.size(); ++p)
        if (table.Quality(p, tw) >= w.quality_min && table.profile(p).compression_ratio > best_cr) {
          best_cr = table.profile(p).compression_ratio;
          best = p;
        }
      static_best_.push_back(best);
    }
  }

  Result<PolicyRun> Run(Policy policy, int fixed, std::string name) {
    struct Prefill {
      std::queue<int> waiting;
      bool busy = false;
      int request = -1;
      int decode = -1;
      int profile = 0;
      double kv_seconds = 0;
      Decision decision;
      std::unique_ptr<Controller> controller;
      std::unique_ptr<BandwidthEstimator> estimator;
    };
    std::vector<Prefill> prefill(o_.prefill_workers);
    ControllerOptions co = o_.controller;
    co.model = o_.model;
    for (Prefill& p : prefill) {
      p.estimator = std::make_unique<BandwidthEstimator>(o_.estimator);
      if (policy == Policy::kAdaptive) {
        KVSERVE_ASSIGN_OR_RETURN(p.controller, Controller::Create(table_, co));
      }
    }
    std::vector<std::vector<double>> slots(o_.decode_workers,
                                           std::vector<double>(o_.decode_slots, 0.0));
    // Events: (time, kind, index); kind 0 = arrival (request), 1 = prefill
    // done (worker), 2 = KV moved (worker). Ties: lower kind first.
    using Event = std::tuple<double, int, int>;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
    for (size_t r = 0; r < requests_.size(); ++r) events.emplace(requests_[r].arrival, 0, static_cast<int>(r));
    PolicyRun run;
    run.result.name = std::move(name);
    if (policy == Policy::kAdaptive)
      for (size_t b = 0; b + 1 < std::size(kBucketEdges); ++b)
        run.choices.push_back({kBucketEdges[b], kBucketEdges[b + 1], 0,
                               std::vector<double>(table_.size(), 0.0)});
    std::vector<double> jct, kv;
    int64_t raw_sent = 0, fastest = 0;
    double last_done = 0;
    size_t rotate = 0;
    auto start_next = [&](int w, double now) {
      Prefill& p = prefill[w];
      if (p.busy || p.waiting.empty()) return;
      p.busy = true;
      p.request = p.waiting.front();
      p.waiting.pop();
      events.emplace(now + requests_[p.request].model_seconds, 1, w);
    };
    while (!events.empty()) {
      const auto [now, kind, index] = events.top();
      events.pop();
      if (kind == 0) {  // arrival: the least loaded prefill worker
        int best = -1;
        size_t best_load = 0;
        for (int k = 0; k < o_.prefill_workers; ++k) {
          const int w = static_cast<int>((rotate + k) % o_.prefill_workers);
          const size_t load = prefill[w].waiting.size() + (prefill[w].busy ? 1 : 0);
          if (best < 0 || load < best_load) {
            best = w;
            best_load = load;
          }
        }
        rotate = (rotate + 1) % o_.prefill_workers;
        prefill[best].waiting.push(index);
        start_next(best, now);
        continue;
      }
      Prefill& p = prefill[index];
      const SimRequest& r = requests_[p.request];
      const SimulatedWorkload& w = o_.workloads[r.workload];
      if (kind == 1) {  // prefill done: choose the decode worker and profile
        ControllerRequest cr;
        cr.workload = r.table_workload;
        cr.kv_bytes = r.kv_bytes;
        cr.quality_min = w.quality_min;
        cr.slo_seconds = w.slo_seconds;
        cr.now_seconds = now;
        auto profile_for = [&](double bandwidth) -> int {
          switch (policy) {
            case Policy::kAdaptive: {
              cr.bandwidth = bandwidth;
              auto best = p.controller->ModelOptimum(cr);
              return best.ok() ? *best : ProfileTable::kRaw;
            }
            case Policy::kRaw:
              return ProfileTable::kRaw;
            case Policy::kStaticBest:
              return static_best_[r.workload];
            case Policy::kStatic:
              return fixed;
          }
          return ProfileTable::kRaw;
        };
        // A peer never measured is taken to be like the measured ones (their
        // harmonic mean; the prior when none is), with a wide uncertainty:
        // neither the prior's optimism nor its +inf spread (which makes the
        // controller send raw) should decide where to send.
        std::vector<BandwidthEstimate> view(o_.decode_workers);
        double inverse_sum = 0;
        int known = 0;
        for (int j = 0; j < o_.decode_workers; ++j) {
          view[j] = p.estimator->Query(keys_[j]);
          if (view[j].samples > 0) {
            inverse_sum += 1 / view[j].bytes_per_second;
            ++known;
          }
        }
        for (BandwidthEstimate& v : view)
          if (v.samples == 0) {
            if (known > 0) v.bytes_per_second = known / inverse_sum;
            v.log_sigma = kUnknownPeerLogSigma;
          }
        double best_seconds = std::numeric_limits<double>::infinity();
        int best_j = 0;
        double fastest_bw = 0;
        for (int j = 0; j < o_.decode_workers; ++j) {
          const double estimate = view[j].bytes_per_second;
          const int profile = profile_for(estimate);
          const double wait =
              std::max(0.0, *std::min_element(slots[j].begin(), slots[j].end()) - now);
          const double seconds =
              PredictSeconds(o_.model, table_.profile(profile), r.kv_bytes, estimate) + wait;
          if (seconds < best_seconds) {
            best_seconds = seconds;
            best_j = j;
          }
          fastest_bw = std::max(fastest_bw, cluster_.Bandwidth(index, j, now));
        }
        const double bandwidth = view[best_j].bytes_per_second;
        int profile = profile_for(bandwidth);
        if (policy == Policy::kAdaptive) {
          cr.bandwidth = bandwidth;
          cr.bandwidth_log_sigma = view[best_j].log_sigma;
          KVSERVE_ASSIGN_OR_RETURN(p.decision, p.controller->Decide(cr));
          profile = p.decision.action == ControllerAction::kRecompute ? ProfileTable::kRaw
                                                                      : p.decision.profile;
        }
        const double true_bw = cluster_.Bandwidth(index, best_j, now);
        p.decode = best_j;
        p.profile = profile;
        p.kv_seconds =
            PredictSeconds(o_.model, cluster_.TrueProfile(profile), r.kv_bytes, true_bw) * r.noise;
        if (true_bw >= fastest_bw) ++fastest;
        if (profile == ProfileTable::kRaw) ++raw_sent;
        if (table_.Quality(profile, r.table_workload) < w.quality_min) ++run.result.floor_violations;
        if (policy == Policy::kAdaptive) {
          const double gbps = BytesPerSecondToGbps(true_bw);
          for (auto& b : run.choices)
            if (gbps >= b.min_gbps && gbps < b.max_gbps) {
              ++b.requests;
              b.profile_share[profile] += 1;
            }
        }
        events.emplace(now + p.kv_seconds, 2, index);
        continue;
      }
      // KV moved: feedback, generation, next request.
      const double wire_bytes = r.kv_bytes / table_.profile(p.profile).compression_ratio;
      const double true_bw = cluster_.Bandwidth(index, p.decode, now - p.kv_seconds);
      KVSERVE_RETURN_IF_ERROR(p.estimator->Observe(keys_[p.decode], wire_bytes,
                                                   wire_bytes / true_bw * r.goodput_noise, now));
      if (policy == Policy::kAdaptive) {
        Observation obs;
        obs.observed_seconds = p.kv_seconds;
        obs.codec_seconds = cluster_.CodecSeconds(p.profile, r.kv_bytes) * r.noise;
        obs.now_seconds = now;
        KVSERVE_RETURN_IF_ERROR(p.controller->Observe(p.decision, obs));
      }
      auto& s = slots[p.decode];
      auto slot = std::min_element(s.begin(), s.end());
      const double end = std::max(now, *slot) + r.generation_seconds;
      *slot = end;
      jct.push_back(end - r.arrival);
      kv.push_back(p.kv_seconds);
      if (now - r.arrival > w.slo_seconds + r.model_seconds) ++run.result.slo_violations;
      last_done = std::max(last_done, end);
      p.busy = false;
      p.request = -1;
      start_next(index, now);
    }
    ClusterPolicyResult& res = run.result;
    res.requests = static_cast<int64_t>(jct.size());
    const double span = last_done - (requests_.empty() ? 0 : requests_.front().arrival);
    res.throughput = span > 0 ? static_cast<double>(jct.size()) / span : 0;
    double sum = 0, kv_sum = 0;
    for (double v : jct) sum += v;
    for (double v : kv) kv_sum += v;
    res.jct_mean_seconds = jct.empty() ? 0 : sum / static_cast<double>(jct.size());
    res.kv_mean_seconds = kv.empty() ? 0 : kv_sum / static_cast<double>(kv.size());
    res.jct_p50_seconds = Quantile(jct, 0.5);
    res.jct_p99_seconds = Quantile(jct, 0.99);
    res.raw_link_share = jct.empty() ? 0 : static_cast<double>(raw_sent) / jct.size();
    res.fastest_link_share = jct.empty() ? 0 : static_cast<double>(fastest) / jct.size();
    for (auto& b : run.choices)
      for (double& share : b.profile_share) share = b.requests ? share / b.requests : 0;
    return run;
  }

 private:
  const ProfileTable& table_;
  const ClusterSimOptions& o_;
  const Cluster& cluster_;
  const std::vector<SimRequest>& requests_;
  std::vector<std::string> keys_;
  std::vector<int> static_best_;
};

}  // namespace

const ClusterPolicyResult* ClusterSimReport::Find(std::string_view name) const {
  for (const auto& p : policies)
    if (p.name == name) return &p;
  return nullptr;
}

Result<ClusterSimReport> SimulateCluster(const ProfileTable& table, const ClusterSimOptions& o) {
  if (o.prefill_workers < 1 || o.decode_workers < 1 || o.decode_slots < 1)
    return Status::InvalidArgument("cluster simulation: worker and slot counts must be >= 1");
  if (o.workloads.empty()) return Status::InvalidArgument("cluster simulation: no workloads");
  if (!(o.duration_seconds > 0) || !(o.prefill_seconds_per_mib > 0) || !(o.load > 0) ||
      o.arrival_rate < 0 || !(o.link_gbps_min > 0) || !(o.link_gbps_max >= o.link_gbps_min))
    return Status::InvalidArgument("cluster simulation: durations, rates and link bounds must be positive");
  std::vector<int> table_index;
  std::vector<double> weights;
  double mean_mib = 0, weight_sum = 0;
  for (const SimulatedWorkload& w : o.workloads) {
    auto idx = table.WorkloadIndex(w.name);
    if (!idx.ok()) return Status::InvalidArgument(idx.status().message());
    table_index.push_back(*idx);
    weights.push_back(w.weight);
    mean_mib += w.weight * w.kv_bytes_median / 1048576 * std::exp(w.kv_bytes_sigma * w.kv_bytes_sigma / 2);
    weight_sum += w.weight;
  }
  if (!(weight_sum > 0)) return Status::InvalidArgument("cluster simulation: zero workload weights");
  mean_mib /= weight_sum;
  const double rate = o.arrival_rate > 0
                          ? o.arrival_rate
                          : o.load * o.prefill_workers / (mean_mib * o.prefill_seconds_per_mib);
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(rate);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::normal_distribution<double> normal(0, 1);
  std::vector<SimRequest> requests;
  for (double t = gap(rng); t < o.duration_seconds; t += gap(rng)) {
    SimRequest r;
    r.arrival = t;
    r.workload = pick(rng);
    r.table_workload = table_index[r.workload];
    const SimulatedWorkload& w = o.workloads[r.workload];
    r.kv_bytes = w.kv_bytes_median * std::exp(w.kv_bytes_sigma * normal(rng));
    r.model_seconds = r.kv_bytes / 1048576 * o.prefill_seconds_per_mib;
    r.generation_seconds = o.generation_seconds * std::exp(0.3 * normal(rng) - 0.045);
    r.noise = std::exp(o.latency_noise_sigma * normal(rng));
    r.goodput_noise = std::exp(o.goodput_noise_sigma * normal(rng));
    requests.push_back(r);
  }
  const Cluster cluster(table, o);
  Runner runner(table, o, cluster, requests);
  ClusterSimReport report;
  report.requests = static_cast<int64_t>(requests.size());
  report.arrival_rate = rate;
  report.mean_link_gbps = cluster.MeanGbps();
  for (int p = 0; p < table.size(); ++p) report.profile_specs.push_back(table.profile(p).spec);
  KVSERVE_ASSIGN_OR_RETURN(PolicyRun adaptive, runner.Run(Policy::kAdaptive, 0, "adaptive"));
  report.policies.push_back(adaptive.result);
  report.adaptive_choices = std::move(adaptive.choices);
  KVSERVE_ASSIGN_OR_RETURN(PolicyRun raw, runner.Run(Policy::kRaw, 0, "raw"));
  report.policies.push_back(raw.result);
  KVSERVE_ASSIGN_OR_RETURN(PolicyRun best, runner.Run(Policy::kStaticBest, 0, "static-best"));
  report.policies.push_back(best.result);
  for (int p = 1; p < table.size(); ++p) {
    KVSERVE_ASSIGN_OR_RETURN(PolicyRun s, runner.Run(Policy::kStatic, p, "static:" + table.profile(p).spec));
    report.policies.push_back(s.result);
  }
  return report;
}

}  // namespace kvserve
