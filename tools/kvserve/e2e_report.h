// Copyright kvserve authors. The results of `kvserve e2e` and their
// rendering: docs/e2e.md (Markdown) and two hand-written SVG plots.
#ifndef KVSERVE_TOOLS_KVSERVE_E2E_REPORT_H_
#define KVSERVE_TOOLS_KVSERVE_E2E_REPORT_H_

#include <string>
#include <vector>

#include "kvserve/controller.h"
#include "kvserve/serve.h"

namespace kvserve::cli {

// One compared method: a fixed profile or the adaptive controller.
struct E2eMethod {
  std::string label;    // "raw", "kivi-2", "cachegen", "best static", "kvserve"
  std::string method;   // request method field
  std::string spec;     // profile spec (adaptive: "chosen per request")
  double quality = -1;  // table quality for the workload; < 0 unknown
};

struct E2ePoint {
  double gbps = 0;                                     // nominal (shaped) rate
  std::vector<std::vector<RequestTimings>> samples;    // [method][request]
  std::vector<int> failures;                           // [method]
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
  std::string model_shape;       // layers, kv heads, head dim
  std::string workload;
  double quality_min = 0;
  int prompt_tokens = 0;
  int new_tokens = 0;
  int requests = 0;              // per method and point
  double kv_bytes = 0;
  int layers = 0;
  ProfileTable table;            // calibrated
  std::string table_path;
  std::vector<std::string> calibration_notes;
  std::string table_source;      // profile table the candidates came from
  std::string report_source;     // quality results adding candidates ("" none)
  std::string prompt_source;     // where the prompts came from
  bool overlap_prefill = true;   // KV streamed while the prefill runs
  bool pinned = false;
  // Fastest and slowest of 8 bare prefills of one prompt in the prefill
  // worker's process before the sweep: the machine's own run-to-run noise.
  double bare_prefill_min = 0;
  double bare_prefill_max = 0;           // prefill worker on CPU 0, decode worker on CPU 1
  std::string range_reason;
  std::vector<E2eMethod> methods;
  std::vector<E2ePoint> points;
  std::vector<E2ePrefix> prefix;
  std::vector<E2eSwitch> switches;
  std::string svg_jct_path, svg_switch_path;
  double seconds = 0;            // wall time of the run
};

// Markdown for docs/e2e.md.
std::string E2eMarkdown(const E2eReport& report);
// Mean JCT vs bandwidth per method (log-log).
std::string E2eJctSvg(const E2eReport& report);
// The bandwidth-change run: JCT per request, profile switches, link rate.
std::string E2eSwitchSvg(const E2eReport& report);
// Mean JCT of method m at point p (seconds).
double MeanJct(const E2ePoint& point, size_t method);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_E2E_REPORT_H_
