// Copyright kvserve authors. Disaggregated serving: a prefill worker and a
// decode worker joined by the authenticated transport, and a client (the
// router / load generator) that submits requests to prefill workers.
//
//   client ──REQUEST──▶ prefill worker: [pool lookup] prefill, Controller::
//                         Decide, encode layer by layer ──frame──▶ decode
//                         worker: decode records as they arrive, import the
//                         KV, generate ──RESULT──▶ prefill worker: bandit
//                         feedback ──RESPONSE──▶ client
//
// docs/e2e.md describes the protocol (message types 0x30-0x3F), the timings
// and the failure handling; src/serve/ holds one component per file.
//
// Prefix pool: a request's prompt prefix is stored per chunk of
// pool_chunk_tokens tokens; a later request sharing the first k chunks
// fetches those k frames, streams them to the decode worker as k transfers
// and has the decode worker run the rest of its prompt (src/serve/
// pool_path.cc), when the controller predicts that to be faster than
// recomputing.
//
// Failure rules: a frame whose records fail their checksums or do not cover
// the whole cache is never imported (the decode worker refuses it and the
// prefill worker re-sends it); a lost decode connection is redialled, trying
// the next decode address, and the request is re-sent (the KV is kept on
// the prefill side until the result arrives); after `max_attempts` the
// request fails with the last error. The client re-submits (re-prefill) a
// request whose prefill worker connection fails.
#ifndef KVSERVE_SERVE_H_
#define KVSERVE_SERVE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/connector.h"
#include "kvserve/controller.h"
#include "kvserve/engine.h"
#include "kvserve/pool.h"
#include "kvserve/runtime.h"
#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve {

// Serve protocol message types (docs/e2e.md §Protocol).
inline constexpr uint8_t kMsgServeRequest = 0x30;   // client -> prefill
inline constexpr uint8_t kMsgServeResponse = 0x31;  // prefill -> client
inline constexpr uint8_t kMsgServeGenerate = 0x32;  // prefill -> decode, after a frame
inline constexpr uint8_t kMsgServeResult = 0x33;    // decode -> prefill
inline constexpr uint8_t kMsgServePoolFetch = 0x34;    // prefill -> decode: fetch these prefix chunks
inline constexpr uint8_t kMsgServePoolFetched = 0x35;  // decode -> prefill: what the fetch got

// The method field of a request: let the controller choose.
inline constexpr const char* kMethodAdaptive = "adaptive";

// One generation request as a client submits it.
struct ServeRequest {
  uint64_t id = 0;
  // A workload of the profile table; "" = the prefill worker's default
  // (PrefillWorkerOptions::default_workload).
  std::string workload;
  std::vector<int32_t> prompt;    // token ids, non-empty, each < vocab
  int max_new_tokens = 16;        // >= 1
  double slo_seconds = std::numeric_limits<double>::infinity();  // prefill + KV movement budget
  double quality_min = 0.0;       // quality floor q_min
  // kMethodAdaptive, or a profile spec / preset name to force ("none" = raw).
  std::string method = kMethodAdaptive;
  SamplingOptions sampling;       // temperature 0 = greedy
  bool stop_at_eos = false;
  // Prefix caching: look the prompt up in the prefill worker's pool first
  // and store its KV there after a miss.
  bool use_pool = false;
  // With use_pool: the worker stores the prompt's prefix chunks before it
  // answers (after the response is built, so not in the timings), for a
  // client that must find them next, e.g. a replay filling the pool before
  // its window. Otherwise they are stored after the answer.
  bool store_before_reply = false;
};

