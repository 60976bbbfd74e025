// Copyright kvserve authors. Trace-driven comparison of selection policies.
//
// Requests arrive open-loop every request_interval_seconds; each one draws a
// workload, a KV size and noise factors, the same draws for every policy
// (common random numbers), so differences between policies are differences
// in choices. The ground truth is the table's profiles with a seeded
// per-profile codec-speed mismatch and the trace's codec slowdown applied;
// the controllers see only the table, their bandwidth estimator (fed by the
// goodput of their own transfers, including each request's probe), and the
// latencies and codec times they observe, each delivered when its request
// completes. docs/controller.md §Simulator describes the probe protocol and
// the oracle.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <queue>
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
    return ExpectedPart(p, r.time, r.kv_bytes, options_.controller.model);
  }
  // Expected latency of sending `kv_bytes` with profile p at time t.
  double ExpectedPart(int p, double t, double kv_bytes, const LatencyModel& model) const {
    return PredictSeconds(model, TrueProfile(p, t), kv_bytes, options_.trace.BandwidthAt(t));
  }
  // Expected latency under the probe protocol when the profile chosen after
  // the probe is the one the encoder started with: the first probe_bytes go
  // raw on the wire while the encoder already works on the rest, split into
  // `jobs` equal jobs (1 for the serial model, the remaining layers for the
  // streamed one). A flow shop whose first job uses only the link.
  double ExpectedSpeculative(int p, double t, double probe_bytes, double rest_bytes,
                             int jobs) const {
    const double bandwidth = options_.trace.BandwidthAt(t);
    if (p == ProfileTable::kRaw) return (probe_bytes + rest_bytes) / bandwidth;
    const ProfileCost c = TrueProfile(p, t);
    const double job_bytes = rest_bytes / jobs;
    const double e = job_bytes / c.encode_bytes_per_second;
    const double n = job_bytes / (bandwidth * c.compression_ratio);
    const double d = job_bytes / c.decode_bytes_per_second;
    double encoded = c.overhead_seconds;
    double sent = probe_bytes / bandwidth;
    double decoded = sent;
    for (int k = 0; k < jobs; ++k) {
      encoded += e;
      sent = std::max(encoded, sent) + n;
      decoded = std::max(sent, decoded) + d;
    }
    return decoded;
  }
  // Expected encode + decode compute time (t0 included) of that transfer.
  double CodecSeconds(int p, double t, double kv_bytes) const {
    if (p == ProfileTable::kRaw) return 0.0;
    const ProfileCost c = TrueProfile(p, t);
    return c.overhead_seconds + kv_bytes * c.CodecSecondsPerByte();
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
      if (latency[i] > raw[i] * (1.0 + 1e-9)) ++r.slower_than_raw_any;
      r.worst_vs_raw = std::max(r.worst_vs_raw, latency[i] / raw[i] - 1.0);
    }
    if (table.Quality(chosen[i], requests[i].table_workload) < w.quality_min) ++r.floor_violations;
  }
  r.mean_seconds = latency.empty() ? 0.0 : sum / static_cast<double>(latency.size());
  r.p99_seconds = Percentile(latency, 0.99);
  r.latency_seconds = std::move(latency);
  r.profile = chosen;
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
  report.raw_tolerance = options.raw_tolerance;
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

  // Goodput noise of each request's probe: its own stream, so the request
  // sequence is the same with and without probes.
  std::vector<double> probe_noise(n);
  {
    std::mt19937_64 probe_rng(options.seed ^ 0x70726f6265ull);
    for (double& z : probe_noise) z = std::exp(options.goodput_noise_sigma * normal(probe_rng));
  }
  const LatencyModel model = options.controller.model;
  const int layers = std::max(model.layers, 1);
  const int probe_layers = std::clamp(options.probe_layers, 0, layers - 1);
  const double probe_fraction = static_cast<double>(probe_layers) / layers;
  LatencyModel rest_model = model;  // the layers after the probe
  rest_model.layers = layers - probe_layers;
  const int jobs = model.kind == LatencyModelKind::kStreamed ? rest_model.layers : 1;

  std::vector<double> decision_seconds;
  auto run_controller = [&](bool bandit, std::vector<int>* chosen,
                            bool time_it) -> Result<std::vector<double>> {
    ControllerOptions co = options.controller;
    co.bandit = bandit;
    co.model = rest_model;
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Controller> controller,
                             Controller::Create(table, co));
    BandwidthEstimator estimator(options.estimator);
    // Feedback reaches the controller when the request completes, not
    // before (requests overlap: arrivals every 50 ms, transfers up to
    // seconds).
    struct Feedback {
      double done = 0.0;
      Decision decision;
      Observation observation;
      double wire_bytes = 0.0;
      double wire_seconds = 0.0;
      // The world holds a request's bandwidth from its arrival, so its
      // transfer is stamped as running from the decision on.
      double wire_end = 0.0;
      bool operator>(const Feedback& o) const { return done > o.done; }
    };
    std::priority_queue<Feedback, std::vector<Feedback>, std::greater<Feedback>> pending;
    auto deliver = [&](double now) -> Status {
      while (!pending.empty() && pending.top().done <= now) {
        const Feedback& f = pending.top();
        KVSERVE_RETURN_IF_ERROR(controller->Observe(f.decision, f.observation));
        KVSERVE_RETURN_IF_ERROR(
            estimator.Observe("peer", f.wire_bytes, f.wire_seconds, f.wire_end));
        pending.pop();
      }
      return Status::Ok();
    };
    std::vector<double> latency(n);
    chosen->resize(n);
    for (size_t i = 0; i < n; ++i) {
      const SimRequest& r = requests[i];
      const SimulatedWorkload& w = options.workloads[r.workload];
      const double bandwidth = options.trace.BandwidthAt(r.time);
      const double probe_bytes = r.kv_bytes * probe_fraction;
      const double probe_seconds = probe_bytes / bandwidth;
      const double rest_bytes = r.kv_bytes - probe_bytes;
      auto decide = [&](double now) -> Result<Decision> {
        const BandwidthEstimate estimate = estimator.Query("peer");
        ControllerRequest req;
        req.workload = r.table_workload;
        req.kv_bytes = rest_bytes;
        req.bandwidth = estimate.bytes_per_second;
        req.bandwidth_log_sigma = estimate.log_sigma;
        req.slo_seconds = w.slo_seconds - (now - r.time);
        req.quality_min = w.quality_min;
        req.now_seconds = now;
        const auto start = std::chrono::steady_clock::now();
        Result<Decision> d = controller->Decide(req);
        if (time_it) {
          decision_seconds.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        return d;
      };
      auto profile_of = [](const Decision& d) {
        return d.action == ControllerAction::kRecompute ? ProfileTable::kRaw : d.profile;
      };
      // Without a probe: one decision, then the plain transfer. With one:
      // a tentative decision starts the encoder while the probe layers go
      // raw; the decision at the end of the probe, with its goodput sample,
      // either keeps the encoder's work (same profile) or discards it.
      KVSERVE_RETURN_IF_ERROR(deliver(r.time));
      KVSERVE_ASSIGN_OR_RETURN(Decision d, decide(r.time));
      int started = profile_of(d);
      double decided_at = r.time;
      if (probe_layers > 0) {
        decided_at = r.time + probe_seconds;
        KVSERVE_RETURN_IF_ERROR(deliver(decided_at));
        KVSERVE_RETURN_IF_ERROR(
            estimator.Observe("peer", probe_bytes, probe_seconds * probe_noise[i], decided_at));
        KVSERVE_ASSIGN_OR_RETURN(d, decide(decided_at));
      }
      const int p = profile_of(d);
      (*chosen)[i] = p;
      double expected;
      if (probe_layers == 0) {
        expected = world.ExpectedPart(p, r.time, r.kv_bytes, model);
      } else if (p == started || p == ProfileTable::kRaw) {
        expected = world.ExpectedSpeculative(p, r.time, probe_bytes, rest_bytes, jobs);
      } else {
        expected = probe_seconds + world.ExpectedPart(p, r.time, rest_bytes, rest_model);
      }
      latency[i] = expected * r.noise;
      Feedback f;
      f.done = r.time + latency[i];
      f.decision = d;
      f.observation.observed_seconds = f.done - decided_at;
      f.observation.codec_seconds = world.CodecSeconds(p, r.time, rest_bytes) * r.noise;
      f.observation.now_seconds = f.done;
      f.wire_bytes = rest_bytes / table.profile(p).compression_ratio;
      f.wire_seconds = f.wire_bytes / bandwidth * r.goodput_noise;
      f.wire_end = decided_at + f.wire_seconds;
      pending.push(f);
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
  // Oracle: knows the true bandwidth and codec speeds; per request the
  // fastest floor-feasible profile under the plain transfer or (when the
  // controllers probe) the probe protocol, whichever is faster for it.
  std::vector<double> oracle(n);
  chosen.assign(n, ProfileTable::kRaw);
  for (size_t i = 0; i < n; ++i) {
    const SimRequest& r = requests[i];
    double best_t = world.Expected(ProfileTable::kRaw, r);
    for (int p = 1; p < table.size(); ++p) {
      if (!feasible(p, r)) continue;
      double t = world.Expected(p, r);
      if (probe_layers > 0) {
        const double probe_bytes = r.kv_bytes * probe_fraction;
        t = std::min(t, world.ExpectedSpeculative(p, r.time, probe_bytes,
                                                  r.kv_bytes - probe_bytes, jobs));
      }
      if (t < best_t) {
        best_t = t;
        chosen[i] = p;
      }
    }
    oracle[i] = best_t * r.noise;
  }
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
