// Copyright kvserve authors. The decode worker: receives streamed frames
// through the connector (kvserve/connector.h), which decodes each chunk
// record as it arrives, and on a GENERATE concatenates
// the KV of the frames it names along tokens (one frame on the normal path;
// one per pool chunk when the prefill worker forwards a prefix hit), imports
// it into the runtime, runs the rest of the prompt and generates
// (docs/e2e.md §Decode worker).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/serve.h"
#include "transport/connection_server.h"
#include "serve/serve_protocol.h"

namespace kvserve {
namespace {

// A complete, verified frame held until the GENERATE that names it.
struct HeldFrame {
  uint64_t transfer_id = 0;
  KvCache kv;
  std::vector<uint8_t> keep_mask;  // [layer][kind][head][token], 0 = pruned
  double decode_seconds = 0;
};

std::string IdList(const std::vector<uint64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > 8) out += ",... (" + std::to_string(ids.size()) + ")";
  return out;
}

// The KV of `frames` (same layers, heads, dims and dtype; each contiguous)
// concatenated along tokens, and their keep masks concatenated per (layer,
// kind, head) into `*keep_mask` ([layer][kind][head][token]; left empty
// when no frame carries one). InvalidArgument when the frames differ in
// shape or dtype.
Result<KvCache> Concatenate(const std::vector<HeldFrame>& frames, std::vector<uint8_t>* keep_mask) {
  const KvShape& first = frames.front().kv.shape();
  const DType dtype = frames.front().kv.dtype();
  KvShape shape = first;
  shape.tokens = 0;
  bool any_mask = false;
  for (const HeldFrame& f : frames) {
    const KvShape& s = f.kv.shape();
    if (s.layers != first.layers || s.kv_heads != first.kv_heads || s.head_dim != first.head_dim ||
        f.kv.dtype() != dtype)
      return Status::InvalidArgument("transfer " + std::to_string(f.transfer_id) +
                                     ": frame shape or dtype differs from the first frame's");
    shape.tokens += s.tokens;
    any_mask = any_mask || !f.keep_mask.empty();
  }
  KvCache out(dtype, shape);
  MutableKvView dst = out.mutable_view();
  const size_t element = DTypeSize(dtype);
  const size_t slots = static_cast<size_t>(shape.layers) * 2 * shape.kv_heads;
  if (any_mask) keep_mask->assign(slots * shape.tokens, 1);
  int offset = 0;
  for (const HeldFrame& f : frames) {
    const KvView src = f.kv.view();
    const int tokens = src.shape.tokens;
    // Contiguous caches: the tokens x dims of one (layer, kind, head) are
    // one run of bytes in both.
    const size_t run = static_cast<size_t>(tokens) * shape.head_dim * element;
    for (int l = 0; l < shape.layers; ++l)
      for (int kind = 0; kind < 2; ++kind)
        for (int h = 0; h < shape.kv_heads; ++h) {
          std::memcpy(dst.At(l, kind, h, offset, 0), src.At(l, kind, h, 0, 0), run);
          if (f.keep_mask.empty()) continue;
          const size_t slot = (static_cast<size_t>(l) * 2 + kind) * shape.kv_heads + h;
          std::copy_n(f.keep_mask.begin() + slot * tokens, tokens,
                      keep_mask->begin() + slot * shape.tokens + offset);
        }
    offset += tokens;
  }
  return out;
}

}  // namespace

