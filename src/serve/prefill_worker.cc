// Copyright kvserve authors. The prefill worker: runs the model's prefill,
// asks the controller for a profile, streams the encoded KV to a decode
// worker layer by layer, feeds the observed KV latency back to the bandit,
// and answers the client with the tokens and the per-stage timings
// (docs/e2e.md §Prefill worker). The prefix-pool path is in pool_path.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/profile.h"
#include "kvserve/serve.h"
#include "transport/connection_server.h"
#include "serve/prefill_internal.h"
#include "serve/serve_protocol.h"

namespace kvserve {

using serve::PrefillContext;

PrefillWorker::Impl::Impl(Transport* transport, ServingEngine* engine, std::unique_ptr<ServingEngine> owned,
                          PrefillWorkerOptions options)
    : transport_(transport),
      engine_(engine),
      owned_(std::move(owned)),
      options_(std::move(options)),
      estimator_(options_.estimator),
      prefill_time_(options_.prefill_seconds_per_token_prior),
      link_rate_(options_.decode_connection.shape_bytes_per_second) {}

namespace {

// `table` without the profiles this worker could not encode: those whose
// quantizer needs head scores (mixhq, duo) when it has none, and for a
// device engine those the device codec does not run (zstd, lz4).
Result<ProfileTable> WithoutUnusableProfiles(const ProfileTable& table, bool head_scores,
                                            const DeviceConnector* device, const KvShape& shape) {
  std::vector<ProfileCost> rows;
  for (int i = ProfileTable::kRaw + 1; i < table.size(); ++i) {
    auto p = Profile::Parse(table.profile(i).spec);
    if (!head_scores && p.ok() &&
        (p->quantizer() == QuantizerType::kMixHQ || p->quantizer() == QuantizerType::kDuo))
      continue;
    if (device != nullptr && p.ok() && !device->Supports(*p, shape).ok()) continue;
    rows.push_back(table.profile(i));
  }
  return ProfileTable::FromRowsAndWorkloads(std::move(rows), table.workloads());
}

}  // namespace

Status PrefillWorker::Impl::Start(ProfileTable table) {
  const EngineInfo& c = engine_->info();
  if (device() && options_.device == nullptr)
    return Status::InvalidArgument("prefill worker: the engine's KV is on CUDA device " + std::to_string(c.device) +
                                   "; PrefillWorkerOptions::device (a DeviceConnector) is needed");
  if (options_.head_scores == nullptr || device()) {
    KVSERVE_ASSIGN_OR_RETURN(table, WithoutUnusableProfiles(table, options_.head_scores != nullptr,
                                                            device() ? options_.device : nullptr,
                                                            KvShape{c.layers, c.kv_heads, 1, c.head_dim}));
  }
  if (options_.decode_addresses.empty())
    return Status::InvalidArgument("prefill worker needs at least one decode worker address");
  if (options_.max_attempts < 1) return Status::InvalidArgument("max_attempts must be >= 1");
  if (options_.max_decode_connections < 1)
    return Status::InvalidArgument("max_decode_connections must be >= 1");
  if (options_.pool_chunk_tokens < 1)
    return Status::InvalidArgument("pool_chunk_tokens must be >= 1");
  if (options_.controller.model.kind == LatencyModelKind::kStreamed &&
      options_.controller.model.layers <= 0)
    options_.controller.model.layers = c.layers;
  KVSERVE_ASSIGN_OR_RETURN(controller_, Controller::Create(std::move(table), options_.controller));
  decode_ = std::make_unique<serve::DecodePeers>(transport_, options_.decode_addresses, &estimator_);
  frame_sizes_ = std::make_unique<FrameSizeModel>(
      controller_->table(), KvShape{c.layers, c.kv_heads, 1, c.head_dim}, c.kv_dtype,
      options_.head_scores, options_.table_reference_tokens);
  KVSERVE_ASSIGN_OR_RETURN(
      server_, transport::ConnectionServer::Start(transport_, options_.listen_address,
                                                  options_.client_connection,
                                                  options_.client_admission,
                                                  [this](Connection& c) { ServeClient(c); }));
  return Status::Ok();
}

void PrefillWorker::Impl::ServeClient(Connection& connection) {
  Message message;
  while (!stopping_.load()) {
    const double wait_start = MonotonicSeconds();
    Status s = connection.Receive(&message, 0.5);
    if (s.code() == StatusCode::kTimeout && MonotonicSeconds() - wait_start > 0.25) continue;
    if (!s.ok()) return;
    if (message.type != kMsgServeRequest) {
      connection.Fail(Status::Corruption("expected a serve request, got message type " +
                                         std::to_string(message.type)));
      return;
    }
    ServeResponse response;
    auto request = serve::DecodeRequest(message.payload);
    if (!request.ok()) {
      response.status = request.status();
    } else {
      response = Answer(*request);
    }
    if (!connection.Send(kMsgServeResponse, 0, serve::EncodeResponse(response)).ok()) return;
    FlushPoolStores();
  }
}

Status PrefillWorker::Impl::ValidateRequest(const ServeRequest& r) const {
  const EngineInfo& c = engine_->info();
  if (r.prompt.empty()) return Status::InvalidArgument("request " + std::to_string(r.id) + ": empty prompt");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size)
      return Status::InvalidArgument("request " + std::to_string(r.id) + ": token " +
                                     std::to_string(t) + " outside the vocabulary [0, " +
                                     std::to_string(c.vocab_size) + ")");
  if (r.max_new_tokens < 1 || r.max_new_tokens > 1 << 20)
    return Status::InvalidArgument("request " + std::to_string(r.id) + ": max_new_tokens must be in [1, 2^20]");
  if (!(r.slo_seconds > 0)) return Status::InvalidArgument("request " + std::to_string(r.id) + ": slo must be > 0");
  return Status::Ok();
}

