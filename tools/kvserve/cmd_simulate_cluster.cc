// Copyright kvserve authors. `kvserve simulate-cluster`: the N x M
// trace-driven serving simulation (include/kvserve/cluster_sim.h) written as
// docs/scale.md.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/cluster_report.h"
#include "experiments/simulation_inputs.h"
#include "kvserve/cluster_sim.h"
#include "kvserve/controller.h"

namespace kvserve::cli {
namespace {

struct ClusterArgs {
  std::string table;
  ClusterSimOptions o;
  std::string mix;
  std::string markdown;
};

int RunSimulateCluster(ClusterArgs a) {
  constexpr const char* kCmd = "simulate-cluster";
  auto table = ProfileTable::Load(a.table);
  if (!table.ok()) return ReportError(kCmd, table.status());
  const std::string mix = a.mix.empty() ? lab::kDefaultMix : a.mix;
  auto workloads = lab::ParseMix(mix);
  if (!workloads.ok()) return ReportError(kCmd, workloads.status());
  a.o.workloads = *workloads;
  const double start = NowSeconds();
  auto report = SimulateCluster(*table, a.o);
  if (!report.ok()) return ReportError(kCmd, report.status());
  const std::string md =
      lab::ClusterReportMarkdown(a.table, a.o, *report, NowSeconds() - start, mix);
  std::cout << md;
  if (Status s = a.markdown.empty() ? Status::Ok() : lab::WriteTextFile(a.markdown, md); !s.ok())
    return ReportError(kCmd, s);
  return 0;
}

RunFn SetupSimulateCluster(CLI::App& sub) {
  auto a = std::make_shared<ClusterArgs>();
  sub.description(
      "Trace-driven simulation of N prefill x M decode workers on heterogeneous, time-varying "
      "links (one trace per pair): a least-loaded router, per-peer bandwidth estimates and "
      "decode choice, and the profile per request from adaptive compression (a controller per "
      "prefill worker), raw, and static profiles. Prints (and with --markdown writes) the JCT "
      "and throughput table and the adaptive policy's choices by link bandwidth.");
  sub.add_option("table", a->table, "profile table JSON")->required();
  sub.add_option("--prefill", a->o.prefill_workers, "prefill workers N")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub.add_option("--decode", a->o.decode_workers, "decode workers M")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub.add_option("--slots", a->o.decode_slots, "generation slots per decode worker")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  sub.add_option("--duration", a->o.duration_seconds, "simulated seconds")->capture_default_str();
  sub.add_option("--rate", a->o.arrival_rate, "arrivals per second (0: --load x capacity)");
  sub.add_option("--load", a->o.load, "offered load vs the prefill capacity")->capture_default_str();
  sub.add_option("--prefill-s-per-mib", a->o.prefill_seconds_per_mib, "prefill seconds per MiB of KV")
      ->capture_default_str();
  sub.add_option("--generation-s", a->o.generation_seconds, "mean generation seconds")
      ->capture_default_str();
  sub.add_option("--link-min-gbps", a->o.link_gbps_min, "lowest link median")->capture_default_str();
  sub.add_option("--link-max-gbps", a->o.link_gbps_max, "highest link median")->capture_default_str();
  sub.add_option("--drop-fraction", a->o.drop_fraction, "links that drop to a tenth for a while")
      ->capture_default_str();
  sub.add_option("--mix", a->mix, "workloads: name:weight:median_mib:sigma:slo_ms:q_min;...");
  sub.add_option("--seed", a->o.seed, "seed of links, requests and noise")->capture_default_str();
  sub.add_option("--markdown", a->markdown, "write the report here (docs/scale.md)");
  return [a] { return RunSimulateCluster(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(simulate_cluster, "Trace-driven N x M serving simulation (docs/scale.md)",
                kvserve::cli::SetupSimulateCluster);
