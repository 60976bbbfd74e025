// Copyright kvserve authors. `kvserve serve`: one worker of disaggregated
// serving (a kvserve/serve.h PrefillWorker or DecodeWorker) run in this
// process until a stop signal. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_SERVE_WORKER_H_
#define KVSERVE_EXPERIMENTS_SERVE_WORKER_H_

#include <functional>
#include <string>

#include "experiments/lab.h"
#include "experiments/serving.h"
#include "kvserve/serve.h"

namespace kvserve::lab {

// What one worker serves with (the `kvserve serve` flags of that name).
struct ServeWorkerOptions {
  std::string role;  // prefill | decode
  std::string listen = "127.0.0.1:0";
  std::string decode;        // prefill: decode worker addresses, comma-separated, tried in order
  std::string table;         // prefill: profile table; "": the model's measured one
  std::string workload;      // prefill: of requests that name none
  std::string address_file;  // also write the bound address here
  double shape_gbps = 0;     // prefill: token-bucket pacing of KV transfers (0: off)
  std::string latency_model = "streamed";  // prefill: streamed | serial
  bool no_bandit = false;
  TransportConfig transport;
  PoolBackendConfig store{.backend = "none"};  // prefill: prefix pool
  std::string pool_profiles;                   // prefill: comma-separated; "": the profile sent
  int pool_chunk_tokens = PrefillWorkerOptions{}.pool_chunk_tokens;
  int max_decode_connections = PrefillWorkerOptions{}.max_decode_connections;
  int threads = 0;  // model and BLAS threads (0 = all cores)
  int codec_threads = 1;
  double duration_seconds = 0;  // 0: until SIGINT/SIGTERM
  double timeout_seconds = 30;  // idle timeout of every network wait
};

// Loads the model in `model_dir`, blocks the stop signals, raises the
// open-file limit and starts the worker with `secret` on o.transport; a
// prefill worker loads o.table (else the model's measured table under
// `profiles_dir`, NotFound when there is none), the model's
// head_scores.json when present, and o.store's pool. Once it listens, writes
// o.address_file and calls `on_listening(address)`; then waits for a stop
// signal (or o.duration_seconds), stops the worker and returns Ok.
// InvalidArgument for a bad role, latency model or a prefill worker without
// decode addresses; the errors of loading and starting otherwise.
Status RunServeWorker(const ServeWorkerOptions& o, const std::string& model_dir,
                      const std::string& profiles_dir, const std::string& secret,
                      const std::function<void(const std::string& address)>& on_listening,
                      const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SERVE_WORKER_H_