Result<int> PrefillWorker::Impl::WorkloadOf(const ServeRequest& r) const {
  const ProfileTable& table = controller_->table();
  if (!r.workload.empty()) return table.WorkloadIndex(r.workload);
  if (!options_.default_workload.empty()) return table.WorkloadIndex(options_.default_workload);
  if (auto unified = table.WorkloadIndex("unified"); unified.ok()) return unified;
  if (table.workloads().empty()) return Status::NotFound("the profile table names no workload");
  return 0;
}

Result<EncoderContext*> PrefillWorker::Impl::Encoder(const std::string& spec) {
  std::vector<std::unique_ptr<EncoderContext>>& free = encoders_[spec];
  if (free.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(auto encoder, TakeEncoder(spec));
    free.push_back(std::move(encoder));
  }
  return free.back().get();
}

Result<std::unique_ptr<EncoderContext>> PrefillWorker::Impl::TakeEncoder(const std::string& spec) {
  auto it = encoders_.find(spec);
  if (it != encoders_.end() && !it->second.empty()) {
    std::unique_ptr<EncoderContext> encoder = std::move(it->second.back());
    it->second.pop_back();
    return encoder;
  }
  KVSERVE_ASSIGN_OR_RETURN(Profile profile, Profile::Parse(spec));
  return EncoderContext::Create(profile, {.threads = options_.encode_threads, .head_scores = options_.head_scores});
}

void PrefillWorker::Impl::GiveEncoder(const std::string& spec, std::unique_ptr<EncoderContext> encoder) {
  if (encoder) encoders_[spec].push_back(std::move(encoder));
}

void PrefillWorker::Impl::Relock(PrefillContext& ctx) {
  ++returning_;
  ctx.lock->lock();
  if (--returning_ == 0) turn_.notify_all();
}

Result<Connection*> PrefillWorker::Impl::DecodeConnection(PrefillContext& ctx) {
  if (!ctx.lease.connection) {
    const double wait_start = MonotonicSeconds();
    while (!decode_->CanAcquire(options_.max_decode_connections)) decode_free_.wait(*ctx.lock);
    ctx.connection_wait_seconds += MonotonicSeconds() - wait_start;
    ConnectionOptions o = options_.decode_connection;
    o.shape_bytes_per_second = link_rate_;
    KVSERVE_RETURN_IF_ERROR(decode_->Acquire(o, &ctx.lease));
    if (ctx.counted_waiting) {  // its prefilled KV no longer waits for a connection
      ctx.counted_waiting = false;
      --prefilled_waiting_;
    }
  }
  return ctx.lease.connection.get();
}

void PrefillWorker::Impl::DropDecodeConnection(PrefillContext& ctx) {
  if (!ctx.lease.connection) return;
  decode_->Drop(&ctx.lease);
  decode_free_.notify_all();
}

