// Copyright kvserve authors. The prefill worker's KV-pool path (paper §7.2,
// Fig. 14): the KV of a prompt's prefix (every token but the last) is stored
// per chunk of C = pool_chunk_tokens tokens, one frame per full chunk and
// profile, chunk i (tokens [iC, (i+1)C)) keyed by (model, PrefixChunkHashes
// (prefix, C)[i], profile): the hash covers every token up to the chunk's
// end, so a chunk's frame is only reused after the same tokens. A later
// request whose prefix shares the first k chunks (a shared system prompt or
// document with a different question) finds them; for each profile stored
// for all of them the worker predicts, with the controller's latency model,
// the time to fetch and decode the frames at the measured bandwidth (the
// profile's t0 once per hit) plus the time the decode worker takes to run
// the rest of the prompt against them (as its earlier hits took, by tokens
// left, a shorter rest no faster than the nearest one measured: that time
// includes the decode worker's wait for its GPU; before the first, three
// times a fresh prefill's time of those tokens), compares that with recomputing (with requests waiting for the
// worker's turn, crediting a hit the prefill it saves each of them), and
// takes the fastest that meets the quality floor (a pool behind a link of its own: per chunk the
// slower of that link, at the goodput earlier relays measured, and the
// decode link). Each chosen chunk
// is relayed record by record (KvPool::GetRecords): every record the pool
// delivers is forwarded to the decode worker at once, as one transfer per
// chunk, so the two links work together and no chunk is held whole here;
// the decode worker decodes each record as it arrives and concatenates the
// chunks along tokens before running the rest of the prompt. A pool
// that fails (e.g. Redis restarting) makes the request a miss, never a
// failure.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <variant>

#include "kvserve/pool.h"
#include "kvserve/profile.h"
#include "serve/prefill_internal.h"
#include "serve/serve_protocol.h"

namespace kvserve {
namespace {

// Before the decode side's time for a prompt's rest has been measured (no
// hit yet), that time priced as this many times this worker's prefill of
// those tokens: there the rest runs beside every admitted request's decode
// steps and incoming KV, on a GPU shared with them (on one H100 under the
// trace's load, docs/replay.md, a one-chunk hit's 11.8K-token rest took 1-3 s
// where this worker's prefill of those tokens took 0.43 s: 2.3 to 7 times).
// A hit is then taken only when it still wins with its rest three times as
// slow: a short rest (most of the prompt from the pool, or a cheap model)
// passes, a long one does not until the decode side has been measured.
constexpr double kUnmeasuredRestFactor = 3.0;

std::span<const int32_t> PrefixOf(const std::vector<int32_t>& prompt) {
  return std::span<const int32_t>(prompt).first(prompt.size() - 1);
}

// One stored encoding a hit could use: its profile and the bytes of its
// frames for chunks 0, 1, ... (as long as the pool holds all of them).
struct Candidate {
  const ProfileCost* row = nullptr;  // null for raw ("none")
  std::vector<uint64_t> chunk_bytes;
  bool open = true;  // every chunk so far had this profile
};

}  // namespace

Result<bool> PrefillWorker::Impl::TryPoolHit(serve::PrefillContext& ctx, RequestTimings* t) {
  const ServeRequest& r = *ctx.request;
  if (r.prompt.size() < 2) return false;
  const int chunk_tokens = options_.pool_chunk_tokens;
  std::vector<uint64_t> hashes = PrefixChunkHashes(PrefixOf(r.prompt), chunk_tokens);
  if (hashes.size() > serve::kMaxGenerateTransfers) hashes.resize(serve::kMaxGenerateTransfers);
  if (hashes.empty()) return false;

  const ProfileTable& table = controller_->table();
  auto workload = WorkloadOf(r);
  // The profiles a hit may use: exactly r.method (what the request would
  // send anyway, in the table or not), or (adaptive) raw and the table's
  // profiles that meet the quality floor; for the adaptive choice an unknown
  // profile's quality is unknown, so it is never used.
  auto usable = [&](const std::string& spec, const ProfileCost** row) {
    *row = nullptr;
    if (r.method != kMethodAdaptive && spec != r.method) return false;
    if (spec == "none") return true;
    for (int i = 1; i < table.size(); ++i)
      if (table.profile(i).spec == spec) *row = &table.profile(i);
    if (r.method != kMethodAdaptive) return true;
    return *row != nullptr && workload.ok() &&
           table.Quality(static_cast<int>(*row - &table.profile(0)), *workload) >= r.quality_min;
  };

  // Walk the chunks while some usable profile is stored for all of them.
  std::map<std::string, Candidate> candidates;
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto entries = options_.pool->Lookup(options_.model_id, hashes[i]);
    if (!entries.ok() || entries->empty()) break;  // miss (or pool down): stop here
    bool any = false;
    for (const PoolEntryInfo& e : *entries) {
      if (i == 0) {
        const ProfileCost* row = nullptr;
        if (usable(e.profile, &row)) candidates[e.profile].row = row;
      }
      auto c = candidates.find(e.profile);
      if (c == candidates.end() || !c->second.open || c->second.chunk_bytes.size() != i) continue;
      c->second.chunk_bytes.push_back(e.bytes);
      any = true;
    }
    for (auto& [spec, c] : candidates) c.open = c.open && c.chunk_bytes.size() == i + 1;
    if (!any) break;
  }

