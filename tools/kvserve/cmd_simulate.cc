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

struct SimulateArgs {
  std::string table;
  std::string trace;
  std::string scenario = "drop-drift";
  std::string mix;
  std::string model = "serial";
  int layers = 32;
  int probe_layers = 1;
  double risk_sigmas = 2.0;
  bool no_codec_drift = false;
  double goodput_noise = 0.05;
  double profile_mismatch = 0.1;
  double duration = 600.0;
  double interval = 0.05;
  uint64_t seed = 1;
  std::string plot_data;
  std::string markdown;
  std::string write_trace;
};

int Fail(const Status& s) { return ReportError("simulate", s); }

int RunSimulate(const SimulateArgs& a) {
  Result<ProfileTable> table = ProfileTable::Load(a.table);
  if (!table.ok()) return Fail(table.status());
  SimulationOptions o;
  o.seed = a.seed;
  o.request_interval_seconds = a.interval;
  Result<LatencyModel> model = lab::ParseLatencyModel(a.model, a.layers);
  if (!model.ok()) return Fail(model.status());
  o.controller.model = *model;
  o.probe_layers = a.probe_layers;
  o.controller.risk_sigmas = a.risk_sigmas;
  o.controller.learn_codec_drift = !a.no_codec_drift;
  o.goodput_noise_sigma = a.goodput_noise;
  o.profile_mismatch_sigma = a.profile_mismatch;
  Result<Trace> trace = a.trace.empty() ? lab::MakeScenario(a.scenario, a.duration, a.seed)
                                        : Trace::Load(a.trace);
  if (!trace.ok()) return Fail(trace.status());
  o.trace = *trace;
  if (!a.write_trace.empty()) {
    if (Status s = lab::WriteTextFile(a.write_trace, o.trace.ToCsv()); !s.ok()) return Fail(s);
  }
  const std::string mix = a.mix.empty() ? lab::kDefaultMix : a.mix;
  Result<std::vector<SimulatedWorkload>> workloads = lab::ParseMix(mix);
  if (!workloads.ok()) return Fail(workloads.status());
  o.workloads = *workloads;
  Result<SimulationReport> report = Simulate(*table, o);
  if (!report.ok()) return Fail(report.status());

  std::string md = fmt::format(
      "{} requests over {:.0f} s ({}), {} model, seed {}; mix {}; controllers: probe {} of {} "
      "layers, risk guard {} sigma, codec-drift learning {}\n\n",
      report->arrival_seconds.size(), o.trace.duration_seconds(),
      a.trace.empty() ? "scenario " + a.scenario : a.trace, a.model, a.seed, mix, a.probe_layers,
      a.layers, a.risk_sigmas, a.no_codec_drift ? "off" : "on");
  md += lab::SimulationMarkdown(*report);
  md += fmt::format("\nfull controller Decide(): p50 {:.2f} us, p99 {:.2f} us (this run)\n",
                    report->decision_p50_seconds * 1e6, report->decision_p99_seconds * 1e6);
  std::cout << md;
  if (!a.markdown.empty()) {
    if (Status s = lab::WriteTextFile(a.markdown, md); !s.ok()) return Fail(s);
  }
  if (!a.plot_data.empty()) {
    if (Status s = lab::WriteTextFile(a.plot_data, lab::SimulationPlotJson(*report).dump() + "\n");
        !s.ok())
      return Fail(s);
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
