// Copyright kvserve authors. Trace-driven comparison of selection policies.
//
// Requests arrive open-loop every request_interval_seconds; each one draws a
// workload, a KV size and noise factors, the same draws for every policy
// (common random numbers), so differences between policies are differences
// in choices. The ground truth is the table's profiles with a seeded
// per-profile codec-speed mismatch and the trace's codec slowdown applied;
// the controllers see only the table, their bandwidth estimator (fed by the
// goodput of their own transfers) and the latencies they observe.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

struct SimRequest {
  double time = 0.0;
  int workload = 0;        // index into options.workloads
  int table_workload = 0;  // index into table.workloads()
  double kv_bytes = 0.0;
  double noise = 1.0;
  double goodput_noise = 1.0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

class World {
 public:
  World(const ProfileTable& table, const SimulationOptions& options)
      : table_(table), options_(options) {
    std::mt19937_64 rng(options.seed ^ 0x70726f66696c65ull);
    std::normal_distribution<double> normal(0.0, options.profile_mismatch_sigma);
    mismatch_.push_back(1.0);  // raw has no codec
    for (int p = 1; p < table.size(); ++p) mismatch_.push_back(std::exp(normal(rng)));
  }

  ProfileCost TrueProfile(int p, double t) const {
    ProfileCost c = table_.profile(p);
    const double slow = mismatch_[p] * options_.trace.SlowdownAt(t);
    if (p != ProfileTable::kRaw) {
      c.encode_bytes_per_second /= slow;
      c.decode_bytes_per_second /= slow;
      c.overhead_seconds *= slow;
    }
    return c;
  }
  // Expected (noise-free) latency of profile p for request r.
  double Expected(int p, const SimRequest& r) const {
    return PredictSeconds(options_.controller.model, TrueProfile(p, r.time), r.kv_bytes,
                          options_.trace.BandwidthAt(r.time));
  }
  double Observed(int p, const SimRequest& r) const { return Expected(p, r) * r.noise; }

 private:
  const ProfileTable& table_;
  const SimulationOptions& options_;
  std::vector<double> mismatch_;
};

PolicyResult Summarise(std::string name, std::vector<double> latency,
                       const std::vector<SimRequest>& requests,
                       const std::vector<int>& chosen, const ProfileTable& table,
                       const SimulationOptions& options, const std::vector<double>& raw) {
  PolicyResult r;
  r.name = std::move(name);
  r.requests = static_cast<int64_t>(latency.size());
  double sum = 0.0;
  for (size_t i = 0; i < latency.size(); ++i) {
    const SimulatedWorkload& w = options.workloads[requests[i].workload];
    sum += latency[i];
    if (latency[i] > w.slo_seconds) ++r.slo_violations;
    if (!raw.empty()) {
      if (latency[i] > raw[i] * (1.0 + options.raw_tolerance)) ++r.slower_than_raw;
      r.worst_vs_raw = std::max(r.worst_vs_raw, latency[i] / raw[i] - 1.0);
    }
    if (table.Quality(chosen[i], requests[i].table_workload) < w.quality_min) ++r.floor_violations;
  }
  r.mean_seconds = latency.empty() ? 0.0 : sum / static_cast<double>(latency.size());
  r.p99_seconds = Percentile(latency, 0.99);
  r.latency_seconds = std::move(latency);
  return r;
}

}  // namespace

