// Copyright kvserve authors. The decode worker: receives a streamed frame,
// decodes each chunk record as it arrives, imports the KV into the runtime
// and generates (docs/e2e.md §Decode worker).
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/serve.h"
#include "serve/connection_server.h"
#include "serve/serve_protocol.h"

namespace kvserve {

class DecodeWorker::Impl {
 public:
  Impl(const Model* model, DecodeWorkerOptions options)
      : model_(model), options_(std::move(options)) {}

  Status Start(Transport* transport) {
    KVSERVE_ASSIGN_OR_RETURN(
        server_, serve::ConnectionServer::Start(transport, options_.listen_address,
                                                options_.connection, options_.max_connections,
                                                [this](Connection& c) { ServeConnection(c); }));
    return Status::Ok();
  }

  // The state of one connection: the frame being (or last) received.
  struct Session {
    std::unique_ptr<DecoderContext> decoder;
    KvCache kv;
    std::vector<uint8_t> keep_mask;
    uint64_t transfer_id = 0;
    uint64_t records = 0;
    double decode_seconds = 0;
    bool complete = false;      // a whole, verified frame is held
    bool refused = false;       // the handler refused the last frame
  };

  Status OnHeader(Session& s, uint64_t transfer_id, std::span<const uint8_t> header) {
    s.complete = false;
    s.transfer_id = transfer_id;
    s.records = 0;
    s.decode_seconds = 0;
    s.keep_mask.clear();
    KVSERVE_ASSIGN_OR_RETURN(size_t used, s.decoder->Start(header));
    if (used != header.size()) return Status::Corruption("frame header: trailing bytes");
    const FrameInfo& info = s.decoder->info();
    const ModelConfig& c = model_->config();
    if (info.shape.layers != c.layers || info.shape.kv_heads != c.kv_heads ||
        info.shape.head_dim != c.head_dim || info.shape.tokens <= 0)
      return Status::InvalidArgument("frame shape " + std::to_string(info.shape.layers) + "x" +
                                     std::to_string(info.shape.kv_heads) + "x" +
                                     std::to_string(info.shape.tokens) + "x" +
                                     std::to_string(info.shape.head_dim) +
                                     " does not fit the decode worker's model");
    const uint64_t bytes = static_cast<uint64_t>(info.shape.NumElements()) * DTypeSize(info.dtype);
    if (bytes > options_.max_kv_bytes)
      return Status::ResourceExhausted("frame declares " + std::to_string(bytes) +
                                       " KV bytes, above the decode worker's limit");
    s.kv = KvCache(info.dtype, info.shape);
    return Status::Ok();
  }

  Status OnRecord(Session& s, std::span<const uint8_t> record) {
    const double start = MonotonicSeconds();
    KVSERVE_ASSIGN_OR_RETURN(size_t used,
                             s.decoder->DecodeRecord(record, s.kv.mutable_view(), &s.keep_mask));
    s.decode_seconds += MonotonicSeconds() - start;
    if (used != record.size()) return Status::Corruption("chunk record: trailing bytes");
    ++s.records;
    return Status::Ok();
  }

