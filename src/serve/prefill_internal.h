// Copyright kvserve authors. The prefill worker's implementation class,
// shared by prefill_worker.cc (PD path) and pool_path.cc (prefix hits).
// Not a public header.
#ifndef KVSERVE_SERVE_PREFILL_INTERNAL_H_
#define KVSERVE_SERVE_PREFILL_INTERNAL_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/engine.h"
#include "kvserve/serve.h"
#include "serve/decode_peers.h"
#include "kvserve/frame_size_model.h"
#include "transport/connection_server.h"
#include "serve/serve_protocol.h"

namespace kvserve {
namespace serve {

// What one request carries through the prefill worker.
struct PrefillContext {
  const ServeRequest* request = nullptr;
  std::vector<int32_t> kv_tokens;   // ids of the KV sent
  std::vector<int32_t> suffix;      // prompt tokens the decode worker runs first
  std::vector<float> last_logits;   // when suffix is empty
  // A prefix hit: the pool keys of its chunks (pool_chunk_tokens tokens
  // each) in token order, and what the last relay of them moved.
  std::vector<PoolKey> pool_keys;
  int pool_chunk_tokens = 0;
  double pool_relay_seconds = 0;
  uint64_t pool_relay_bytes = 0;
  double pool_wait_seconds = 0;  // the decode worker's, when it fetched the chunks
  // The decode connection this request holds (empty until its first
  // transfer; given back when the request is done) and the worker's lock,
  // held while the request runs except from the end of its engine turn
  // (its prefill, or a prefix hit's relay) to its decode result.
  DecodeLease lease;
  std::unique_lock<std::mutex>* lock = nullptr;
  // When the decode worker's result arrived (MonotonicSeconds), before the
  // lock was taken back: the TTFT ends there, not behind the next prefill.
  double result_at_seconds = 0;
  // Its prefill ran while every decode connection was out: counted in
  // prefilled_waiting_ until it has one.
  bool counted_waiting = false;
  // Seconds it waited for a free decode connection (every one out).
  double connection_wait_seconds = 0;
};

// A prompt chunk's KV waiting to be stored in the pool after its response
// went out: tokens [token_begin, token_begin + tokens) of the request's KV,
// which the store keeps alive.
struct PendingPoolStore {
  PoolKey key;                      // profile filled per encoding
  std::vector<std::string> profiles;
  std::shared_ptr<const EngineKv> kv;
  int token_begin = 0;
  int tokens = 0;
};

}  // namespace serve

class PrefillWorker::Impl {
 public:
  Impl(Transport* transport, ServingEngine* engine, std::unique_ptr<ServingEngine> owned,
       PrefillWorkerOptions options);
  Status Start(ProfileTable table);
  // Serve, then the pool stores when the request asks to find them stored
  // (store_before_reply): what a client connection and PrefillWorker::Serve
  // answer.
  ServeResponse Answer(const ServeRequest& request);
  ServeResponse Serve(const ServeRequest& request);
  void SetLinkRate(double bytes_per_second);
  double BandwidthEstimate() const;

  struct Chosen {
    std::string spec;
    Decision decision;
    bool adaptive = false;
    double bandwidth = 0;
  };