// Where a request's time went (seconds) and what it moved. The stages
// overlap (encode, send and decode run layer by layer in a pipeline), so
// they do not add up to jct_seconds.
struct RequestTimings {
  double queue_seconds = 0;       // prefill worker: arrival to its turn (one prefill and transfer at a time)
  double prefill_seconds = 0;     // model prefill (0 on a pool hit)
  double encode_seconds = 0;      // sum of per-layer encode times
  double transfer_seconds = 0;    // sender busy time: blocked writes + drain to the ack
  double decode_kv_seconds = 0;   // decode worker: sum of record decode times
  double generation_seconds = 0;  // decode worker: import + token generation
  double kv_seconds = 0;          // KV movement: encode start to receiver ack (bandit feedback)
  // Prefix hit: the chunks' relay, pool request to the decode worker's last ack.
  double pool_fetch_seconds = 0;
  // Of pool_fetch_seconds, when the decode worker fetched the chunks: its
  // time outside reading their records (each chunk's KV allocated, its
  // last windows awaited on a GPU).
  double pool_wait_seconds = 0;
  // Prefill worker, inside the request's turn and outside its other times:
  // the wait for a free decode connection while every one was out with a
  // generating request.
  double connection_wait_seconds = 0;
  double ttft_seconds = 0;        // arrival at the prefill worker (queue included) to first token
  double after_first_token_seconds = 0;  // decode worker: its first token to its last
  double jct_seconds = 0;         // client: submit to response
  uint64_t kv_bytes = 0;          // uncompressed KV bytes (the model's V)
  uint64_t frame_bytes = 0;       // bytes of the frame sent
  double bandwidth_estimate = 0;  // bytes/s the controller used
  // The decode link, when the prefill workers share one
  // (decode_connection.shared_link), at the decision: its rate in bytes/s
  // and the frame transfers on it, this one included (rate / transfers is
  // a fair share to compare bandwidth_estimate with). 0 without one.
  double link_bytes_per_second = 0;
  int link_transfers = 0;
  double predicted_kv_seconds = 0;  // controller's prediction for the chosen profile
  std::string profile;            // spec actually sent ("none" = raw)
  bool explored = false;          // bandit exploration step
  bool feasible = true;           // controller met the SLO
  bool prefix_hit = false;        // KV came from the pool
  bool recomputed = false;        // pool hit ignored: recomputing was predicted faster
  // The KV streamed while the prefill ran (PrefillWorkerOptions::overlap_prefill,
  // and no request waited behind this one or its transfer was predicted no
  // slower than its prefill).
  bool streamed = false;
  int attempts = 0;               // frame transfers tried (1 = first try worked)
  int prefix_chunks = 0;          // pool chunks the KV came from (0 unless prefix_hit)
  // A prefix hit that was chosen but could not be used (the request then
  // recomputed): why; empty otherwise.
  std::string hit_error;
};

struct ServeResponse {
  uint64_t id = 0;
  Status status;                  // OK, or why the request failed
  std::vector<int32_t> tokens;    // generated tokens
  RequestTimings timings;
};

// ---------------------------------------------------------------------------
// Decode worker.

struct DecodeWorkerOptions {
  std::string listen_address = "127.0.0.1:0";
  ConnectionOptions connection;   // secret, limits, timeouts
  int decode_threads = 1;         // DecoderContext threads
  // Prefill workers served at once (admission.max_connections; more are
  // refused), and the budget and deadline of peers still in the handshake:
  // a flood of unauthenticated connections does not keep prefill workers
  // out (docs/transport.md §3).
  AdmissionOptions admission = {.max_connections = 16};
  // Largest KV (uncompressed bytes) accepted; a frame header declaring more
  // is refused before anything is allocated.
  uint64_t max_kv_bytes = uint64_t{4} << 30;
  // Receives frames into a device engine's KV (kvserve/connector.h; not
  // owned). Required when the engine's KV is on a GPU, unused otherwise.
  DeviceConnector* device = nullptr;
  // The prefix pool this worker reads itself (not owned; shared with the
  // prefill workers, e.g. a remote pool client or Redis). With it, a prefix
  // hit's chunks come straight from the pool into the engine's KV
  // (POOL_FETCH); without it, the prefill worker relays them.
  KvPool* pool = nullptr;
};

// Receives frames from prefill workers, decodes each record as it arrives
// into KV its engine allocates, and has the engine generate. Serves each
// connection on its own thread.
// Thread safety: thread-safe; Stop may be called from any thread.
class DecodeWorker {
 public:
  // Starts listening on `transport` (not owned) with `engine` (not owned,
  // shared, must outlive the worker). Unavailable/IOError when it cannot
  // listen; InvalidArgument for a device engine without options.device.
  static Result<std::unique_ptr<DecodeWorker>> Start(Transport* transport, ServingEngine* engine,
                                                     DecodeWorkerOptions options);
  // The same with kvserve's runtime (`model` not owned, must outlive the
  // worker) as the engine.
  static Result<std::unique_ptr<DecodeWorker>> Start(Transport* transport, const Model* model,
                                                     DecodeWorkerOptions options);
  ~DecodeWorker();  // Stops.
  std::string address() const;
  void Stop();
  // Requests generated (counted before the reply is sent), frames refused
  // (corrupt or incomplete), and connections refused by authentication, so
  // far.
  int64_t completed() const;
  int64_t refused_frames() const;
  int64_t auth_failures() const;