  void ServeConnection(Connection& connection) {
    Session s;
    auto decoder = DecoderContext::Create({.threads = options_.decode_threads});
    if (!decoder.ok()) {
      connection.Fail(decoder.status());
      return;
    }
    s.decoder = std::move(*decoder);
    FrameHandler handler;
    handler.on_header = [&](uint64_t id, std::span<const uint8_t> header) {
      Status st = OnHeader(s, id, header);
      if (!st.ok()) s.refused = true;
      return st;
    };
    handler.on_record = [&](std::span<const uint8_t> record) {
      Status st = OnRecord(s, record);
      if (!st.ok()) s.refused = true;
      return st;
    };
    Message message;
    while (!server_->stopping()) {
      // A frame, or a GENERATE for the frame just received.
      s.refused = false;
      const double wait_start = MonotonicSeconds();
      auto frame = ReceiveFrame(connection, handler, /*timeout_seconds=*/0.5);
      if (!frame.ok()) {
        // An idle timeout leaves the connection usable; a broken connection
        // repeats its error at once.
        if (frame.status().code() == StatusCode::kTimeout && !s.refused &&
            MonotonicSeconds() - wait_start > 0.25)
          continue;
        if (!s.refused) return;  // connection broken, peer gone, or aborted transfer
        // Refused (and acknowledged as such): the sender still sends the
        // frame's GENERATE, which is answered with the refusal below.
        s.complete = false;
        refused_frames_.fetch_add(1);
      } else {
        s.complete = s.records == s.decoder->info().chunk_count;
        if (!s.complete) refused_frames_.fetch_add(1);
      }
      Status st = connection.Receive(&message);
      if (!st.ok()) return;
      if (message.type != kMsgServeGenerate) {
        connection.Fail(Status::Corruption("expected a generate message, got type " +
                                           std::to_string(message.type)));
        return;
      }
      serve::ResultMessage result = Generate(s, message);
      if (!connection.Send(kMsgServeResult, 0, serve::EncodeResult(result)).ok()) return;
      if (result.status.ok()) completed_.fetch_add(1);
      s.complete = false;
      s.kv = KvCache();
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
    result.decode_kv_seconds = s.decode_seconds;
    if (!s.complete || generate->transfer_id != s.transfer_id) {
      result.status = Status::Corruption(
          "request " + std::to_string(generate->request_id) + ": no complete verified frame for transfer " +
          std::to_string(generate->transfer_id) + " (received " + std::to_string(s.records) +
          " records); refusing to generate from it");
      return result;
    }
    const double start = MonotonicSeconds();
    auto kv = KvState::FromView(s.kv.view(), generate->prompt);
    if (!kv.ok()) {
      result.status = kv.status().WithContext("importing the KV");
      return result;
    }
    if (!s.keep_mask.empty() &&
        std::find(s.keep_mask.begin(), s.keep_mask.end(), 0) != s.keep_mask.end()) {
      // Pruned tokens (duo): hide them from attention, per head ([layer][K][head][token]).
      const KvShape& shape = s.kv.shape();
      for (int l = 0; l < shape.layers; ++l)
        for (int h = 0; h < shape.kv_heads; ++h) {
          const size_t offset = ((static_cast<size_t>(l) * 2) * shape.kv_heads + h) * shape.tokens;
          Status st = kv->SetKeepMask(
              l, h, std::span<const uint8_t>(s.keep_mask).subspan(offset, shape.tokens));
          if (!st.ok()) {
            result.status = st;
            return result;
          }
        }
    }
    std::vector<float> logits = std::move(generate->last_logits);
    if (!generate->suffix.empty()) {
      auto suffix_logits = model_->Decode(&*kv, generate->suffix);
      if (!suffix_logits.ok()) {
        result.status = suffix_logits.status().WithContext("running the prompt suffix");
        return result;
      }
      logits = std::move(*suffix_logits);
    }
    if (logits.size() != static_cast<size_t>(model_->config().vocab_size)) {
      result.status = Status::InvalidArgument("generate message carries " +
                                              std::to_string(logits.size()) +
                                              " logits, the model has a vocabulary of " +
                                              std::to_string(model_->config().vocab_size));
      return result;
    }
    result.first_token_seconds = MonotonicSeconds() - start;
    Sampler sampler(generate->sampling);
    auto tokens = kvserve::Generate(*model_, &*kv, logits,
                                    generate->max_new_tokens, &sampler, generate->stop_at_eos);
    result.generation_seconds = MonotonicSeconds() - start;
    if (!tokens.ok()) {
      result.status = tokens.status();
      return result;
    }
    result.tokens = std::move(*tokens);
    return result;
  }

  const Model* model_;
  DecodeWorkerOptions options_;
  std::unique_ptr<serve::ConnectionServer> server_;
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> refused_frames_{0};
};

Result<std::unique_ptr<DecodeWorker>> DecodeWorker::Start(Transport* transport, const Model* model,
                                                          DecodeWorkerOptions options) {
  if (model == nullptr) return Status::InvalidArgument("decode worker needs a model");
  auto impl = std::make_unique<Impl>(model, std::move(options));
  KVSERVE_RETURN_IF_ERROR(impl->Start(transport));
  return std::unique_ptr<DecodeWorker>(new DecodeWorker(std::move(impl)));
}

DecodeWorker::DecodeWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DecodeWorker::~DecodeWorker() { Stop(); }
std::string DecodeWorker::address() const { return impl_->server_->address(); }
void DecodeWorker::Stop() { impl_->server_->Stop(); }
int64_t DecodeWorker::completed() const { return impl_->completed_.load(); }
int64_t DecodeWorker::refused_frames() const { return impl_->refused_frames_.load(); }
int64_t DecodeWorker::auth_failures() const { return impl_->server_->auth_failures(); }

}  // namespace kvserve