void PrefillWorker::Impl::ReleaseDecodeConnection(PrefillContext& ctx) {
  if (ctx.counted_waiting) {
    ctx.counted_waiting = false;
    --prefilled_waiting_;
    decode_free_.notify_all();
  }
  if (!ctx.lease.connection) return;
  decode_->Release(&ctx.lease);
  decode_free_.notify_all();
}

Result<PrefillWorker::Impl::Chosen> PrefillWorker::Impl::Choose(const ServeRequest& r,
                                                                 double kv_bytes) {
  Chosen chosen;
  const kvserve::BandwidthEstimate measured = estimator_.Query(decode_->current_key());
  chosen.bandwidth = measured.bytes_per_second;
  double log_sigma = measured.log_sigma;
  if (!std::isfinite(log_sigma) && options_.shaped_rate_log_sigma > 0) {
    // Not measured yet: the share of a link this worker shapes.
    double share = link_rate_;
    if (const auto& link = options_.decode_connection.shared_link; link != nullptr)
      share = link->rate() / (link->transfers() + 1);
    if (share > 0) {
      chosen.bandwidth = share;
      log_sigma = options_.shaped_rate_log_sigma;
    }
  }
  if (r.method != kMethodAdaptive) {
    KVSERVE_ASSIGN_OR_RETURN(Profile p, Profile::Parse(r.method));
    if (device()) {
      const EngineInfo& c = engine_->info();
      KVSERVE_RETURN_IF_ERROR(options_.device->Supports(p, KvShape{c.layers, c.kv_heads, 1, c.head_dim})
                                  .WithContext("request " + std::to_string(r.id) + ": method " + r.method +
                                               " on a GPU engine"));
    }
    chosen.spec = r.method;
    return chosen;
  }
  const ProfileTable& table = controller_->table();
  KVSERVE_ASSIGN_OR_RETURN(int workload, WorkloadOf(r));
  ControllerRequest cr;
  cr.workload = workload;
  cr.kv_bytes = kv_bytes;
  cr.bandwidth = chosen.bandwidth;
  cr.slo_seconds = r.slo_seconds;
  cr.model_seconds = prefill_time_.Predict(static_cast<int>(r.prompt.size()));
  cr.quality_min = r.quality_min;
  cr.now_seconds = MonotonicSeconds();
  // +inf before the peer's first measurement (on a link of unknown rate):
  // the risk guard then lets only raw through (docs/controller.md),
  // instead of deciding on the prior.
  cr.bandwidth_log_sigma = log_sigma;
  // Each profile's frame for this prompt's shape, not the table's ratio.
  cr.frame_bytes = frame_sizes_->For(static_cast<int>(r.prompt.size()));
  KVSERVE_ASSIGN_OR_RETURN(chosen.decision, controller_->Decide(cr));
  chosen.adaptive = true;
  const int index = chosen.decision.action == ControllerAction::kRecompute ? ProfileTable::kRaw
                                                                           : chosen.decision.profile;
  chosen.spec = table.profile(index).spec;
  return chosen;
}

Result<StreamResult> PrefillWorker::Impl::StreamWhole(Connection& connection, const EngineKv& kv,
                                                      const std::string& spec, EncoderContext* encoder,
                                                      uint64_t transfer_id) {
  if (device()) {
    KVSERVE_ASSIGN_OR_RETURN(Profile profile, Profile::Parse(spec));
    return options_.device->StreamKv(connection, profile, options_.head_scores, kv.view(), transfer_id,
                                     engine_->stream());
  }
  if (encoder == nullptr) return Status::Internal("StreamWhole: a host engine's transfer needs an encoder");
  return std::visit([&](const auto& view) { return StreamKv(connection, *encoder, view, transfer_id); },
                    kv.view());
}

