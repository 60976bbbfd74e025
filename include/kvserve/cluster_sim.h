// Copyright kvserve authors. Trace-driven simulation of N x M disaggregated
// serving past one machine (docs/scale.md): N prefill workers behind a
// least-loaded router, each sending KV to the best of its M decode workers
// over its own heterogeneous, time-varying link (a Trace per (prefill,
// decode) pair), each decode worker generating with a few slots. It reuses
// the controller's pieces (Trace, ProfileTable, PredictSeconds, Controller,
// BandwidthEstimator) and its ground truth (the table's profiles with a
// seeded codec-speed mismatch) and compares per-request adaptive compression
// (one controller and one estimator per peer on every prefill worker) with
// static profiles and raw, all under the same request sequence and decode
// choice rule. A peer no transfer has measured yet is taken to be like the
// measured ones (their harmonic mean, log-sigma 0.5), as DecodePeers does.
#ifndef KVSERVE_CLUSTER_SIM_H_
#define KVSERVE_CLUSTER_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/controller.h"
#include "kvserve/status.h"

namespace kvserve {

struct ClusterSimOptions {
  int prefill_workers = 64;   // N
  int decode_workers = 64;    // M: every prefill worker may send to each
  int decode_slots = 8;       // concurrent generations per decode worker
  double duration_seconds = 120;
  // Poisson arrivals, requests/s over the cluster; 0 = `load` x the
  // prefill capacity (N / mean prefill seconds).
  double arrival_rate = 0;
  double load = 0.7;
  // Prefill time per MiB of KV produced (T_model = V x this).
  double prefill_seconds_per_mib = 0.002;
  // Mean generation time on a decode worker (lognormal, sigma 0.3).
  double generation_seconds = 0.2;
  // Links: link (i, j) wanders (Trace::RandomWalk, log-sigma per second)
  // around a median drawn log-uniformly in [link_gbps_min, link_gbps_max];
  // prefill worker i's rack scales all its links by a factor in
  // [rack_spread^-1, rack_spread]; drop_fraction of the links drop to a
  // tenth for a random tenth of the run.
  double link_gbps_min = 1;
  double link_gbps_max = 40;
  double link_walk_sigma = 0.05;
  double rack_spread = 3;
  double drop_fraction = 0.2;
  std::vector<SimulatedWorkload> workloads;  // sizes, SLOs, quality floors
  LatencyModel model = {LatencyModelKind::kStreamed, 32};
  ControllerOptions controller;               // model is set from `model`
  BandwidthEstimatorOptions estimator;
  double latency_noise_sigma = 0.02;          // on every true KV time
  double goodput_noise_sigma = 0.05;          // on every goodput sample
  double profile_mismatch_sigma = 0.1;        // table vs true codec speed
  uint64_t seed = 1;
};

// Per policy ("adaptive", "raw", "static-best", "static:<spec>").
struct ClusterPolicyResult {
  std::string name;
  int64_t requests = 0;
  double throughput = 0;         // requests completed / (last completion - first arrival)
  double jct_mean_seconds = 0;   // arrival at the router to the last generated token
  double jct_p50_seconds = 0;
  double jct_p99_seconds = 0;
  double kv_mean_seconds = 0;    // KV movement (encode, transfer, decode) alone
  int64_t slo_violations = 0;    // prefill wait + prefill + KV above the workload's SLO
  int64_t floor_violations = 0;  // served below the request's quality floor
  double raw_link_share = 0;     // of requests sent raw
  double fastest_link_share = 0; // sent over the prefill worker's fastest link right then
};

// How the adaptive policy chose, by the true bandwidth of the link it sent
// over: requests per bucket and the share of each profile.
struct ClusterChoiceBucket {
  double min_gbps = 0;
  double max_gbps = 0;  // +inf for the last
  int64_t requests = 0;
  std::vector<double> profile_share;  // per table profile (0 = raw)
};

struct ClusterSimReport {
  int64_t requests = 0;
  double arrival_rate = 0;
  double mean_link_gbps = 0;  // over links and time
  std::vector<ClusterPolicyResult> policies;
  std::vector<std::string> profile_specs;  // table order, [0] = "none"
  std::vector<ClusterChoiceBucket> adaptive_choices;
  const ClusterPolicyResult* Find(std::string_view name) const;
};

// Runs every policy over the same arrivals, sizes, links and noise.
// InvalidArgument for sizes < 1, no workloads, a workload not in the table,
// or non-positive rates.
[[nodiscard]] Result<ClusterSimReport> SimulateCluster(const ProfileTable& table,
                                                       const ClusterSimOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_CLUSTER_SIM_H_
