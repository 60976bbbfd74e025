// Copyright kvserve authors. What `kvserve simulate` writes about a
// simulation (kvserve/controller.h's Simulate): the metrics as a Markdown
// table, and the latency-over-time series that scripts/plots.py draws.
#ifndef KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_
#define KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_

#include <nlohmann/json.hpp>
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

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SIMULATION_REPORT_H_