  const double bandwidth = estimator_.Estimate(decode_->current_key());
  const double bytes_per_token = static_cast<double>(engine_->info().KvBytesPerToken());
  const double prompt_tokens = static_cast<double>(r.prompt.size());
  const double chunk_kv_bytes = bytes_per_token * chunk_tokens;

  // Recompute: prefill, then the controller's choice for the PD transfer.
  const double kv_bytes = bytes_per_token * prompt_tokens;
  const double prompt_prefill = prefill_time_.Predict(static_cast<int>(r.prompt.size()));
  double recompute = prompt_prefill;
  if (workload.ok()) {
    ControllerRequest cr;
    cr.workload = *workload;
    cr.kv_bytes = kv_bytes;
    cr.bandwidth = bandwidth;
    cr.quality_min = r.quality_min;
    const std::vector<double>& frames = frame_sizes_->For(static_cast<int>(r.prompt.size()));
    cr.frame_bytes = frames;  // the profiles' frames for this prompt, not the table's ratios
    auto best = controller_->ModelOptimum(cr);
    if (best.ok()) {
      ProfileCost cost = table.profile(*best);
      if (*best != ProfileTable::kRaw && frames[*best] > 0) cost.compression_ratio = kv_bytes / frames[*best];
      // The recompute's transfer overlaps its prefill (the streamed model's source).
      recompute += PredictSeconds(options_.controller.model, cost, kv_bytes, bandwidth, recompute);
    }
  } else {
    recompute += kv_bytes / bandwidth;
  }