  class Impl;

 private:
  static Result<std::unique_ptr<DecodeWorker>> Start(Transport* transport, ServingEngine* engine,
                                                     std::unique_ptr<ServingEngine> owned,
                                                     DecodeWorkerOptions options);
  explicit DecodeWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Prefill worker.

struct PrefillWorkerOptions {
  std::string listen_address = "127.0.0.1:0";
  // The M decode workers. Each request goes to the one with the least
  // predicted KV seconds at its bandwidth estimate plus its smoothed
  // generation time (connections to each dialled on first use and kept for
  // later requests, one per request generating at once); after a
  // failure the next one is tried and the failed one passed over for 2 s.
  std::vector<std::string> decode_addresses;
  ConnectionOptions client_connection;  // for clients (secret, limits)
  AdmissionOptions client_admission{};  // clients served at once, handshake budget
  ConnectionOptions decode_connection;  // to decode workers (secret, shaping)
  std::string model_id = "model";       // pool key
  // model.kind/layers set by the worker when layers == 0. A request no
  // profile can serve within its SLO still gets the fastest one (kFastest:
  // raw there would miss by the most and load the link the most).
  ControllerOptions controller = [] {
    ControllerOptions o;
    o.fallback = FallbackPolicy::kFastest;
    return o;
  }();
  BandwidthEstimatorOptions estimator;
  // Before a decode worker's link has been measured, a link whose rate this
  // worker shapes (decode_connection.shape_bytes_per_second, or the rate of
  // decode_connection.shared_link over the transfers on it, this one
  // included) is decided on that share with this log-spread for the risk
  // guard: the rate an operator configured is known, not a guess. <= 0:
  // decide as if nothing were known (raw until the first measurement, as
  // for an unshaped link).
  double shaped_rate_log_sigma = 0.5;
  int encode_threads = 1;
  // Stream the KV while the prefill runs: each layer is encoded and sent as
  // soon as the model has computed it, so the transfer overlaps the rest of
  // the prefill -- unless requests wait behind it and its transfer is
  // predicted slower than its prefill (it would hold the engine while the
  // link drains; that request prefills first). Off: prefill first, then
  // encode and send layer by layer.
  bool overlap_prefill = true;
  // Per-head retrieval scores for profiles that need them (mixhq, duo); not
  // owned, may be null: the table's profiles that need them are then left
  // out of the controller's choices (they could not be encoded).
  const HeadScores* head_scores = nullptr;
  int max_attempts = 4;                 // frame transfers per request
  // Requests of this worker generating at once on one decode worker (>= 1).
  // A request holds a decode connection of its own from its KV transfer to
  // the decode worker's result, so the next request's prefill and transfer
  // run while earlier ones generate (the decode worker batches them when
  // its engine does). While this many are out, up to as many more requests
  // run their prefill anyway and hold their KV until a connection is free
  // (sent then, not streamed during the prefill); beyond those a request
  // waits before its prefill (in its queue time). Keep the sum over the
  // prefill workers of one decode worker within its admission
  // (DecodeWorkerOptions::admission).
  int max_decode_connections = 4;
  // Pool for prefix caching (not owned; may be null = no pool).
  KvPool* pool = nullptr;
  // Profiles a missed prefix is stored under (specs; "none" for raw). Empty:
  // only the profile that was sent.
  std::vector<std::string> pool_store_profiles;
  // Tokens per pool chunk (>= 1): a prompt's prefix (all tokens but the
  // last) is stored as one frame per full chunk, keyed by the hash of the
  // tokens up to the chunk's end, so prompts sharing only their first
  // chunks share those frames. A prompt of at most this many tokens is
  // never stored.
  int pool_chunk_tokens = 128;
  // Prefill seconds per prompt token before the first measurement (the
  // controller's source time and the pool path's recompute estimate; later
  // ones come from the prefills this worker ran, PrefillTimePredictor).
  double prefill_seconds_per_token_prior = 1e-4;
  // The prompt length the table's compression ratios were measured at (the
  // shipped tables: 512 tokens, see their "comment"). The controller decides
  // with each profile's frame size for the request's own length
  // (PlanFrameSize: exact for the pack codec); an entropy codec's gain on
  // its input starts from the table's ratio at this length and is then
  // learned from the frames sent.
  int table_reference_tokens = 512;
  // The workload of requests that name none: this one; "" = "unified" when
  // the table has it (the measured tables' mix of every workload), else the
  // table's first workload.
  std::string default_workload;
  // Moves a device engine's KV (kvserve/connector.h; not owned): required
  // when the engine's KV is on a GPU, unused otherwise. The table's profiles
  // the device codec does not run are then left out of the choices.
  DeviceConnector* device = nullptr;
};

// Runs prefill on its engine and sends the KV to a decode worker. Requests
// from all client connections run their prefill and KV transfer one at a
// time (the engine uses the whole machine or GPU); up to
// max_decode_connections of them then await their decode results at once.
// Thread safety: thread-safe.
class PrefillWorker {
 public:
  // `engine` and `transport` are not owned and must outlive the worker.
  // InvalidArgument for no decode address, a table/controller error, or a
  // device engine without options.device.
  static Result<std::unique_ptr<PrefillWorker>> Start(Transport* transport, ServingEngine* engine,
                                                      ProfileTable table, PrefillWorkerOptions options);
  // The same with kvserve's runtime (`model`, not owned) as the engine.
  static Result<std::unique_ptr<PrefillWorker>> Start(Transport* transport, const Model* model,
                                                      ProfileTable table,
                                                      PrefillWorkerOptions options);
  ~PrefillWorker();  // Stops.
  std::string address() const;
  void Stop();
  // Serves one request in the calling thread (what a client connection
  // does). Never fails as a call: errors are in the response's status.
  // The prompt's prefix chunks (use_pool) wait to be stored in the pool
  // until StorePending, or Serve returns when the request asks
  // (store_before_reply); a request's turn never does a store (under load
  // the stores of earlier requests made the next ones wait seconds).
  ServeResponse Serve(const ServeRequest& request);
  // Encodes and stores the prefix chunks the requests served so far left
  // waiting, without holding the worker's turn (a client connection's
  // handler does this once each response is out, before it reads that
  // connection's next request; a caller of Serve does it when the response
  // is in hand). Best effort: a failed store is a later miss.
  void StorePending();
  // Emulates a new link: later transfers to decode workers are paced at
  // `bytes_per_second` (0 = unshaped); the current decode connection is
  // closed and redialled with the new rate on the next request. With a
  // shared link (decode_connection.shared_link), sets its rate: for every
  // worker on it.
  void SetLinkRate(double bytes_per_second);
  // The bandwidth estimate (bytes/s) for the current decode worker.
  double BandwidthEstimate() const;
  const ProfileTable& table() const;
  // Requests that have arrived and wait for their turn behind the one
  // running its prefill and transfer (a load signal; thread-safe).
  int queued() const;

