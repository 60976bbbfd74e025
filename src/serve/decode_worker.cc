// Copyright kvserve authors. The decode worker: receives streamed frames
// through the connector (kvserve/connector.h; its device paths for an
// engine whose KV is on a GPU), which decodes each chunk record (or window of
// records) as it arrives into KV the engine allocated, and on a GENERATE
// hands the engine the KV of the frames it names (one frame on the normal
// path; one per pool chunk when the prefill worker forwards a prefix hit)
// to run the rest of the prompt and generate (docs/e2e.md §Decode worker).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/engine.h"
#include "kvserve/pool.h"
#include "kvserve/serve.h"
#include "transport/connection_server.h"
#include "serve/serve_protocol.h"

namespace kvserve {
namespace {

// A complete, verified frame held until the GENERATE that names it.
struct HeldFrame {
  uint64_t transfer_id = 0;
  std::unique_ptr<EngineKv> kv;
  std::vector<uint8_t> keep_mask;  // [layer][kind][head][token], 0 = pruned
  double decode_seconds = 0;
};

std::string IdList(const std::vector<uint64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > 8) out += ",... (" + std::to_string(ids.size()) + ")";
  return out;
}

}  // namespace

class DecodeWorker::Impl {
 public:
  Impl(ServingEngine* engine, std::unique_ptr<ServingEngine> owned, DecodeWorkerOptions options)
      : engine_(engine), owned_(std::move(owned)), options_(std::move(options)) {}

  Status Start(Transport* transport) {
    KVSERVE_ASSIGN_OR_RETURN(
        server_, transport::ConnectionServer::Start(transport, options_.listen_address,
                                                    options_.connection, options_.admission,
                                                    [this](Connection& c) { ServeConnection(c); }));
    return Status::Ok();
  }

  // The state of one connection: the frame being received, and the
  // complete, verified frames received since the last GENERATE, in arrival
  // order (their KV bytes in total bounded by max_kv_bytes).
  struct Session {
    std::unique_ptr<DecoderContext> decoder;  // host engines
    std::unique_ptr<EngineKv> kv;
    std::vector<uint8_t> keep_mask;
    uint64_t transfer_id = 0;
    std::vector<HeldFrame> held;
    uint64_t held_bytes = 0;
  };

  static void DropHeld(Session& s) {
    s.held.clear();
    s.held_bytes = 0;
  }

  // Where a frame whose header arrived is decoded: KV the engine allocates
  // once the header fits the model and the limits (an error refuses the
  // frame).
  Result<KvDestination> OnHeader(Session& s, uint64_t transfer_id, const FrameInfo& info) {
    s.transfer_id = transfer_id;
    s.kv.reset();
    const EngineInfo& c = engine_->info();
    if (info.shape.layers != c.layers || info.shape.kv_heads != c.kv_heads ||
        info.shape.head_dim != c.head_dim || info.shape.tokens <= 0)
      return Status::InvalidArgument("frame shape " + std::to_string(info.shape.layers) + "x" +
                                     std::to_string(info.shape.kv_heads) + "x" +
                                     std::to_string(info.shape.tokens) + "x" +
                                     std::to_string(info.shape.head_dim) +
                                     " does not fit the decode worker's model");
    if (!s.held.empty() && info.dtype != s.held.front().kv->dtype())
      return Status::InvalidArgument("frame dtype differs from the frames held for the request");
    const uint64_t bytes = static_cast<uint64_t>(info.shape.NumElements()) * DTypeSize(info.dtype);
    if (bytes > options_.max_kv_bytes || s.held_bytes > options_.max_kv_bytes - bytes)
      return Status::ResourceExhausted("frame declares " + std::to_string(bytes) + " KV bytes (" +
                                       std::to_string(s.held_bytes) +
                                       " already held), above the decode worker's limit");
    KVSERVE_ASSIGN_OR_RETURN(s.kv, engine_->AllocateKv(info.shape, info.dtype));
    return s.kv->destination();
  }

  // Receives the frame `source` gives (the connection's, or a pool
  // chunk's) into the engine's KV: through the device connector for a
  // device engine, the host connector otherwise.
  Result<KvReceiveResult> Receive(Session& s, const FrameSource& source, const KvDestinationCallback& destination,
                                  bool* refused) {
    const KvReceiveOptions options{.keep_mask = &s.keep_mask, .refused = refused};
    if (engine_->info().device >= 0)
      return options_.device->ReceiveKvWith(source, destination, options, engine_->stream());
    return ReceiveKvWith(source, *s.decoder, destination, options);
  }