Result<serve::ResultMessage> PrefillWorker::Impl::SendAndGenerate(
    PrefillContext& ctx, const EngineKv* kv, const std::string& spec,
    bool pool_hit, RequestTimings* t,
    const Result<StreamResult>* streamed) {
  Status last = Status::Unavailable("no attempt made");
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    t->attempts = attempt;
    auto connection = DecodeConnection(ctx);
    if (!connection.ok()) {
      last = connection.status();
      continue;
    }
    const uint64_t first_id = FirstTransferId(ctx.request->id, attempt);
    std::vector<uint64_t> transfer_ids;
    Status sent = Status::Ok();
    StreamResult total;
    auto add = [&](const StreamResult& r) {
      total.encode_seconds += r.encode_seconds;
      total.kv_seconds += r.kv_seconds;
      total.transfer.busy_seconds += r.transfer.busy_seconds;
      total.transfer.frame_bytes += r.transfer.frame_bytes;
    };
    // The engine's turn ends once the KV is out of it: the transfer, the
    // GENERATE and the wait for the result run without the worker's lock
    // (the next request's prefill runs meanwhile); taken back (Relock)
    // before the worker's shared state is touched again.
    bool unlocked = false;
    std::unique_ptr<EncoderContext> encoder;  // the host transfer's, out of the cache until relock()
    auto relock = [&] {
      if (unlocked) Relock(ctx);
      unlocked = false;
      GiveEncoder(spec, std::move(encoder));
    };
    if (attempt == 1 && streamed != nullptr) {
      transfer_ids.push_back(first_id);
      if (streamed->ok()) add(**streamed);
      sent = streamed->status();
    } else if (pool_hit) {
      auto relayed = MovePoolChunks(ctx, **connection, first_id, &transfer_ids);  // gives up the turn
      unlocked = true;
      if (relayed.ok()) add(*relayed);
      sent = relayed.status();
      if (sent.ok() && transfer_ids.empty()) {
        relock();
        return Status::NotFound("prefix hit: the pool no longer has its first chunk");
      }
      CoverPoolChunks(ctx, transfer_ids.size());
    } else {
      transfer_ids.push_back(first_id);
      if (!device()) {
        auto taken = TakeEncoder(spec);
        if (taken.ok()) encoder = std::move(*taken);
        sent = taken.status();
      }
      if (sent.ok()) {
        ctx.lock->unlock();
        unlocked = true;
        auto one = StreamWhole(**connection, *kv, spec, encoder.get(), first_id);
        if (one.ok()) add(*one);
        sent = one.status();
      }
    }
    if (!sent.ok()) {
      last = sent;
      if (!serve::IsRetryable(last)) {
        relock();
        DropDecodeConnection(ctx);  // e.g. an encoder error: the transfer was aborted
        return last;
      }
      if (last.code() != StatusCode::kCorruption) {
        relock();
        DropDecodeConnection(ctx);
        continue;
      }
      // Corruption: the receiver refused the frame (the GENERATE below is
      // then answered with the refusal), or the connection broke (the
      // exchange below fails and the connection is dropped).
    } else {
      t->encode_seconds = total.encode_seconds;
      t->transfer_seconds = total.transfer.busy_seconds;
      t->kv_seconds = total.kv_seconds;
      t->frame_bytes = total.transfer.frame_bytes;
    }
    serve::GenerateMessage g;
    g.request_id = ctx.request->id;
    g.transfer_ids = std::move(transfer_ids);
    g.prompt = ctx.kv_tokens;
    g.suffix = ctx.suffix;
    g.max_new_tokens = ctx.request->max_new_tokens;
    g.sampling = ctx.request->sampling;
    g.stop_at_eos = ctx.request->stop_at_eos;
    g.last_logits = ctx.last_logits;
    if (!unlocked) {
      ctx.lock->unlock();
      unlocked = true;
    }
    // The lease keeps this connection to this request while it generates.
    Status s = (*connection)->Send(kMsgServeGenerate, 0, serve::EncodeGenerate(g));
    Message reply;
    if (s.ok()) s = (*connection)->Receive(&reply, 3600);
    ctx.result_at_seconds = MonotonicSeconds();
    relock();
    if (s.ok() && reply.type != kMsgServeResult)
      s = Status::Corruption("decode worker answered with message type " + std::to_string(reply.type));
    if (!s.ok()) {
      last = s.WithContext("awaiting the decode worker's result");
      DropDecodeConnection(ctx);
      continue;
    }
    auto result = serve::DecodeResult(reply.payload);
    if (!result.ok()) {
      last = result.status();
      DropDecodeConnection(ctx);
      continue;
    }
    if (result->status.ok()) decode_->ObserveGeneration(ctx.lease.peer, result->generation_seconds);
    if (!result->status.ok()) {
      last = result->status.WithContext("decode worker");
      if (!serve::IsRetryable(result->status)) return last;
      continue;  // e.g. an incomplete frame: send it again
    }
    return std::move(*result);
  }
  return last.WithContext("request " + std::to_string(ctx.request->id) + " failed after " +
                          std::to_string(options_.max_attempts) + " attempts");
}