  // Fetch k chunks: their frames cross the link and are decoded (no
  // encode), then the decode worker runs the prompt's other tokens. A
  // forced method takes its longest run; adaptive takes the fastest (profile,
  // k), possibly fewer chunks than stored when the frames are slow to move.
  std::string best_spec;
  size_t best_chunks = 0;
  double best_seconds = std::numeric_limits<double>::infinity();  // the adaptive choice's score
  double best_latency = 0;                                        // its predicted time to first token
  // Recomputing holds this worker's turn for the whole prompt's prefill and
  // every request queued for the turn waits that long; a hit holds it only
  // for these lookups (its chunks move without it) and leaves the rest to
  // the decode side. So under load the adaptive choice weighs, besides this
  // request's own time, the prefill a hit saves once per waiting request:
  // the summed latency of this request and those behind it, where alone it
  // is this request's latency. (On one GPU shared by both sides the rest
  // still takes GPU time, hence the saving counts only the pool's tokens.)
  const int waiting = queued_.load();
  // A pool across a link of its own (a remote pool, Redis): its fetches'
  // goodput as measured so far; none yet, a local pool's, or one the
  // fetches never measured: the fetch costs only the forwarding.
  const double pool_bandwidth = pool_goodput_.SampleCount("pool") > 0 ? pool_goodput_.Estimate("pool") : 0.0;
  // A decode worker that reads the pool itself takes the chunks over the
  // pool's link alone (before its first fetch, at the decode link's rate);
  // a relay moves them at the slower of the two links.
  const bool direct = DecodeFetchesPool(decode_->current());
  for (const auto& [spec, candidate] : candidates) {
    // The profile's fixed per-transfer overhead t0 once per hit: the
    // chunks follow each other on one connection without a wait between
    // them (RelayPoolChunks), and a relay encodes nothing.
    double seconds = candidate.row != nullptr ? candidate.row->overhead_seconds : 0.0;
    for (size_t k = 1; k <= candidate.chunk_bytes.size(); ++k) {
      const double bytes = static_cast<double>(candidate.chunk_bytes[k - 1]);
      if (direct)
        seconds += bytes / (pool_bandwidth > 0 ? pool_bandwidth : bandwidth);
      else
        seconds += std::max(bytes / bandwidth, pool_bandwidth > 0 ? bytes / pool_bandwidth : 0.0);
      if (candidate.row != nullptr) seconds += chunk_kv_bytes / candidate.row->decode_bytes_per_second;
      // The decode worker runs the prompt's other tokens (at least the last)
      // against the imported chunks: as its earlier hits took, once there
      // were some (their first tokens waited for the decode worker's GPU
      // beside its other requests, a wait a shorter rest does not shorten),
      // else as three fresh prefills of those tokens would.
      const int rest = static_cast<int>(prompt_tokens) - static_cast<int>(k) * chunk_tokens;
      const double total =
          seconds + (hit_first_token_.empty() ? kUnmeasuredRestFactor * prefill_time_.Predict(rest)
                                              : hit_first_token_.PredictNoLessThanNearest(rest));
      const double score = total - waiting * std::max(0.0, prompt_prefill - prefill_time_.Predict(rest));
      const bool better = r.method == kMethodAdaptive ? score < best_seconds : k > best_chunks;
      if (better) {
        best_seconds = score;
        best_latency = total;
        best_spec = spec;
        best_chunks = k;
      }
    }
  }
  if (best_chunks == 0) return false;
  if (r.method == kMethodAdaptive && recompute < best_seconds) {
    t->recomputed = true;
    return false;
  }
  // SendAndGenerate has the decode worker fetch the chunks (or relays them).
  ctx.pool_keys.clear();
  for (size_t i = 0; i < best_chunks; ++i) ctx.pool_keys.push_back({options_.model_id, hashes[i], best_spec});
  ctx.pool_chunk_tokens = chunk_tokens;
  t->profile = best_spec;
  t->prefix_hit = true;
  t->bandwidth_estimate = bandwidth;
  t->predicted_kv_seconds = best_latency;
  return true;
}

Result<StreamResult> PrefillWorker::Impl::RelayPoolChunks(serve::PrefillContext& ctx,
                                                          Connection& connection, uint64_t first_id,
                                                          std::vector<uint64_t>* transfer_ids) {
  StreamResult total;
  const double start = MonotonicSeconds();
  // The chunk before the one in flight: ended, its ack not yet read. The
  // next chunk is fetched and forwarded while the decode worker finishes it
  // (a wait per chunk for its ack would idle both links once per chunk).
  std::unique_ptr<FrameSender> previous;
  auto settle_previous = [&]() -> Status {
    if (previous == nullptr) return Status::Ok();
    auto stats = previous->AwaitAck();  // the decode worker's verdict
    previous.reset();
    if (!stats.ok()) return stats.status();
    total.transfer.busy_seconds += stats->busy_seconds;
    total.transfer.frame_bytes += stats->frame_bytes;
    return Status::Ok();
  };
  for (size_t i = 0; i < ctx.pool_keys.size(); ++i) {
    const uint64_t id = first_id + i;
    auto sender = std::make_unique<FrameSender>(&connection);
    bool begun = false;
    Status forward;  // the decode link's first error
    FrameHandler relay;
    relay.on_header = [&](uint64_t, std::span<const uint8_t> header) {
      begun = true;
      forward = sender->Begin(id, header);
      return forward;
    };
    relay.on_record = [&](std::span<const uint8_t> record) {
      forward = sender->SendRecord(record);
      return forward;
    };
    const Status fetched = options_.pool->GetRecords(ctx.pool_keys[i], relay);
    if (!forward.ok()) return forward.WithContext("forwarding pool chunk " + std::to_string(i));
    if (!fetched.ok()) {
      if (begun) (void)sender->Abort(fetched);
      KVSERVE_RETURN_IF_ERROR(settle_previous());
      // Gone before its first byte (evicted since the lookup, pool down):
      // the hit ends with the chunks before it.
      if (!begun) break;
      return Status::Unavailable("pool chunk " + std::to_string(i) +
                                 " lost mid-transfer: " + fetched.ToString());
    }
    transfer_ids->push_back(id);
    KVSERVE_RETURN_IF_ERROR(sender->End());
    KVSERVE_RETURN_IF_ERROR(settle_previous());
    previous = std::move(sender);
  }
  KVSERVE_RETURN_IF_ERROR(settle_previous());
  total.ack_time = MonotonicSeconds();
  total.kv_seconds = total.ack_time - start;
  ctx.pool_relay_seconds = total.kv_seconds;
  ctx.pool_relay_bytes = total.transfer.frame_bytes;
  return total;
}

