// Copyright kvserve authors. `kvserve router`'s load generator: labelled
// requests drawn from a seed, sent by concurrent clients through a Router,
// and the JCT distribution they saw. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_LOAD_GENERATOR_H_
#define KVSERVE_EXPERIMENTS_LOAD_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kvserve/router.h"
#include "kvserve/serve.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// What the requests ask for (ServeRequest's fields, one value for all).
struct LoadOptions {
  int requests = 8;
  int prompt_tokens = 256;           // random prompts
  int vocab = 0;                     // random prompt ids are in [0, vocab)
  std::vector<int32_t> text_prompt{};  // non-empty: every request's prompt
  int new_tokens = 16;
  std::string workload{};
  double slo_ms = 0;  // 0: none
  double quality_min = 0.97;
  std::string method = kMethodAdaptive;
  // The fraction of requests that repeat an earlier random prompt; > 0
  // turns the prefix pool on for every request.
  double repeat_fraction = 0;
  uint64_t seed = 1;
};

// The requests of `o`, ids 0..requests-1, drawn up front from o.seed (so
// the sequence does not depend on the concurrency): each gets a seeded
// sampling seed and either the text prompt, an earlier random prompt (with
// probability repeat_fraction) or a fresh one of prompt_tokens ids < vocab.
// InvalidArgument when random prompts are needed and vocab < 1.
Result<std::vector<ServeRequest>> DrawRequests(const LoadOptions& o);

// What the clients saw. The per-stage seconds and profile counts are over
// the successful requests.
struct LoadSummary {
  int requests = 0, failed = 0, prefix_hits = 0, clients = 0;
  double wall_seconds = 0;
  std::vector<double> jct_seconds;
  std::map<std::string, int> profiles;
  std::map<std::string, std::vector<double>> stage_seconds;  // "prefill", "ttft", ...
  RouterStats router;
  double throughput() const;  // successful requests per wall second
  // The one-line JSON object `kvserve router --summary` writes.
  std::string SummaryJson() const;
  // The lines `kvserve router` ends with: counts, throughput and JCT
  // mean / p50 / p90 / p99, requests per prefill worker, mean seconds per
  // stage and requests per profile.
  std::string Text() const;
};

// One successful reply as `kvserve router --json` prints it: id, (with
// `with_text`, the decoded `text` and the generated ids,) worker,
// submissions, profile, every stage's seconds, bytes, bandwidth estimate and
// prefix hit; one line.
std::string ReplyJson(const ServeRequest& request, const RoutedResponse& routed, bool with_text,
                      const std::string& text);
// The same as a progress line: worker, profile, JCT and its main stages in
// ms, frame bytes, prefix hit.
std::string ReplyLine(const ServeRequest& request, const RoutedResponse& routed);

// Sends `requests` through `router` from `concurrency` (>= 1) client
// threads, each taking the next unsent request. `on_reply` (may be empty)
// sees each reply, failed ones included, one at a time; an error it returns
// stops the run (no new requests are sent) and is returned, as is the
// first error of Submit itself.
Result<LoadSummary> RunLoad(
    Router& router, const std::vector<ServeRequest>& requests, int concurrency,
    const std::function<Status(const ServeRequest&, const RoutedResponse&)>& on_reply);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_LOAD_GENERATOR_H_
