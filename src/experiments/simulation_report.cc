// Copyright kvserve authors. Rendering of simulation reports: a Markdown
// table, and the JSON that scripts/plots.py draws the latency-over-time plot
// (paper Fig. 16 right) from.
#include "experiments/simulation_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "experiments/simulation_inputs.h"

namespace kvserve::lab {
namespace {

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// Centered-free trailing rolling mean over `window` samples.
std::vector<double> RollingMean(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size());
  double sum = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

}  // namespace

std::string SimulationMarkdown(const SimulationReport& report) {
  const PolicyResult* oracle = report.Find("oracle");
  std::string out =
      "| policy | mean (ms) | p99 (ms) | regret vs oracle (ms) | vs oracle | SLO violations "
      "| slower than raw (> " +
      Format("%.0f", report.raw_tolerance * 100.0) +
      "%) | slower than raw (any) | worst vs raw | below floor |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const PolicyResult& p : report.policies) {
    const double rel =
        oracle && oracle->mean_seconds > 0.0 ? p.mean_seconds / oracle->mean_seconds - 1.0 : 0.0;
    out += "| " + p.name + " | " + Format("%.2f", p.mean_seconds * 1e3) + " | " +
           Format("%.2f", p.p99_seconds * 1e3) + " | " + Format("%.2f", p.regret_seconds * 1e3) +
           " | " + Format("%+.1f%%", rel * 100.0) + " | " + std::to_string(p.slo_violations) +
           " | " + std::to_string(p.slower_than_raw) + " | " +
           std::to_string(p.slower_than_raw_any) + " | " +
           Format("%+.1f%%", p.worst_vs_raw * 100.0) + " | " + std::to_string(p.floor_violations) +
           " |\n";
  }
  return out;
}

nlohmann::ordered_json SimulationPlotJson(const SimulationReport& report) {
  const char* names[] = {"raw", "no-controller", "no-bandit", "full", "oracle"};
  const size_t n = report.arrival_seconds.size();
  const size_t window = std::max<size_t>(1, n / 100);
  const size_t step = std::max<size_t>(1, n / 2000);
  nlohmann::ordered_json out;
  out["format"] = "kvserve-simulation-plot";
  out["version"] = 1;
  out["requests"] = n;
  out["rolling_window"] = window;
  nlohmann::json t = nlohmann::json::array(), gbps = nlohmann::json::array(),
                 slowdown = nlohmann::json::array();
  for (size_t i = 0; i < n; i += step) {
    t.push_back(report.arrival_seconds[i]);
    gbps.push_back(BytesPerSecondToGbps(report.bandwidth[i]));
    slowdown.push_back(report.codec_slowdown.size() == n ? report.codec_slowdown[i] : 1.0);
  }
  out["time_seconds"] = t;
  out["bandwidth_gbps"] = gbps;
  out["codec_slowdown"] = slowdown;
  nlohmann::ordered_json series;
  for (const char* name : names) {
    const PolicyResult* p = report.Find(name);
    if (p == nullptr) continue;
    const std::vector<double> mean = RollingMean(p->latency_seconds, window);
    nlohmann::json ms = nlohmann::json::array();
    for (size_t i = 0; i < n; i += step) ms.push_back(std::round(mean[i] * 1e6) / 1e3);
    series[name] = ms;
  }
  out["latency_rolling_mean_ms"] = series;
  return out;
}

Result<SimulationRunOutput> RunSimulation(const SimulationRun& a) {
  KVSERVE_ASSIGN_OR_RETURN(ProfileTable table, ProfileTable::Load(a.table));
  SimulationOptions o;
  o.seed = a.seed;
  o.request_interval_seconds = a.interval;
  KVSERVE_ASSIGN_OR_RETURN(o.controller.model, ParseLatencyModel(a.model, a.layers));
  o.probe_layers = a.probe_layers;
  o.controller.risk_sigmas = a.risk_sigmas;
  o.controller.learn_codec_drift = !a.no_codec_drift;
  o.goodput_noise_sigma = a.goodput_noise;
  o.profile_mismatch_sigma = a.profile_mismatch;
  KVSERVE_ASSIGN_OR_RETURN(o.trace, a.trace.empty() ? MakeScenario(a.scenario, a.duration, a.seed)
                                                    : Trace::Load(a.trace));
  if (!a.write_trace.empty()) {
    KVSERVE_RETURN_IF_ERROR(WriteTextFile(a.write_trace, o.trace.ToCsv()));
  }
  const std::string mix = a.mix.empty() ? kDefaultMix : a.mix;
  KVSERVE_ASSIGN_OR_RETURN(o.workloads, ParseMix(mix));
  KVSERVE_ASSIGN_OR_RETURN(SimulationReport report, Simulate(table, o));
  SimulationRunOutput out;
  out.markdown = fmt::format(
      "{} requests over {:.0f} s ({}), {} model, seed {}; mix {}; controllers: probe {} of {} "
      "layers, risk guard {} sigma, codec-drift learning {}\n\n",
      report.arrival_seconds.size(), o.trace.duration_seconds(),
      a.trace.empty() ? "scenario " + a.scenario : a.trace, a.model, a.seed, mix, a.probe_layers,
      a.layers, a.risk_sigmas, a.no_codec_drift ? "off" : "on");
  out.markdown += SimulationMarkdown(report);
  out.markdown += fmt::format("\nfull controller Decide(): p50 {:.2f} us, p99 {:.2f} us (this run)\n",
                              report.decision_p50_seconds * 1e6, report.decision_p99_seconds * 1e6);
  out.plot_json = SimulationPlotJson(report).dump() + "\n";
  return out;
}

}  // namespace kvserve::lab
