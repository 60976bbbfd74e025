// Copyright kvserve authors. `kvserve simulate`: trace-driven comparison of
// the controller against its ablations, static profiles, raw and an oracle.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/lab.h"
#include "experiments/simulation_inputs.h"
#include "experiments/simulation_report.h"
#include "kvserve/controller.h"

namespace kvserve::cli {
namespace {

using SimulateArgs = lab::SimulationRun;

int RunSimulate(const SimulateArgs& a) {
  auto Fail = [](const Status& s) { return ReportError("simulate", s); };
  auto run = lab::RunSimulation(a);
  if (!run.ok()) return Fail(run.status());
  std::cout << run->markdown;
  for (const auto& [path, text] : {std::pair{a.markdown, run->markdown}, {a.plot_data, run->plot_json}}) {
    if (Status s = path.empty() ? Status::Ok() : lab::WriteTextFile(path, text); !s.ok()) return Fail(s);
  }
  return 0;
}

RunFn SetupSimulate(CLI::App& sub) {
  auto a = std::make_shared<SimulateArgs>();
  sub.description(
      "Replay a bandwidth / codec-speed trace against a profile table and compare the full "
      "controller, the no-bandit and no-controller (static best-CR) ablations, raw, an oracle "
      "and every static profile: mean and p99 latency, regret vs the oracle, SLO violations, "
      "requests slower than raw. Writes the latency-over-time series with --plot-data (scripts/plots.py controller draws it).");
  sub.add_option("table", a->table, "profile table JSON")->required();
  sub.add_option("--trace", a->trace, "trace CSV: time_s,bandwidth_gbps[,codec_slowdown]");
  sub.add_option("--scenario", a->scenario, "built-in trace: drop-drift | steps | random-walk");
  sub.add_option("--duration", a->duration, "scenario length in seconds");
  sub.add_option("--interval", a->interval, "seconds between requests");
  sub.add_option("--seed", a->seed, "seed for requests, noise and scenario");
  sub.add_option("--mix", a->mix, "workloads: name:weight:median_mib:sigma:slo_ms:q_min;...");
  sub.add_option("--model", a->model, "latency model of transport and controller: serial | streamed");
  sub.add_option("--layers", a->layers, "layers for the streamed model")->check(CLI::Range(1, 4096));
  sub.add_option("--probe-layers", a->probe_layers,
                 "layers sent raw first to measure goodput before the final decision (0: off)")
      ->check(CLI::Range(0, 4095));
  sub.add_option("--risk-sigmas", a->risk_sigmas,
                 "risk guard: compress only if it beats raw at bandwidth x exp(k sigma) (0: off)")
      ->check(CLI::Range(0.0, 100.0));
  sub.add_flag("--no-codec-drift", a->no_codec_drift,
               "do not learn codec-speed drift from reported codec times");
  sub.add_option("--goodput-noise", a->goodput_noise,
                 "sigma of the lognormal noise on goodput samples")
      ->check(CLI::Range(0.0, 2.0));
  sub.add_option("--profile-mismatch", a->profile_mismatch,
                 "sigma of the seeded lognormal mismatch between table and true codec speeds")
      ->check(CLI::Range(0.0, 2.0));
  sub.add_option("--plot-data", a->plot_data,
                 "write the latency-over-time series here (JSON; scripts/plots.py controller draws it)");
  sub.add_option("--markdown", a->markdown, "write the summary table here");
  AddMovedOption(sub, "--svg",
                 "the plot is drawn from JSON now: --plot-data P.json, then scripts/plots.py "
                 "controller P.json OUT.svg");
  sub.add_option("--write-trace", a->write_trace, "write the trace used as CSV here");
  return [a] { return RunSimulate(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(simulate, "Trace-driven simulation of the online controller",
                kvserve::cli::SetupSimulate);