bool PrefillWorker::Impl::StreamPays(const ServeRequest& request, const Chosen& chosen, double kv_bytes) {
  if (queued_.load() == 0) return true;  // the overlap costs no one a wait
  const int tokens = static_cast<int>(request.prompt.size());
  double transfer = 0;
  if (chosen.adaptive && chosen.decision.action == ControllerAction::kSend && chosen.decision.predicted_seconds > 0) {
    transfer = chosen.decision.predicted_seconds;
  } else if (chosen.bandwidth > 0) {
    double frame_bytes = kv_bytes;  // raw, or a method the table does not hold
    const ProfileTable& table = controller_->table();
    auto profile = Profile::Parse(chosen.spec);
    for (int i = 1; profile.ok() && i < table.size(); ++i) {
      auto row = Profile::Parse(table.profile(i).spec);
      if (!row.ok() || !(*row == *profile)) continue;
      const double planned = frame_sizes_->For(tokens)[static_cast<size_t>(i)];
      frame_bytes = planned > 0 ? planned : kv_bytes / table.profile(i).compression_ratio;
      break;
    }
    transfer = frame_bytes / chosen.bandwidth;
  }
  return transfer <= prefill_time_.Predict(tokens);
}

Result<EnginePrefill> PrefillWorker::Impl::RunPrefill(serve::PrefillContext& ctx,
                                                      const std::string& spec, bool stream,
                                                      std::optional<Result<StreamResult>>* streamed,
                                                      double* prefill_end_out) {
  const std::vector<int32_t>& prompt = ctx.request->prompt;
  auto plain = [&] {
    auto result = engine_->Prefill(prompt, [](int, const KvView&) {});
    *prefill_end_out = MonotonicSeconds();
    return result;
  };
  if (!options_.overlap_prefill || !stream) return plain();
  // Every decode connection out (the decode worker generating this
  // worker's max_decode_connections requests): prefill now and send once
  // one is free, rather than leave the engine idle until then -- for as
  // many requests as there are connections (each holds its KV meanwhile).
  if (!ctx.lease.connection && !decode_->CanAcquire(options_.max_decode_connections)) {
    if (prefilled_waiting_ < options_.max_decode_connections) {
      ++prefilled_waiting_;
      ctx.counted_waiting = true;
      return plain();
    }
  }
  auto connection = DecodeConnection(ctx);
  if (!connection.ok()) return plain();  // the retry loop reports it
  const EngineInfo& c = engine_->info();
  const KvShape shape{c.layers, c.kv_heads, static_cast<int32_t>(prompt.size()), c.head_dim};
  Result<EnginePrefill> prefill = Status::Internal("unset");
  double prefill_end = 0;
  const LayerProducer produce = [&](const LayerReadyCallback& on_layer) {
    prefill = engine_->Prefill(prompt, on_layer);
    prefill_end = MonotonicSeconds();
    return prefill.status();
  };
  const uint64_t id = FirstTransferId(ctx.request->id, 1);
  Result<StreamResult> sent = Status::Internal("unset");
  if (device()) {
    auto profile = Profile::Parse(spec);
    if (!profile.ok()) return plain();
    sent = options_.device->StreamKvWhileProducing(**connection, *profile, options_.head_scores, shape, c.kv_dtype,
                                                   id, produce, engine_->stream());
  } else {
    auto encoder = Encoder(spec);
    if (!encoder.ok()) return plain();
    sent = StreamKvWhileProducing(**connection, **encoder, shape, c.kv_dtype, id, produce);
  }
  if (!prefill.ok()) {
    DropDecodeConnection(ctx);  // the transfer was aborted
    return prefill;
  }
  *streamed = std::move(sent);
  *prefill_end_out = prefill_end;
  return prefill;
}

ServeResponse PrefillWorker::Impl::Answer(const ServeRequest& request) {
  ServeResponse response = Serve(request);
  if (request.store_before_reply) FlushPoolStores();
  return response;
}