  void ServeClient(Connection& connection);
  Status ValidateRequest(const ServeRequest& request) const;
  // The table index of the request's workload (its own, else the default).
  Result<int> WorkloadOf(const ServeRequest& request) const;
  // An encoder for `spec` for use under mu_ (shared by those users, who
  // run one at a time; made on first use).
  Result<EncoderContext*> Encoder(const std::string& spec);
  // Under mu_: an encoder for `spec` for one transfer outside mu_, taken out
  // of the cache (made when none is free) until GiveEncoder puts it back.
  Result<std::unique_ptr<EncoderContext>> TakeEncoder(const std::string& spec);
  void GiveEncoder(const std::string& spec, std::unique_ptr<EncoderContext> encoder);
  // Takes ctx.lock back after a stretch without it, ahead of requests
  // waiting for their turn: a returning request waits at most for the
  // prefill running now.
  void Relock(serve::PrefillContext& ctx);
  // ctx's decode connection (Acquire'd on first use from the current
  // decode worker, after waiting under ctx.lock while that worker has
  // options_.max_decode_connections of this worker's requests).
  Result<Connection*> DecodeConnection(serve::PrefillContext& ctx);
  // After a failure on ctx's connection (DecodePeers::Drop).
  void DropDecodeConnection(serve::PrefillContext& ctx);
  // Gives ctx's connection back (DecodePeers::Release) and wakes a request
  // waiting for one.
  void ReleaseDecodeConnection(serve::PrefillContext& ctx);
  Result<Chosen> Choose(const ServeRequest& request, double kv_bytes);
  // Sends `kv` (null on a prefix hit) encoded with `spec` as one transfer
  // (or, on a prefix hit, ctx's pool chunks relayed as one transfer each,
  // then ctx's kv_tokens and suffix cover the chunks sent; NotFound without
  // a GENERATE when not even the first chunk could be had) and the
  // generate message naming them, retrying per the failure rules; fills the
  // stage timings in `t` (summed over the frames). When `streamed` is
  // non-null, the first attempt's transfer of `kv` already ran (overlapped
  // with the prefill, on the connection DecodeConnection() returns, as
  // transfer FirstTransferId(1)) and this is its result.
  Result<serve::ResultMessage> SendAndGenerate(serve::PrefillContext& ctx, const EngineKv* kv,
                                               const std::string& spec,
                                               bool pool_hit,
                                               RequestTimings* t,
                                               const Result<StreamResult>* streamed = nullptr);
  // The first transfer id of `attempt` of `request_id`: distinct per
  // request, attempt and frame (modulo 2^64; the decode worker only matches
  // them against the frames since the last GENERATE).
  static uint64_t FirstTransferId(uint64_t request_id, int attempt) {
    return (request_id * 64 + static_cast<uint64_t>(attempt)) * serve::kMaxGenerateTransfers;
  }
  // Runs the prefill of the request in `ctx`; with `stream` (and
  // options_.overlap_prefill) and a decode connection, streams the KV
  // encoded with `spec` as the first attempt's transfer while it runs and
  // stores that transfer's result in `*streamed`. Sets `*prefill_end` to
  // the MonotonicSeconds() when the model finished (the transfer may end
  // later).
  Result<EnginePrefill> RunPrefill(serve::PrefillContext& ctx, const std::string& spec, bool stream,
                                   std::optional<Result<StreamResult>>* streamed,
                                   double* prefill_end);
  // Whether streaming the KV of `request` (encoded as `chosen`) while its
  // prefill runs pays: no request waits for its turn behind this one, or
  // its transfer, at the measured bandwidth, is predicted to take no longer
  // than the prefill. A slower transfer would hold the engine for the
  // transfer's length (the prefill's layers wait for the link), keeping the
  // waiting requests' prefills from it; the prefill then runs alone and the
  // KV goes after it.
  bool StreamPays(const ServeRequest& request, const Chosen& chosen, double kv_bytes);
  // True when the engine's KV is on a GPU (moved by options_.device).
  bool device() const { return engine_->info().device >= 0; }
  // Streams the whole `kv` encoded with `spec`: with `encoder` (taken by
  // TakeEncoder) for a host engine, with the device connector for a device
  // engine (`encoder` unused, may be null). Runs without mu_.
  Result<StreamResult> StreamWhole(Connection& connection, const EngineKv& kv, const std::string& spec,
                                   EncoderContext* encoder, uint64_t transfer_id);
  // pool_path.cc: true (and ctx/t filled) when stored encodings of the
  // prompt's first chunks are fetched; false to recompute.
  // ctx.pool_keys then names the chunks to relay.
  Result<bool> TryPoolHit(serve::PrefillContext& ctx, RequestTimings* t);
  // pool_path.cc: relays ctx.pool_keys from the pool to `connection` record
  // by record, chunk i as transfer first_id + i, appending the id of each
  // chunk forwarded whole to `transfer_ids`; stops at the first chunk the
  // pool cannot give. The decode link's errors, the decode worker's
  // verdicts, and Unavailable for a chunk lost mid-transfer (aborted).
  Result<StreamResult> RelayPoolChunks(serve::PrefillContext& ctx, Connection& connection,
                                       uint64_t first_id, std::vector<uint64_t>* transfer_ids);
  // pool_path.cc: has the decode worker behind `connection` fetch
  // ctx.pool_keys from the pool itself (POOL_FETCH), chunk i as transfer
  // first_id + i, appending the ids it holds to `transfer_ids`; where that
  // worker has no pool (it says NotSupported), relays them
  // (RelayPoolChunks) and remembers to relay to it from then on. Called
  // under mu_ (ctx.lock), returns without it: the chunks move outside the
  // worker's turn.
  Result<StreamResult> MovePoolChunks(serve::PrefillContext& ctx, Connection& connection, uint64_t first_id,
                                      std::vector<uint64_t>* transfer_ids);
  Result<StreamResult> FetchPoolChunksAtDecode(serve::PrefillContext& ctx, Connection& connection,
                                               uint64_t first_id, std::vector<uint64_t>* transfer_ids);
  // False once decode worker `peer` said it has no pool.
  bool DecodeFetchesPool(int peer) const;
  // pool_path.cc: ctx's kv_tokens and suffix for the first `chunks` pool
  // chunks (at least the prompt's last token stays in the suffix).
  void CoverPoolChunks(serve::PrefillContext& ctx, size_t chunks);
  // pool_path.cc: a hit's timings (relay seconds, chunks used) and the
  // pool's goodput sample.
  void RecordPoolHit(const serve::PrefillContext& ctx, RequestTimings* t);
  // pool_path.cc: queues the full chunks of the prompt's prefix (all tokens
  // but the last) in `kv` for storing under the pool profiles (or
  // `sent_spec`); FlushPoolStores (not under mu_: it takes the queued ones
  // and encodes them without holding it) stores those not yet in the pool.
  void QueuePoolStores(const ServeRequest& request, std::shared_ptr<const EngineKv> kv,
                       const std::string& sent_spec);
  void FlushPoolStores();

