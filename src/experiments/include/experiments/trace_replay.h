// Copyright kvserve authors. `kvserve replay`: a production request trace
// (Mooncake's conversation trace: arrival, prompt and output lengths, the
// prompt's 512-token block hashes) replayed open-loop through a Router: each
// request is sent at its arrival time, concurrently with those in flight,
// and what it saw is recorded. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_TRACE_REPLAY_H_
#define KVSERVE_EXPERIMENTS_TRACE_REPLAY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/router.h"
#include "kvserve/serve.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// One line of a trace.
struct TraceRecord {
  double arrival_seconds = 0;    // from the trace's start
  int input_tokens = 0;
  int output_tokens = 0;
  std::vector<int64_t> block_ids;  // the prompt's blocks; shared ids = shared prefix
};

// The records of a JSON-lines trace (fields timestamp in ms, input_length,
// output_length, hash_ids; blank lines skipped), in file order.
// InvalidArgument naming the line for a malformed one (not JSON, a missing
// or negative field, a non-integer block id).
Result<std::vector<TraceRecord>> ParseTrace(std::string_view jsonl);
// ParseTrace of a file's text; NotFound when it cannot be read.
Result<std::vector<TraceRecord>> ReadTrace(const std::string& path);

// How a window of a trace becomes requests.
struct ReplayOptions {
  double window_start_seconds = 0;  // trace time where the window starts
  double window_seconds = 60;       // its length in trace time (<= 0: to the end)
  int max_requests = 0;             // 0: every request of the window
  // Replay seconds per trace second (0.5 replays twice as fast: twice the load).
  double time_scale = 1;
  // The trace clock's tick in trace seconds: the requests stamped with one
  // arrival time (Mooncake's trace stamps them in ticks of about 3 s, ten at
  // a time) arrive evenly spread over [stamp, stamp + spread), in file
  // order, before time_scale applies. 0: at their stamps, a tick's requests
  // at once. The window still takes requests by their stamps.
  double spread_seconds = 0;
  int max_output_tokens = 64;  // each request's output length, capped
  int max_prompt_tokens = 0;   // 0: the trace's lengths; else capped (the model's context)
  int block_tokens = 512;      // tokens per block id (the trace's)
  int vocab = 0;               // prompt token ids are in [0, vocab)
  uint64_t seed = 1;           // of the block contents and sampling
  std::string workload{};      // "" : the prefill worker's default
  std::string method = kMethodAdaptive;
  double quality_min = 0.97;
  // The TTFT target a request meets for goodput: base + per_1k * prompt
  // tokens / 1000 (also the request's SLO, which the controller budgets).
  double slo_base_seconds = 1.0;
  double slo_per_1k_tokens_seconds = 0.1;
  bool use_pool = true;  // prefix hits through the workers' pool
  // Trace seconds before the window whose requests had filled the pool when
  // the window starts (PoolHistoryRequests). 0: the pool starts empty.
  double pool_history_seconds = 0;
};

// A request and when to send it (seconds after the replay starts).
struct TimedRequest {
  double at_seconds = 0;
  double ttft_slo_seconds = 0;
  ServeRequest request;
};

// The requests of `options`' window of `trace`, in arrival order, ids
// 0..n-1: the prompt is the token blocks of the record's block ids (one
// fixed block of block_tokens ids per block id, drawn from the seed, so a
// shared id is a shared prefix), cut to the record's length (and
// max_prompt_tokens), the rest of a prompt longer than its blocks drawn for
// the request alone; arrivals spread over their tick (spread_seconds),
// shifted to the window's start and scaled. InvalidArgument for vocab < 1,
// block_tokens < 1, time_scale <= 0, spread_seconds < 0, a negative cap, or
// a window without requests.
Result<std::vector<TimedRequest>> TraceRequests(const std::vector<TraceRecord>& trace,
                                                const ReplayOptions& options);

