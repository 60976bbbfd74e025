// Copyright kvserve authors. What the serving commands (serve, router, pool,
// transport) share beyond their flags: the shared secret, stop signals, the
// open-file limit, address files, the prefill worker's profile table and
// latency model, and text prompts through a model's tokenizer. Not part of
// the installed library.
#ifndef KVSERVE_EXPERIMENTS_SERVING_H_
#define KVSERVE_EXPERIMENTS_SERVING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/pool.h"
#include "kvserve/runtime.h"
#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve::lab {

// The secret from `secret_file` (trailing newlines dropped) or, without one,
// $KVSERVE_SECRET; "" (with a warning through `progress`) when neither is
// set. NotFound/IOError/InvalidArgument for an unreadable or empty file.
Result<std::string> LoadSecret(const std::string& secret_file, const Progress& progress);

// What a command-line peer connects with: the secret as LoadSecret finds it,
// `local_id`, `io_timeout_seconds` for every step (the handshake capped at
// 10 s), payloads up to `max_message_bytes`, and a token bucket of
// `shape_gbps` over what it sends (0: unshaped). Errors as LoadSecret.
struct PeerFlags {
  std::string secret_file;
  std::string local_id;
  double io_timeout_seconds = 30;
  uint64_t max_message_bytes = uint64_t{1} << 30;
  double shape_gbps = 0;
};
Result<ConnectionOptions> PeerConnectionOptions(const PeerFlags& flags, const Progress& progress);

// Raises this process's open-file limit (RLIMIT_NOFILE) to its hard limit,
// so a server can hold AdmissionOptions::max_unauthenticated handshakes
// (docs/transport.md §3); warns through `progress` when the limit stays
// below `wanted`. Returns the limit in force (0 when it cannot be read).
uint64_t RaiseOpenFileLimit(uint64_t wanted, const Progress& progress);

// Which transport a networked command uses (its --transport flags).
struct TransportConfig {
  std::string kind = "tcp";  // tcp | ucx
  std::string ucx_tls;       // UCX_TLS syntax; empty = UCX's default / $UCX_TLS
  std::string ucx_devices;   // UCX_NET_DEVICES syntax
  uint64_t ucx_window_kb = UcxTransportOptions{}.window_bytes >> 10;
};
// The transport `config` names; `secret` keys the UCX bootstrap (the same
// secret the connections prove). UCX segments are at most a quarter of the
// window. InvalidArgument for an unknown kind.
Result<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config,
                                                 const std::string& secret);

// A pool backend in this process (`kvserve serve --pool`, `pool serve
// --backend`, `pool bench --backend`).
struct PoolBackendConfig {
  std::string backend;  // memory | redis | redis-cluster
  uint64_t budget_mb = 1024;
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::string redis_nodes = "127.0.0.1:7000";  // cluster seeds, comma-separated
  std::string redis_prefix = "kvserve";
  uint64_t piece_mb = RedisClusterPoolOptions{}.max_piece_bytes >> 20;
};
// Opens the backend `config.backend` names. InvalidArgument for another
// name; the backend's errors (e.g. Unavailable when Redis is down).
Result<std::unique_ptr<KvPool>> OpenPoolBackend(const PoolBackendConfig& config);

// Blocks SIGINT/SIGTERM for every thread started after this call; then
// WaitForStopSignal returns once one arrives, or after `seconds` when > 0.
void BlockStopSignals();
void WaitForStopSignal(double seconds);

// Writes "`address`\n" to `path` through a temporary renamed into place, so
// a process polling for the file never reads half an address. IOError.
Status WriteAddressFile(const std::string& path, const std::string& address);

// The profile table a prefill worker serving `model_dir` loads: `flag` when
// non-empty; else the model's measured table under `profiles_dir`
// (DefaultProfileTablePath). NotFound naming the file looked for, and how to
// pass one, when there is none.
Result<std::string> PrefillTablePath(const std::string& flag, const std::string& model_dir,
                                     const std::string& profiles_dir);

// "streamed" -> the layer-pipelined model, "serial" -> Eq. 1, as the
// prefill worker's controller uses them; InvalidArgument otherwise.
Result<LatencyModel> ParseWorkerLatencyModel(const std::string& name);

// The model directory's config.json, parsed. NotFound / Corruption.
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

// A text prompt as a serving front end tokenizes it: the ids of `text`
// through the tokenizer of `model_dir` (its chat template, else the
// config's bos) and that tokenizer, to decode the replies with.
// InvalidArgument when the prompt has no tokens or a token lies outside the
// model's vocabulary.
struct TextPrompt {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> ids;
};
Result<TextPrompt> LoadTextPrompt(const std::string& model_dir, const std::string& text);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SERVING_H_
