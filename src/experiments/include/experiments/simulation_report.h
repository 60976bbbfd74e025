// Copyright kvserve authors. What `kvserve simulate` writes about a
// simulation (kvserve/controller.h's Simulate): the metrics as a Markdown
// table, and the latency-over-time series that scripts/plots.py draws.
#ifndef KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_
#define KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_

#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>

#include "kvserve/controller.h"

namespace kvserve::lab {

// One row per policy: mean, p99, regret, SLO violations, slower than raw,
// below the quality floor (docs/controller.md explains the columns).
std::string SimulationMarkdown(const SimulationReport& report);

// {"format": "kvserve-simulation-plot", "time_seconds": [...],
// "bandwidth_gbps": [...], "codec_slowdown": [...],
// "latency_rolling_mean_ms": {"raw": [...], "no-controller": [...], ...}}:
// at most ~2000 points, each latency the trailing mean over
// "rolling_window" (= requests / 100) requests, for raw, no-controller,
// no-bandit, full and oracle.
nlohmann::ordered_json SimulationPlotJson(const SimulationReport& report);

// `kvserve simulate`: a trace replayed against a profile table (the flags of
// that name).
struct SimulationRun {
  std::string table;
  std::string trace;  // CSV; "": the built-in `scenario`
  std::string scenario = "drop-drift";
  std::string mix;  // "": kDefaultMix
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
  std::string plot_data;    // where the caller writes plot_json
  std::string markdown;     // where the caller writes markdown
  std::string write_trace;  // the trace used, as CSV (written here)
};
struct SimulationRunOutput {
  std::string markdown;   // a line on the run, SimulationMarkdown, Decide() latency
  std::string plot_json;  // SimulationPlotJson, one line
};
// Loads the table and trace (writing it to r.write_trace when asked), runs
// Simulate and renders the results. The loaders' and Simulate's errors;
// InvalidArgument for a bad model, scenario or mix.
Result<SimulationRunOutput> RunSimulation(const SimulationRun& r);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_