ServeResponse PrefillWorker::Impl::Serve(const ServeRequest& request) {
  // TTFT counts from the request's arrival: the wait for the requests
  // before it (one at a time) is part of what a client sees.
  const double start = MonotonicSeconds();
  ++queued_;
  std::unique_lock<std::mutex> lock(mu_);
  turn_.wait(lock, [this] { return returning_.load() == 0; });  // those taking it back go first
  --queued_;
  ServeResponse response;
  response.id = request.id;
  const double turn = MonotonicSeconds();
  response.timings.queue_seconds = turn - start;
  Status valid = ValidateRequest(request);
  if (!valid.ok()) {
    response.status = valid;
    return response;
  }
  RequestTimings& t = response.timings;
  const double kv_bytes =
      static_cast<double>(engine_->info().KvBytesPerToken()) * static_cast<double>(request.prompt.size());
  // N x M: this request's decode worker (bandwidth and load per peer).
  decode_->Choose(kv_bytes);
  PrefillContext ctx;
  ctx.request = &request;
  ctx.lock = &lock;
  // Under the lock at every return (SendAndGenerate takes it back).
  struct GiveBack {
    Impl* impl;
    PrefillContext* ctx;
    ~GiveBack() { impl->ReleaseDecodeConnection(*ctx); }
  } give_back{this, &ctx};
  t.kv_bytes = static_cast<uint64_t>(kv_bytes);

  // Prefix hit: fetch a stored encoding instead of recomputing, when faster.
  if (options_.pool != nullptr && request.use_pool) {
    auto hit = TryPoolHit(ctx, &t);
    if (!hit.ok()) {
      response.status = hit.status();
      return response;
    }
    if (*hit) {
      auto result = SendAndGenerate(ctx, nullptr, t.profile, /*pool_hit=*/true, &t);
      t.connection_wait_seconds = ctx.connection_wait_seconds;
      RecordPoolHit(ctx, &t);
      if (result.ok()) {
        hit_first_token_.Observe(static_cast<int>(ctx.suffix.size()), result->first_token_seconds);
        t.decode_kv_seconds = result->decode_kv_seconds;
        t.generation_seconds = result->generation_seconds;
        t.ttft_seconds = ctx.result_at_seconds - start - result->generation_seconds +
                         result->first_token_seconds;
        t.after_first_token_seconds = std::max(0.0, result->generation_seconds - result->first_token_seconds);
        response.tokens = std::move(result->tokens);
        return response;
      }
      // The stored entries could not be used: fall back to recomputing.
      t.hit_error = result.status().ToString();
      t.prefix_hit = false;
      t.prefix_chunks = 0;
      t.recomputed = true;
    }
  }

  auto chosen = Choose(request, kv_bytes);
  if (!chosen.ok()) {
    response.status = chosen.status();
    return response;
  }
  t.profile = chosen->spec;
  t.bandwidth_estimate = chosen->bandwidth;
  if (const auto& link = options_.decode_connection.shared_link; link != nullptr) {
    t.link_bytes_per_second = link->rate();
    t.link_transfers = link->transfers() + 1;  // this one is about to begin
  }
  t.explored = chosen->decision.explored;
  t.feasible = chosen->decision.feasible;
  t.predicted_kv_seconds = chosen->decision.predicted_seconds;

  const double prefill_start = MonotonicSeconds();
  std::optional<Result<StreamResult>> streamed;
  double prefill_end = 0;
  auto prefill = RunPrefill(ctx, chosen->spec, StreamPays(request, *chosen, kv_bytes), &streamed, &prefill_end);
  t.streamed = streamed.has_value();
  if (!prefill.ok()) {
    response.status = prefill.status().WithContext("prefill");
    return response;
  }
  t.prefill_seconds = prefill_end - prefill_start;
  prefill_time_.Observe(static_cast<int>(request.prompt.size()), t.prefill_seconds);
  ctx.kv_tokens = request.prompt;
  ctx.suffix.clear();  // a failed prefix hit may have split the prompt
  ctx.last_logits = std::move(prefill->last_logits);
  std::shared_ptr<const EngineKv> kv = std::move(prefill->kv);

  auto result = SendAndGenerate(ctx, kv.get(), chosen->spec, /*pool_hit=*/false, &t,
                                streamed ? &*streamed : nullptr);
  t.connection_wait_seconds = ctx.connection_wait_seconds;
  if (!result.ok()) {
    response.status = result.status();
    return response;
  }
  t.decode_kv_seconds = result->decode_kv_seconds;
  if (chosen->adaptive && t.kv_seconds > 0) {
    // Bandit feedback over the connection: the KV time ends at the decode
    // worker's ack, the codec time includes its decode of every record.
    // A frame streamed while the prefill produced it was encoded and
    // decoded beside the prefill (on a GPU, between its layers and in the
    // time slices of whatever else runs there): that codec time is no
    // serial cost and would teach the codec-drift model a slowdown the KV
    // time never paid; the bandit learns the KV time itself.
    Observation observation;
    observation.observed_seconds = t.kv_seconds;
    const bool beside_prefill = streamed && streamed->ok() && t.attempts == 1;
    observation.codec_seconds = beside_prefill ? 0.0 : t.encode_seconds + t.decode_kv_seconds;
    observation.now_seconds = MonotonicSeconds();
    // The link this transfer measured (the estimator has its sample now).
    observation.bandwidth = estimator_.Estimate(decode_->key(ctx.lease.peer));
    (void)controller_->Observe(chosen->decision, observation);
    if (chosen->decision.action == ControllerAction::kSend)
      frame_sizes_->Observe(chosen->decision.profile, static_cast<int>(request.prompt.size()),
                            t.frame_bytes);
  }
  t.generation_seconds = result->generation_seconds;
  t.ttft_seconds = ctx.result_at_seconds - start - result->generation_seconds + result->first_token_seconds;
  t.after_first_token_seconds = std::max(0.0, result->generation_seconds - result->first_token_seconds);
  response.tokens = std::move(result->tokens);
  if (options_.pool != nullptr && request.use_pool) QueuePoolStores(request, std::move(kv), chosen->spec);
  return response;
}