class DecodeWorker::Impl {
 public:
  Impl(const Model* model, DecodeWorkerOptions options)
      : model_(model), options_(std::move(options)) {}

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
    std::unique_ptr<DecoderContext> decoder;
    KvCache kv;
    std::vector<uint8_t> keep_mask;
    uint64_t transfer_id = 0;
    std::vector<HeldFrame> held;
    uint64_t held_bytes = 0;
  };

  static void DropHeld(Session& s) {
    s.held.clear();
    s.held_bytes = 0;
  }

  // Where a frame whose header arrived is decoded: s.kv, allocated once the
  // header fits the model and the limits (an error refuses the frame).
  Result<KvDestination> OnHeader(Session& s, uint64_t transfer_id, const FrameInfo& info) {
    s.transfer_id = transfer_id;
    s.kv = KvCache();
    const ModelConfig& c = model_->config();
    if (info.shape.layers != c.layers || info.shape.kv_heads != c.kv_heads ||
        info.shape.head_dim != c.head_dim || info.shape.tokens <= 0)
      return Status::InvalidArgument("frame shape " + std::to_string(info.shape.layers) + "x" +
                                     std::to_string(info.shape.kv_heads) + "x" +
                                     std::to_string(info.shape.tokens) + "x" +
                                     std::to_string(info.shape.head_dim) +
                                     " does not fit the decode worker's model");
    if (!s.held.empty() && info.dtype != s.held.front().kv.dtype())
      return Status::InvalidArgument("frame dtype differs from the frames held for the request");
    const uint64_t bytes = static_cast<uint64_t>(info.shape.NumElements()) * DTypeSize(info.dtype);
    if (bytes > options_.max_kv_bytes || s.held_bytes > options_.max_kv_bytes - bytes)
      return Status::ResourceExhausted("frame declares " + std::to_string(bytes) + " KV bytes (" +
                                       std::to_string(s.held_bytes) +
                                       " already held), above the decode worker's limit");
    // KvCache memory comes from calloc: the OS commits its pages as records
    // are decoded into it, so a header alone costs only its own bytes, not
    // the KV it declares.
    s.kv = KvCache(info.dtype, info.shape);
    return KvDestination(s.kv.mutable_view());
  }

  void ServeConnection(Connection& connection) {
    Session s;
    auto decoder = DecoderContext::Create({.threads = options_.decode_threads});
    if (!decoder.ok()) {
      connection.Fail(decoder.status());
      return;
    }
    s.decoder = std::move(*decoder);
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
      if (message.type == kMsgFrameBegin) {
        bool refused = false;
        auto frame = ReceiveKvFrom(connection, message, *s.decoder, destination,
                                   {.keep_mask = &s.keep_mask, .refused = &refused});
        if (!frame.ok() && !refused) return;  // connection broken, peer gone, or aborted transfer
        if (!frame.ok()) {
          // Refused (and acknowledged as such) or incomplete: the sender
          // still sends the request's GENERATE, which no longer matches the
          // frames held and is answered with a refusal.
          DropHeld(s);
          s.kv = KvCache();
          refused_frames_.fetch_add(1);
          continue;
        }
        HeldFrame held;
        held.transfer_id = s.transfer_id;
        held.kv = std::move(s.kv);
        held.keep_mask = std::move(s.keep_mask);
        held.decode_seconds = frame->decode_seconds;
        s.held_bytes += static_cast<uint64_t>(held.kv.view().LogicalBytes());
        s.held.push_back(std::move(held));
        s.kv = KvCache();
        s.keep_mask.clear();
        continue;
      }
      if (message.type != kMsgServeGenerate) {
        connection.Fail(Status::Corruption("expected a frame or a generate message, got type " +
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
    std::vector<uint8_t> concatenated_mask;
    KvCache concatenated;
    const KvCache* kv_cache = &s.held.front().kv;
    const std::vector<uint8_t>* keep_mask = &s.held.front().keep_mask;
    if (s.held.size() > 1) {
      auto joined = Concatenate(s.held, &concatenated_mask);
      if (!joined.ok()) {
        result.status = joined.status();
        return result;
      }
      concatenated = std::move(*joined);
      kv_cache = &concatenated;
      keep_mask = &concatenated_mask;
    }
    auto kv = KvState::FromView(kv_cache->view(), generate->prompt);
    if (!kv.ok()) {
      result.status = kv.status().WithContext("importing the KV");
      return result;
    }
    if (!keep_mask->empty() &&
        std::find(keep_mask->begin(), keep_mask->end(), 0) != keep_mask->end()) {
      // Pruned tokens (duo): hide them from attention, per head ([layer][K][head][token]).
      const KvShape& shape = kv_cache->shape();
      for (int l = 0; l < shape.layers; ++l)
        for (int h = 0; h < shape.kv_heads; ++h) {
          const size_t offset = ((static_cast<size_t>(l) * 2) * shape.kv_heads + h) * shape.tokens;
          Status st = kv->SetKeepMask(
              l, h, std::span<const uint8_t>(*keep_mask).subspan(offset, shape.tokens));
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
  std::unique_ptr<transport::ConnectionServer> server_;
  // Set before server_->Stop(); the handlers poll this, not server_, which a
  // handler may run before Start's assignment to server_ has completed.
  std::atomic<bool> stopping_{false};
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
void DecodeWorker::Stop() {
  impl_->stopping_.store(true);
  impl_->server_->Stop();
}
int64_t DecodeWorker::completed() const { return impl_->completed_.load(); }
int64_t DecodeWorker::refused_frames() const { return impl_->refused_frames_.load(); }
int64_t DecodeWorker::auth_failures() const { return impl_->server_->auth_failures(); }

}  // namespace kvserve