// What the trace's requests of the pool_history_seconds before the window
// left in the pool that the window's requests would find: for each request
// of `window` (TraceRequests(trace, options)), the longest run of its
// leading blocks that some earlier request's prompt also starts with (whole
// blocks of that prompt's prefix, under max_prompt_tokens), as a request for
// those blocks' tokens and the window request's next token (a prompt's last
// token is never stored), at time 0, one output token, stored before the
// reply (ServeRequest::store_before_reply), ids after the window's; a run another of them covers is left out, longest first.
// Sending these (and waiting for them) before the window fills the pool as
// that history would have, without replaying its other requests. Empty when
// pool_history_seconds is 0 or !use_pool. InvalidArgument for a negative
// pool_history_seconds or TraceRequests' own errors.
Result<std::vector<TimedRequest>> PoolHistoryRequests(const std::vector<TraceRecord>& trace,
                                                      const ReplayOptions& options,
                                                      const std::vector<TimedRequest>& window);

// What one request saw. Times are from its scheduled arrival: the wait
// before it could be sent (the in-flight cap), submissions to a worker that
// failed, and the queue at the worker that served it all count.
struct ReplayRecord {
  uint64_t id = 0;
  double arrival_seconds = 0;  // scheduled, from the replay's start
  double send_delay_seconds = 0;
  double ttft_seconds = 0;
  double jct_seconds = 0;
  double ttft_slo_seconds = 0;
  int prompt_tokens = 0;
  bool ok = false;
  std::string error{};
  int worker = -1;
  int submissions = 0;
  RequestTimings timings{};
  bool met_slo() const { return ok && ttft_seconds <= ttft_slo_seconds; }
};

struct ReplaySummary {
  std::vector<ReplayRecord> records;  // one per request, in id order
  double span_seconds = 0;            // first arrival to the last reply
  double offered_seconds = 0;         // first to last scheduled arrival
  RouterStats router;
  int answered() const;  // ok replies
  int failed() const;    // error replies
  // Requests per second whose TTFT met their target, over the span.
  double goodput() const;
  // The summary as one JSON object: counts, goodput, TTFT and JCT mean /
  // p50 / p99, KV bytes per request, prefix hit rate, profiles, re-routes.
  std::string SummaryJson() const;
  // The same as text lines for a terminal.
  std::string Text() const;
};

// Sends each of `requests` through `router` at its time (open loop, at most
// `max_in_flight` >= 1 at once: a request past the cap waits for a slot and
// the wait counts in its TTFT), and waits for every reply. `on_reply` (may
// be empty) sees each record as it completes, one at a time. Every request
// yields a record; Submit's own error (a bad request) is recorded as that
// request's error.
ReplaySummary RunReplay(Router& router, const std::vector<TimedRequest>& requests, int max_in_flight,
                        const std::function<void(const ReplayRecord&)>& on_reply);

// What sending PoolHistoryRequests did: their records (a failed one means
// a prefix the window will not find), the router's counts after them (to
// take from the window's), and as a JSON object for the report.
struct PoolHistoryRun {
  ReplaySummary summary;
  double history_seconds = 0;
  uint64_t prompt_tokens = 0;
  std::string Json() const;
};

// Sends `history` (PoolHistoryRequests of `options`) through `router`, at
// most `max_in_flight` at once, and waits for every reply.
PoolHistoryRun RunPoolHistory(Router& router, const std::vector<TimedRequest>& history,
                              const ReplayOptions& options, int max_in_flight);

// `window`'s router counts less those `before` it (a pool history's).
void SubtractRouterCounts(const RouterStats& before, ReplaySummary* window);

// A record as one JSON line: id, arrival, TTFT, JCT, SLO, prompt tokens,
// ok/error, worker, submissions, profile, stage seconds, KV and frame bytes,
// prefix hit and chunks.
std::string ReplayRecordJson(const ReplayRecord& record);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_TRACE_REPLAY_H_
