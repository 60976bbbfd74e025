// Copyright kvserve authors. The router of N x M disaggregated serving
// (docs/scale.md): it spreads requests from many concurrent clients over N
// prefill workers, each of which sends its KV to the best of its M decode
// workers (PrefillWorkerOptions::decode_addresses; per-peer bandwidth
// estimates and load).
//
//   clients (K threads) ── Router::Submit ─▶ prefill worker i (least loaded;
//        the one that served the request's first prefix chunk, for pool hits)
//                                              └─▶ decode worker j of its M
//
// A prefill worker whose connection fails (or that answers Unavailable) is
// passed over for a moment and the request is re-submitted elsewhere
// (re-prefilled: a prefill worker keeps no state a request needs).
#ifndef KVSERVE_ROUTER_H_
#define KVSERVE_ROUTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/serve.h"
#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve {

struct RouterOptions {
  std::vector<std::string> prefill_addresses;  // the N prefill workers
  ConnectionOptions connection;
  // Submissions per request (a failed or refused submission goes to another
  // worker).
  int max_attempts = 3;
  // Longest wait for one response (a request may queue behind others).
  double response_timeout_seconds = 600;
  // Prefix affinity for use_pool requests: one whose first pool_chunk_tokens
  // tokens were last served by worker w goes to w, unless w has more than
  // affinity_slack requests in flight beyond the least loaded worker. Set
  // pool_chunk_tokens to the workers' (PrefillWorkerOptions).
  int pool_chunk_tokens = PrefillWorkerOptions{}.pool_chunk_tokens;
  int affinity_slack = 2;
  size_t affinity_entries = 100000;  // least recently used are forgotten
  // A worker that failed is passed over this long (then tried again).
  double down_seconds = 2.0;
};

struct RoutedResponse {
  ServeResponse response;
  int worker = -1;      // index into prefill_addresses of the worker that answered
  int submissions = 0;  // 1 = the first worker served it
};

struct RouterStats {
  std::vector<int64_t> served;  // per prefill worker
  int64_t rerouted = 0;         // submissions repeated on another worker
  int64_t affinity = 0;         // requests sent to their prefix's worker
};

// Thread safety: thread-safe; any number of threads may Submit at once (each
// submission uses a connection of its own, pooled per worker).
class Router {
 public:
  Router(Transport* transport, RouterOptions options);  // transport: not owned
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Submits `request` and waits for its response (jct_seconds filled in,
  // from the first submission). Fails as a call only for a bad request
  // (InvalidArgument) or no prefill address; a request that could not be
  // served has a non-OK response status naming the last error.
  Result<RoutedResponse> Submit(const ServeRequest& request);
  RouterStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_H_