bool PrefillWorker::Impl::DecodeFetchesPool(int peer) const {
  const std::string& key = decode_->key(peer);
  std::lock_guard<std::mutex> lock(relay_peers_mu_);
  return relay_peers_.count(key) == 0;
}

Result<StreamResult> PrefillWorker::Impl::MovePoolChunks(serve::PrefillContext& ctx, Connection& connection,
                                                         uint64_t first_id, std::vector<uint64_t>* transfer_ids) {
  const std::string peer = decode_->key(ctx.lease.peer);  // DecodePeers is read under mu_ only
  const bool at_decode = DecodeFetchesPool(ctx.lease.peer);
  // The turn ends here: the engine has nothing to do for a hit until the
  // decode worker answers, so the next request's turn (its prefill, or its
  // own lookups) runs while these chunks move, as it does during a
  // recomputed request's transfer.
  ctx.lock->unlock();
  if (at_decode) {
    auto fetched = FetchPoolChunksAtDecode(ctx, connection, first_id, transfer_ids);
    if (fetched.ok() || fetched.status().code() != StatusCode::kNotSupported) return fetched;
    // A decode worker without the pool: relay to it from now on.
    std::lock_guard<std::mutex> lock(relay_peers_mu_);
    relay_peers_.insert(peer);
  }
  return RelayPoolChunks(ctx, connection, first_id, transfer_ids);
}

Result<StreamResult> PrefillWorker::Impl::FetchPoolChunksAtDecode(serve::PrefillContext& ctx, Connection& connection,
                                                                  uint64_t first_id,
                                                                  std::vector<uint64_t>* transfer_ids) {
  serve::PoolFetchMessage fetch;
  fetch.request_id = ctx.request->id;
  fetch.first_transfer_id = first_id;
  fetch.keys = ctx.pool_keys;
  const double start = MonotonicSeconds();
  KVSERVE_RETURN_IF_ERROR(connection.Send(kMsgServePoolFetch, 0, serve::EncodePoolFetch(fetch)));
  Message reply;
  KVSERVE_RETURN_IF_ERROR(connection.Receive(&reply, 3600).WithContext("awaiting the decode worker's pool fetch"));
  if (reply.type != kMsgServePoolFetched)
    return Status::Corruption("decode worker answered a pool fetch with message type " + std::to_string(reply.type));
  KVSERVE_ASSIGN_OR_RETURN(serve::PoolFetchedMessage fetched, serve::DecodePoolFetched(reply.payload));
  if (fetched.request_id != ctx.request->id)
    return Status::Corruption("decode worker answered a pool fetch for request " + std::to_string(fetched.request_id));
  if (!fetched.status.ok()) {
    // NotSupported (no pool there) is the caller's cue to relay; a chunk
    // lost or corrupt on the way is Unavailable / Corruption, retried.
    if (fetched.status.code() == StatusCode::kNotSupported) return fetched.status;
    return fetched.status.WithContext("decode worker's pool fetch");
  }
  if (fetched.chunks > ctx.pool_keys.size())
    return Status::Corruption("decode worker claims more pool chunks than asked");
  for (uint64_t i = 0; i < fetched.chunks; ++i) transfer_ids->push_back(first_id + i);
  StreamResult total;
  total.ack_time = MonotonicSeconds();
  total.kv_seconds = total.ack_time - start;
  total.transfer.frame_bytes = fetched.frame_bytes;
  total.transfer.busy_seconds = fetched.seconds;
  ctx.pool_relay_seconds = fetched.seconds > 0 ? fetched.seconds : total.kv_seconds;
  ctx.pool_relay_bytes = fetched.frame_bytes;
  ctx.pool_wait_seconds = fetched.wait_seconds;
  return total;
}