  class Impl;

 private:
  static Result<std::unique_ptr<PrefillWorker>> Start(Transport* transport, ServingEngine* engine,
                                                      std::unique_ptr<ServingEngine> owned, ProfileTable table,
                                                      PrefillWorkerOptions options);
  explicit PrefillWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Client (router / load generator side).

struct ServeClientOptions {
  std::vector<std::string> prefill_addresses;  // tried round-robin
  ConnectionOptions connection;
  // Submissions per request (re-prefill on another / the same worker after
  // a connection failure or an Unavailable answer).
  int max_attempts = 3;
  // Longest wait for a response (a request may queue behind others).
  double response_timeout_seconds = 600;
};

// Submits requests to prefill workers and waits for the answers.
// Thread safety: not thread-safe; use one client per thread.
class ServeClient {
 public:
  explicit ServeClient(Transport* transport, ServeClientOptions options);
  ~ServeClient();
  // Submits `request` and returns the response (jct_seconds filled in).
  // The returned Result fails only for a bad request (InvalidArgument); a
  // request that could not be served has a non-OK response status: the last
  // submission's error, with every earlier submission's after "earlier:"
  // (dial failures say "connecting").
  Result<ServeResponse> Submit(const ServeRequest& request);

 private:
  Transport* transport_;
  ServeClientOptions options_;
  std::unique_ptr<Connection> connection_;
  size_t next_address_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_SERVE_H_