  // Keeps the frame just received (s.kv) for the next GENERATE.
  static void Hold(Session& s, const KvReceiveResult& frame) {
    HeldFrame held;
    held.transfer_id = s.transfer_id;
    held.kv = std::move(s.kv);
    held.keep_mask = std::move(s.keep_mask);
    held.decode_seconds = frame.decode_seconds;
    s.held_bytes += static_cast<uint64_t>(held.kv->shape().NumElements()) * DTypeSize(held.kv->dtype());
    s.held.push_back(std::move(held));
    s.keep_mask.clear();
  }

  // A POOL_FETCH: the named prefix chunks, fetched from the pool in one
  // request and decoded into the engine's KV as their records arrive, held
  // for the GENERATE that follows. Stops at the first chunk the pool no
  // longer has; any other error drops what this fetch got.
  serve::PoolFetchedMessage FetchFromPool(Session& s, const Message& message,
                                          const KvDestinationCallback& destination) {
    serve::PoolFetchedMessage out;
    auto fetch = serve::DecodePoolFetch(message.payload);
    if (!fetch.ok()) {
      out.status = fetch.status();
      return out;
    }
    out.request_id = fetch->request_id;
    if (options_.pool == nullptr) {
      out.status = Status::NotSupported("this decode worker has no pool; relay the chunks");
      return out;
    }
    DropHeld(s);  // a request's frames start here
    const double start = MonotonicSeconds();
    // In one pool request: the next chunk's bytes flow while this one's
    // last windows decode.
    options_.pool->GetRecordsInOrder(fetch->keys, [&](size_t i, const PoolFrameReader& read) {
      const uint64_t id = fetch->first_transfer_id + i;
      s.transfer_id = 0;
      s.kv.reset();
      bool refused = false;
      const double began = MonotonicSeconds();
      auto frame = Receive(s, PoolFrameSource(read, id), destination, &refused);
      if (!frame.ok()) {
        // Gone before its header (evicted since the lookup): the hit ends
        // with the chunks before it.
        if (frame.status().code() == StatusCode::kNotFound && s.transfer_id != id) return false;
        DropHeld(s);
        s.kv.reset();
        out.status = frame.status().WithContext("pool chunk " + std::to_string(i));
        // A pool that failed mid-chunk: worth another attempt.
        if (!refused && !serve::IsRetryable(out.status))
          out.status = Status::Unavailable(out.status.ToString());
        return false;
      }
      Hold(s, *frame);
      out.frame_bytes += frame->transfer.frame_bytes;
      out.decode_seconds += frame->decode_seconds;
      out.wait_seconds += std::max(0.0, MonotonicSeconds() - began - frame->transfer.elapsed_seconds);
      return true;
    });
    if (!out.status.ok()) return out;
    out.chunks = s.held.size();
    out.seconds = MonotonicSeconds() - start;
    return out;
  }

  void ServeConnection(Connection& connection) {
    Session s;
    if (engine_->info().device < 0) {
      auto decoder = DecoderContext::Create({.threads = options_.decode_threads});
      if (!decoder.ok()) {
        connection.Fail(decoder.status());
        return;
      }
      s.decoder = std::move(*decoder);
    }
    const KvDestinationCallback destination = [&](uint64_t id, const FrameInfo& info) {
      return OnHeader(s, id, info);
    };
    Message message;
    while (!stopping_.load()) {
      // A frame, or the GENERATE for the frames just received.
      const double wait_start = MonotonicSeconds();
      Status st = connection.Receive(&message, /*timeout_seconds=*/0.5);
      if (!st.ok()) {
        // An idle timeout leaves the connection usable; a broken connection
        // repeats its error at once.
        if (st.code() == StatusCode::kTimeout && MonotonicSeconds() - wait_start > 0.25) continue;
        return;
      }
      if (message.type == kMsgServePoolFetch) {
        const serve::PoolFetchedMessage fetched = FetchFromPool(s, message, destination);
        if (!connection.Send(kMsgServePoolFetched, 0, serve::EncodePoolFetched(fetched)).ok()) return;
        continue;
      }
      if (message.type == kMsgFrameBegin) {
        bool refused = false;
        const FrameSource source = [&](const FrameHandler& h) { return ReceiveFrameFrom(connection, message, h); };
        auto frame = Receive(s, source, destination, &refused);
        if (!frame.ok() && !refused) return;  // connection broken, peer gone, or aborted transfer
        if (!frame.ok()) {
          // Refused (and acknowledged as such) or incomplete: the sender
          // still sends the request's GENERATE, which no longer matches the
          // frames held and is answered with a refusal.
          DropHeld(s);
          s.kv.reset();
          refused_frames_.fetch_add(1);
          continue;
        }
        Hold(s, *frame);
        continue;
      }
      if (message.type != kMsgServeGenerate) {
        connection.Fail(Status::Corruption("expected a frame, a pool fetch or a generate message, got type " +
                                           std::to_string(message.type)));
        return;
      }
      serve::ResultMessage result = Generate(s, message);
      DropHeld(s);
      // Counted before the reply goes out, so a client that has its reply
      // also sees it in completed().
      if (result.status.ok()) completed_.fetch_add(1);
      if (!connection.Send(kMsgServeResult, 0, serve::EncodeResult(result)).ok()) return;
    }
  }