void PrefillWorker::Impl::CoverPoolChunks(serve::PrefillContext& ctx, size_t chunks) {
  const ServeRequest& r = *ctx.request;
  const size_t covered =
      std::min(r.prompt.size() - 1, chunks * static_cast<size_t>(ctx.pool_chunk_tokens));
  ctx.kv_tokens.assign(r.prompt.begin(), r.prompt.begin() + covered);
  ctx.suffix.assign(r.prompt.begin() + covered, r.prompt.end());
}

void PrefillWorker::Impl::RecordPoolHit(const serve::PrefillContext& ctx, RequestTimings* t) {
  t->pool_fetch_seconds = ctx.pool_relay_seconds;
  t->pool_wait_seconds = ctx.pool_wait_seconds;
  t->prefix_chunks =
      static_cast<int>(ctx.kv_tokens.size() / static_cast<size_t>(ctx.pool_chunk_tokens));
  if (ctx.pool_relay_bytes > 0 && ctx.pool_relay_seconds > 0)
    (void)pool_goodput_.Observe("pool", static_cast<double>(ctx.pool_relay_bytes),
                                ctx.pool_relay_seconds, MonotonicSeconds());
}

void PrefillWorker::Impl::QueuePoolStores(const ServeRequest& r, std::shared_ptr<const EngineKv> kv,
                                          const std::string& sent_spec) {
  if (r.prompt.size() < 2) return;
  const int chunk_tokens = options_.pool_chunk_tokens;
  const std::vector<uint64_t> hashes = PrefixChunkHashes(PrefixOf(r.prompt), chunk_tokens);
  for (size_t i = 0; i < hashes.size(); ++i) {
    serve::PendingPoolStore store;
    store.key = {options_.model_id, hashes[i], ""};
    store.profiles = options_.pool_store_profiles;
    if (store.profiles.empty()) store.profiles = {sent_spec};
    store.kv = kv;
    store.token_begin = static_cast<int>(i) * chunk_tokens;
    store.tokens = chunk_tokens;
    pending_stores_.push_back(std::move(store));
  }
}

void PrefillWorker::Impl::FlushPoolStores() {
  // The stores are taken out under mu_ and encoded without it: the
  // requests in their turns meanwhile neither wait for nor pay for them.
  std::vector<serve::PendingPoolStore> stores;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stores.swap(pending_stores_);
  }
  if (options_.pool == nullptr) return;
  std::vector<uint8_t> frame;
  for (serve::PendingPoolStore& store : stores) {
    // A chunk shared with an earlier prompt is usually stored already: skip
    // the profiles the pool holds instead of encoding them again.
    auto stored = options_.pool->Lookup(store.key.model_id, store.key.prefix_hash);
    for (const std::string& spec : store.profiles) {
      if (stored.ok() && std::any_of(stored->begin(), stored->end(),
                                     [&](const PoolEntryInfo& e) { return e.profile == spec; }))
        continue;
      auto chunk = SliceTokens(store.kv->view(), store.token_begin, store.tokens);
      if (!chunk.ok()) continue;
      frame.clear();
      VectorSink sink(&frame);
      if (device()) {
        auto profile = Profile::Parse(spec);
        if (!profile.ok() ||
            !options_.device->EncodeFrame(*profile, options_.head_scores, *chunk, sink, engine_->stream()).ok())
          continue;
      } else {
        std::unique_ptr<EncoderContext> encoder;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto taken = TakeEncoder(spec);
          if (!taken.ok()) continue;
          encoder = std::move(*taken);
        }
        const Status encoded = std::visit([&](const auto& view) { return encoder->Encode(view, sink); }, *chunk);
        {
          std::lock_guard<std::mutex> lock(mu_);
          GiveEncoder(spec, std::move(encoder));
        }
        if (!encoded.ok()) continue;
      }
      PoolKey key = store.key;
      key.profile = spec;
      (void)options_.pool->Put(key, frame);  // best effort: a failed store is a later miss
    }
  }
}

}  // namespace kvserve
