// Copyright kvserve authors. The prefill worker's KV-pool path (paper §7.2,
// Fig. 14): the KV of a prompt's prefix (every token but the last) is stored
// under one or more profiles, keyed by (model, PrefixHash(prefix), profile);
// on a later request with the same prefix the worker predicts, with the
// controller's latency model, the time to fetch-and-decode each stored
// encoding at the measured bandwidth and the time to recompute, and takes
// the fastest one that meets the quality floor. A pool that fails (e.g.
// Redis restarting) makes the request a miss, never a failure.
#include <algorithm>
#include <limits>

#include "kvserve/pool.h"
#include "kvserve/profile.h"
#include "serve/prefill_internal.h"

namespace kvserve {
namespace {

std::span<const int32_t> PrefixOf(const std::vector<int32_t>& prompt) {
  return std::span<const int32_t>(prompt).first(prompt.size() - 1);
}

}  // namespace

Result<bool> PrefillWorker::Impl::TryPoolHit(serve::PrefillContext& ctx, RequestTimings* t) {
  const ServeRequest& r = *ctx.request;
  if (r.prompt.size() < 2) return false;
  const uint64_t hash = PrefixHash(PrefixOf(r.prompt));
  auto entries = options_.pool->Lookup(options_.model_id, hash);
  if (!entries.ok() || entries->empty()) return false;  // miss (or pool down: recompute)

  const ProfileTable& table = controller_->table();
  const double bandwidth = estimator_.Estimate(decode_peer_);
  const ModelConfig& c = model_->config();
  const double kv_bytes = 4.0 * c.layers * 2 * c.kv_heads * c.head_dim * static_cast<double>(r.prompt.size() - 1);
  auto workload = table.WorkloadIndex(r.workload);

  // Recompute: prefill, then the controller's choice for the PD transfer.
  double recompute = seconds_per_token_ * static_cast<double>(r.prompt.size());
  if (workload.ok()) {
    ControllerRequest cr;
    cr.workload = *workload;
    cr.kv_bytes = kv_bytes;
    cr.bandwidth = bandwidth;
    cr.quality_min = r.quality_min;
    auto best = controller_->ModelOptimum(cr);
    if (best.ok())
      recompute += PredictSeconds(options_.controller.model, table.profile(*best), kv_bytes, bandwidth);
  } else {
    recompute += kv_bytes / bandwidth;
  }

  // Fetch: the stored frame crosses the link and is decoded (no encode).
  const PoolEntryInfo* best_entry = nullptr;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (const PoolEntryInfo& e : *entries) {
    if (r.method != kMethodAdaptive && e.profile != r.method) continue;
    double seconds = static_cast<double>(e.bytes) / bandwidth;
    if (e.profile != "none") {
      const ProfileCost* row = nullptr;
      for (int i = 1; i < table.size(); ++i)
        if (table.profile(i).spec == e.profile) row = &table.profile(i);
      if (row == nullptr) continue;  // unknown profile: its quality is unknown
      if (r.method == kMethodAdaptive &&
          (!workload.ok() || table.Quality(static_cast<int>(row - &table.profile(0)), *workload) < r.quality_min))
        continue;
      seconds += row->overhead_seconds + kv_bytes / row->decode_bytes_per_second;
    }
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best_entry = &e;
    }
  }
  if (best_entry == nullptr) return false;
  if (r.method == kMethodAdaptive && recompute < best_seconds) {
    t->recomputed = true;
    return false;
  }
  const double fetch_start = MonotonicSeconds();
  Status s = options_.pool->Get({options_.model_id, hash, best_entry->profile}, &ctx.pool_frame);
  t->pool_fetch_seconds = MonotonicSeconds() - fetch_start;
  if (!s.ok()) return false;  // evicted meanwhile or pool down: recompute
  ctx.kv_tokens.assign(r.prompt.begin(), r.prompt.end() - 1);
  ctx.suffix = {r.prompt.back()};
  t->profile = best_entry->profile;
  t->prefix_hit = true;
  t->bandwidth_estimate = bandwidth;
  t->predicted_kv_seconds = best_seconds;
  return true;
}

void PrefillWorker::Impl::QueuePoolStores(const ServeRequest& r, const KvState& kv,
                                          const std::string& sent_spec) {
  if (r.prompt.size() < 2) return;
  KvView prefix = kv.view();
  prefix.shape.tokens = static_cast<int32_t>(r.prompt.size() - 1);
  auto copy = KvCache::CopyFrom(prefix);
  if (!copy.ok()) return;
  serve::PendingPoolStore store;
  store.key = {options_.model_id, PrefixHash(PrefixOf(r.prompt)), ""};
  store.profiles = options_.pool_store_profiles;
  if (store.profiles.empty()) store.profiles = {sent_spec};
  store.kv = std::move(*copy);
  pending_stores_.push_back(std::move(store));
}

void PrefillWorker::Impl::FlushPoolStores() {
  std::lock_guard<std::mutex> lock(mu_);
  FlushPoolStoresLocked();
}

void PrefillWorker::Impl::FlushPoolStoresLocked() {
  if (options_.pool == nullptr) {
    pending_stores_.clear();
    return;
  }
  std::vector<uint8_t> frame;
  for (serve::PendingPoolStore& store : pending_stores_) {
    for (const std::string& spec : store.profiles) {
      auto encoder = Encoder(spec);
      if (!encoder.ok()) continue;
      frame.clear();
      VectorSink sink(&frame);
      if (!(*encoder)->Encode(store.kv.view(), sink).ok()) continue;
      PoolKey key = store.key;
      key.profile = spec;
      (void)options_.pool->Put(key, frame);  // best effort: a failed store is a later miss
    }
  }
  pending_stores_.clear();
}

}  // namespace kvserve