const PolicyResult* SimulationReport::Find(std::string_view name) const {
  for (const PolicyResult& p : policies) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Result<SimulationReport> Simulate(const ProfileTable& table,
                                  const SimulationOptions& options) {
  if (options.trace.points().size() < 2) return Status::InvalidArgument("empty trace");
  if (options.workloads.empty()) return Status::InvalidArgument("no workloads");
  if (!(options.request_interval_seconds > 0.0)) {
    return Status::InvalidArgument("request_interval_seconds must be > 0");
  }
  std::vector<int> table_index;
  std::vector<double> weights;
  for (const SimulatedWorkload& w : options.workloads) {
    Result<int> idx = table.WorkloadIndex(w.name);
    if (!idx.ok()) return Status::InvalidArgument(idx.status().message());
    if (!(w.weight >= 0.0) || !(w.kv_bytes_median > 0.0)) {
      return Status::InvalidArgument("workload \"" + w.name + "\": bad weight or size");
    }
    table_index.push_back(*idx);
    weights.push_back(w.weight);
  }

  // The request sequence, shared by every policy.
  std::mt19937_64 rng(options.seed);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<SimRequest> requests;
  SimulationReport report;
  for (double t = 0.0; t < options.trace.duration_seconds();
       t += options.request_interval_seconds) {
    SimRequest r;
    r.time = t;
    r.workload = pick(rng);
    r.table_workload = table_index[r.workload];
    const SimulatedWorkload& w = options.workloads[r.workload];
    r.kv_bytes = w.kv_bytes_median * std::exp(w.kv_bytes_sigma * normal(rng));
    r.noise = std::exp(options.noise_sigma * normal(rng));
    r.goodput_noise = std::exp(options.goodput_noise_sigma * normal(rng));
    requests.push_back(r);
    report.arrival_seconds.push_back(t);
    report.bandwidth.push_back(options.trace.BandwidthAt(t));
    report.codec_slowdown.push_back(options.trace.SlowdownAt(t));
  }
  const World world(table, options);
  const size_t n = requests.size();

  auto run_fixed = [&](const std::function<int(const SimRequest&)>& choose,
                       std::vector<int>* chosen) {
    std::vector<double> latency(n);
    chosen->resize(n);
    for (size_t i = 0; i < n; ++i) {
      (*chosen)[i] = choose(requests[i]);
      latency[i] = world.Observed((*chosen)[i], requests[i]);
    }
    return latency;
  };

  std::vector<int> raw_chosen;
  const std::vector<double> raw_latency =
      run_fixed([](const SimRequest&) { return ProfileTable::kRaw; }, &raw_chosen);

  auto feasible = [&](int p, const SimRequest& r) {
    return p == ProfileTable::kRaw ||
           table.Quality(p, r.table_workload) >= options.workloads[r.workload].quality_min;
  };

  std::vector<double> decision_seconds;
  auto run_controller = [&](bool bandit, std::vector<int>* chosen,
                            bool time_it) -> Result<std::vector<double>> {
    ControllerOptions co = options.controller;
    co.bandit = bandit;
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Controller> controller,
                             Controller::Create(table, co));
    BandwidthEstimator estimator(options.estimator);
    std::vector<double> latency(n);
    chosen->resize(n);
    for (size_t i = 0; i < n; ++i) {
      const SimRequest& r = requests[i];
      const SimulatedWorkload& w = options.workloads[r.workload];
      ControllerRequest req;
      req.workload = r.table_workload;
      req.kv_bytes = r.kv_bytes;
      req.bandwidth = estimator.Estimate("peer");
      req.slo_seconds = w.slo_seconds;
      req.quality_min = w.quality_min;
      req.now_seconds = r.time;
      const auto start = std::chrono::steady_clock::now();
      Result<Decision> d = controller->Decide(req);
      if (time_it) {
        decision_seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      if (!d.ok()) return d.status();
      const int p = d->action == ControllerAction::kRecompute ? ProfileTable::kRaw : d->profile;
      (*chosen)[i] = p;
      latency[i] = world.Observed(p, r);
      KVSERVE_RETURN_IF_ERROR(controller->Observe(*d, latency[i], r.time + latency[i]));
      const double wire_bytes = r.kv_bytes / table.profile(p).compression_ratio;
      const double wire_seconds =
          wire_bytes / options.trace.BandwidthAt(r.time) * r.goodput_noise;
      KVSERVE_RETURN_IF_ERROR(
          estimator.Observe("peer", wire_bytes, wire_seconds, r.time + latency[i]));
    }
    return latency;
  };

  std::vector<int> chosen;
  KVSERVE_ASSIGN_OR_RETURN(std::vector<double> full, run_controller(true, &chosen, true));
  report.policies.push_back(
      Summarise("full", std::move(full), requests, chosen, table, options, raw_latency));
  KVSERVE_ASSIGN_OR_RETURN(std::vector<double> nob, run_controller(false, &chosen, false));
  report.policies.push_back(
      Summarise("no-bandit", std::move(nob), requests, chosen, table, options, raw_latency));

  // No controller: per workload, the highest-CR profile that meets the floor.
  std::vector<int> static_best(options.workloads.size(), ProfileTable::kRaw);
  for (size_t w = 0; w < options.workloads.size(); ++w) {
    double best_cr = 1.0;
    for (int p = 1; p < table.size(); ++p) {
      if (table.Quality(p, table_index[w]) >= options.workloads[w].quality_min &&
          table.profile(p).compression_ratio > best_cr) {
        best_cr = table.profile(p).compression_ratio;
        static_best[w] = p;
      }
    }
  }
  std::vector<double> nc = run_fixed(
      [&](const SimRequest& r) { return static_best[r.workload]; }, &chosen);
  report.policies.push_back(
      Summarise("no-controller", std::move(nc), requests, chosen, table, options, raw_latency));
  report.policies.push_back(Summarise("raw", raw_latency, requests, raw_chosen, table,
                                      options, raw_latency));
  std::vector<double> oracle = run_fixed(
      [&](const SimRequest& r) {
        int best = ProfileTable::kRaw;
        double best_t = world.Expected(best, r);
        for (int p = 1; p < table.size(); ++p) {
          if (!feasible(p, r)) continue;
          const double t = world.Expected(p, r);
          if (t < best_t) {
            best_t = t;
            best = p;
          }
        }
        return best;
      },
      &chosen);
  report.policies.push_back(
      Summarise("oracle", std::move(oracle), requests, chosen, table, options, raw_latency));
  for (int p = 1; p < table.size(); ++p) {
    std::vector<double> s = run_fixed([p](const SimRequest&) { return p; }, &chosen);
    report.policies.push_back(Summarise("static:" + table.profile(p).spec, std::move(s),
                                        requests, chosen, table, options, raw_latency));
  }
  const double oracle_mean = report.Find("oracle")->mean_seconds;
  for (PolicyResult& p : report.policies) p.regret_seconds = p.mean_seconds - oracle_mean;
  report.decision_p50_seconds = Percentile(decision_seconds, 0.50);
  report.decision_p99_seconds = Percentile(decision_seconds, 0.99);
  return report;
}

}  // namespace kvserve