void PrefillWorker::Impl::SetLinkRate(double bytes_per_second) {
  std::lock_guard<std::mutex> lock(mu_);
  link_rate_ = bytes_per_second;
  // A link shared with other workers changes for all of them.
  if (options_.decode_connection.shared_link && bytes_per_second > 0)
    options_.decode_connection.shared_link->SetRate(bytes_per_second);
  decode_->CloseAll();
}

double PrefillWorker::Impl::BandwidthEstimate() const {
  return estimator_.Estimate(decode_->current_key());
}

Result<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(Transport* transport, ServingEngine* engine,
                                                            ProfileTable table, PrefillWorkerOptions options) {
  return Start(transport, engine, nullptr, std::move(table), std::move(options));
}

Result<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(Transport* transport, const Model* model,
                                                            ProfileTable table, PrefillWorkerOptions options) {
  if (model == nullptr) return Status::InvalidArgument("prefill worker needs a model");
  std::unique_ptr<ServingEngine> engine = NewRuntimeEngine(model);
  ServingEngine* raw = engine.get();
  return Start(transport, raw, std::move(engine), std::move(table), std::move(options));
}

Result<std::unique_ptr<PrefillWorker>> PrefillWorker::Start(Transport* transport, ServingEngine* engine,
                                                            std::unique_ptr<ServingEngine> owned, ProfileTable table,
                                                            PrefillWorkerOptions options) {
  if (engine == nullptr) return Status::InvalidArgument("prefill worker needs an engine");
  auto impl = std::make_unique<Impl>(transport, engine, std::move(owned), std::move(options));
  KVSERVE_RETURN_IF_ERROR(impl->Start(std::move(table)));
  return std::unique_ptr<PrefillWorker>(new PrefillWorker(std::move(impl)));
}

PrefillWorker::PrefillWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrefillWorker::~PrefillWorker() { Stop(); }
std::string PrefillWorker::address() const { return impl_->server_->address(); }
void PrefillWorker::Stop() {
  impl_->stopping_.store(true);
  impl_->server_->Stop();
}
ServeResponse PrefillWorker::Serve(const ServeRequest& request) { return impl_->Answer(request); }
void PrefillWorker::StorePending() { impl_->FlushPoolStores(); }
void PrefillWorker::SetLinkRate(double bytes_per_second) { impl_->SetLinkRate(bytes_per_second); }
double PrefillWorker::BandwidthEstimate() const { return impl_->BandwidthEstimate(); }
const ProfileTable& PrefillWorker::table() const { return impl_->controller_->table(); }
int PrefillWorker::queued() const { return impl_->queued_.load(); }

}  // namespace kvserve
