// Copyright kvserve authors. The end-to-end benchmark of disaggregated
// serving (paper §7.2, `kvserve e2e`): a decode worker process and a prefill
// worker joined by shaped, authenticated TCP on localhost; a bandwidth sweep
// over raw / kivi-2 / cachegen / best static / kvserve adaptive; TTFT of
// prefix-pool hits vs recompute; a run where the link changes under the
// controller. RunE2e returns the results; E2eMarkdown renders docs/e2e.md
// and E2eResultsJson the JSON that scripts/plots.py draws the plots from.
#ifndef KVSERVE_EXPERIMENTS_E2E_H_
#define KVSERVE_EXPERIMENTS_E2E_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/serve.h"

namespace kvserve::lab {

struct E2eOptions {
  std::string data_dir;        // FindDataDirectory's: the default files below are under it
  std::string model;           // default: the first model under <data>/models, else a fallback
  std::string table;           // default: configs/profiles/<model>-<workload>.json
  // default: docs/results/profiling/<workload>.baselines.json (held-out
  // scores of the presets), else docs/results/quality/<workload>.json
  std::string quality_report;
  std::string prompts;         // default: configs/e2e/<model>-<workload>.jsonl
  std::string workload = "qa";
  double quality_min = 0.97;
  int prompt_tokens = 512;
  int new_tokens = 8;
  int requests = 4;
  int points = 5;
  double min_gbps = 0;  // 0: from the latency model
  double max_gbps = 0;
  int switch_requests = 18;
  int prefix_prompts = 1;
  int threads = 1;
  bool overlap_prefill = true;
  bool pin = false;
  uint64_t seed = 1;
  // The kvserve executable the decode worker process runs (`serve --role
  // decode`); empty: this process's own executable.
  std::string worker_executable;
  std::string command_line;  // recorded in the report
};

// One compared method: a fixed profile or the adaptive controller.
struct E2eMethod {
  std::string label;    // "raw", "kivi-2", "cachegen", "best static", "kvserve"
  std::string method;   // request method field
  std::string spec;     // profile spec (adaptive: "chosen per request")
  double quality = -1;  // table quality for the workload; < 0 unknown
};

struct E2ePoint {
  double gbps = 0;                                   // nominal (shaped) rate
  std::vector<std::vector<RequestTimings>> samples;  // [method][request]
  std::vector<int> failures;                         // [method]
};

struct E2ePrefix {
  double gbps = 0;
  double ttft_recompute = 0;  // first request: miss, prefill + send
  double ttft_hit = 0;        // same prompt again: controller's pool choice
  std::string hit_profile;    // what the hit fetched ("recompute" if it recomputed)
  int hit_chunks = 0;         // chunks the hit fetched
  // A prompt sharing all but its last `shared_tail` tokens with the first
  // (a shared document, a different question): a partial hit.
  double ttft_shared = 0;
  std::string shared_profile;
  int shared_chunks = 0;
  int shared_tail = 0;
};

struct E2eSwitch {
  int index = 0;
  double gbps = 0;           // nominal rate at that request
  double estimate_gbps = 0;  // controller's estimate when deciding
  std::string profile;
  double jct = 0;
  double kv_seconds = 0;
};

struct E2eReport {
  std::string command;
  std::string machine;
  std::string model_note;
  std::string model_shape;  // layers, kv heads, head dim
  std::string workload;
  double quality_min = 0;
  int prompt_tokens = 0;
  int new_tokens = 0;
  int requests = 0;  // per method and point
  double kv_bytes = 0;
  int layers = 0;
  ProfileTable table;  // calibrated
  std::string table_path;
  std::vector<std::string> calibration_notes;
  std::string table_source;     // profile table the candidates came from
  std::string report_source;    // quality results adding candidates ("" none)
  std::string prompt_source;    // where the prompts came from
  bool overlap_prefill = true;  // KV streamed while the prefill runs
  bool pinned = false;
  // Fastest and slowest of 8 bare prefills of one prompt in the prefill
  // worker's process before the sweep: the machine's own run-to-run noise.
  double bare_prefill_min = 0;
  double bare_prefill_max = 0;  // prefill worker on CPU 0, decode worker on CPU 1
  std::string range_reason;
  std::vector<E2eMethod> methods;
  std::vector<E2ePoint> points;
  std::vector<E2ePrefix> prefix;
  std::vector<E2eSwitch> switches;
  // Where the report's plots and table are (for the Markdown's links).
  std::string plot_jct_path, plot_switch_path;
  double seconds = 0;  // wall time of the run
};

// The qualities a `kvserve quality --json` report (a JSON array of
// {profile, relative, relative_ci95}) gives its pipelines, by the tables'
// rule: the lower end of the 95% interval when the report has one (a
// profile meets a floor only when that end does), else the point estimate.
// Entries without a profile or a numeric quality are skipped. Corruption
// when the text is not a JSON array.
Result<std::vector<std::pair<std::string, double>>> ReportedQualities(const std::string& json_text);

// Runs the benchmark (docs/e2e.md "How it works"; about a minute on two
// cores with the defaults). Errors: the model, table or prompts cannot be
// read, the decode worker process does not start, a calibration or a
// warm-up request fails. Requests that fail during the sweep are counted,
// not fatal.
Result<E2eReport> RunE2e(const E2eOptions& options, const Progress& progress);

// Markdown for docs/e2e.md.
std::string E2eMarkdown(const E2eReport& report);
// Everything the plots need and every sweep request's stage timings:
// {"format": "kvserve-e2e-results", "methods": [...], "points": [{"gbps",
// "mean_jct_seconds": [per method, null when none succeeded], "failures"}],
// "switches": [...], "samples": [{"gbps", "method", "profile", "jct", ...}]}.
nlohmann::ordered_json E2eResultsJson(const E2eReport& report);
// Mean JCT of method m at point p (seconds).
double MeanJct(const E2ePoint& point, size_t method);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_E2E_H_