  Transport* transport_;
  ServingEngine* engine_;
  std::unique_ptr<ServingEngine> owned_;  // the runtime engine of a Model-based worker
  PrefillWorkerOptions options_;
  BandwidthEstimator estimator_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<FrameSizeModel> frame_sizes_;
  std::unique_ptr<transport::ConnectionServer> server_;
  // Set before server_->Stop(); the handlers poll this, not server_, which a
  // handler may run before Start's assignment to server_ has completed.
  std::atomic<bool> stopping_{false};
  // Requests that have arrived (Serve) and wait for their turn (mu_).
  std::atomic<int> queued_{0};
  // One request at a time runs its engine turn (prefill, or a prefix hit's
  // pool lookups); guards everything below. A request lets go of it for its
  // KV transfer (unless streamed during the prefill) or its pool chunks'
  // move, its GENERATE and the wait for the decode result, so the next
  // request's prefill runs meanwhile.
  std::mutex mu_;
  // Requests taking mu_ back (Relock): a request starting its turn waits on
  // turn_ while any are.
  std::atomic<int> returning_{0};
  std::condition_variable turn_;
  std::condition_variable decode_free_;  // a decode connection was given back
  // Requests prefilled while every decode connection was out, waiting for one.
  int prefilled_waiting_ = 0;
  // Encoders not out for a transfer, by spec (Encoder uses the last one).
  std::map<std::string, std::vector<std::unique_ptr<EncoderContext>>> encoders_;
  std::unique_ptr<serve::DecodePeers> decode_;  // the M decode workers
  PrefillTimePredictor prefill_time_;
  // A prefix hit's decode side, by the prompt's tokens left to run there:
  // GENERATE to its first token (the relayed KV imported into its cache,
  // the rest of the prompt run against it), which is not a fresh prefill
  // of those tokens.
  PrefillTimePredictor hit_first_token_;
  // Prefix hits' fetches ("pool"): chunk bytes over the seconds the relay,
  // or the decode worker's own fetch, took.
  BandwidthEstimator pool_goodput_;
  // Decode workers without the pool (by address); read and written outside
  // mu_ (by hits moving their chunks), so under a lock of its own.
  mutable std::mutex relay_peers_mu_;
  std::set<std::string> relay_peers_;
  double link_rate_;
  std::vector<serve::PendingPoolStore> pending_stores_;
};

}  // namespace kvserve

#endif  // KVSERVE_SERVE_PREFILL_INTERNAL_H_