  serve::ResultMessage Generate(Session& s, const Message& message) {
    serve::ResultMessage result;
    auto generate = serve::DecodeGenerate(message.payload);
    if (!generate.ok()) {
      result.status = generate.status();
      return result;
    }
    result.request_id = generate->request_id;
    bool match = generate->transfer_ids.size() == s.held.size();
    for (size_t i = 0; match && i < s.held.size(); ++i) {
      match = generate->transfer_ids[i] == s.held[i].transfer_id;
      result.decode_kv_seconds += s.held[i].decode_seconds;
    }
    if (!match) {
      std::vector<uint64_t> held_ids;
      for (const HeldFrame& f : s.held) held_ids.push_back(f.transfer_id);
      result.status = Status::Corruption(
          "request " + std::to_string(generate->request_id) +
          ": no complete verified frame for transfers " + IdList(generate->transfer_ids) +
          " (holding " + std::to_string(s.held.size()) + " verified frames: " + IdList(held_ids) +
          "); refusing to generate from them");
      return result;
    }
    const double start = MonotonicSeconds();
    std::vector<std::unique_ptr<EngineKv>> parts;
    std::vector<std::vector<uint8_t>> masks;
    for (HeldFrame& f : s.held) {
      parts.push_back(std::move(f.kv));
      masks.push_back(std::move(f.keep_mask));
    }
    EngineGenerate request;
    request.prompt = std::move(generate->prompt);
    request.suffix = std::move(generate->suffix);
    request.last_logits = std::move(generate->last_logits);
    request.max_new_tokens = generate->max_new_tokens;
    request.sampling = generate->sampling;
    request.stop_at_eos = generate->stop_at_eos;
    auto tokens = engine_->Generate(std::move(parts), masks, request);
    result.generation_seconds = MonotonicSeconds() - start;
    if (!tokens.ok()) {
      result.status = tokens.status();
      return result;
    }
    result.first_token_seconds = tokens->first_token_seconds;
    result.tokens = std::move(tokens->tokens);
    return result;
  }

  ServingEngine* engine_;
  std::unique_ptr<ServingEngine> owned_;  // the runtime engine of a Model-based worker
  DecodeWorkerOptions options_;
  std::unique_ptr<transport::ConnectionServer> server_;
  // Set before server_->Stop(); the handlers poll this, not server_, which a
  // handler may run before Start's assignment to server_ has completed.
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> refused_frames_{0};
};

Result<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(Transport* transport, ServingEngine* engine,
                                                          DecodeWorkerOptions options) {
  return Start(transport, engine, nullptr, std::move(options));
}

Result<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(Transport* transport, const Model* model,
                                                          DecodeWorkerOptions options) {
  if (model == nullptr) return Status::InvalidArgument("decode worker needs a model");
  std::unique_ptr<ServingEngine> engine = NewRuntimeEngine(model);
  ServingEngine* raw = engine.get();
  return Start(transport, raw, std::move(engine), std::move(options));
}

Result<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(Transport* transport, ServingEngine* engine,
                                                          std::unique_ptr<ServingEngine> owned,
                                                          DecodeWorkerOptions options) {
  if (engine == nullptr) return Status::InvalidArgument("decode worker needs an engine");
  if (engine->info().device >= 0 && options.device == nullptr)
    return Status::InvalidArgument("decode worker: the engine's KV is on CUDA device " +
                                   std::to_string(engine->info().device) +
                                   "; DecodeWorkerOptions::device (a DeviceConnector) is needed");
  auto impl = std::make_unique<Impl>(engine, std::move(owned), std::move(options));
  KVSERVE_RETURN_IF_ERROR(impl->Start(transport));
  return std::unique_ptr<DecodeWorker>(new DecodeWorker(std::move(impl)));
}

DecodeWorker::DecodeWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecodeWorker::~DecodeWorker() { Stop(); }
std::string DecodeWorker::address() const { return impl_->server_->address(); }
void DecodeWorker::Stop() {
  impl_->stopping_.store(true);
  impl_->server_->Stop();
}
int64_t DecodeWorker::completed() const { return impl_->completed_.load(); }
int64_t DecodeWorker::refused_frames() const { return impl_->refused_frames_.load(); }
int64_t DecodeWorker::auth_failures() const { return impl_->server_->auth_failures(); }

}  // namespace kvserve
