// Copyright kvserve authors. `kvserve pool serve`: a KvPool served over the
// authenticated transport, one thread per client connection, admitted by
// the shared ConnectionServer (docs/transport.md §3, admission).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/pool.h"
#include "pool/frame_units.h"
#include "pool/pool_wire.h"
#include "transport/connection_server.h"

namespace kvserve {

class PoolServer::Impl {
 public:
  Impl(Transport* transport, KvPool* pool, PoolServerOptions options)
      : transport_(transport), pool_(pool), options_(std::move(options)) {}

  ~Impl() { Stop(); }

  Status Start() {
    KVSERVE_ASSIGN_OR_RETURN(
        server_, transport::ConnectionServer::Start(transport_, options_.listen_address,
                                                    options_.connection, options_.admission,
                                                    [this](Connection& c) { Serve(c); }));
    address_ = server_->address();
    return Status::Ok();
  }

  void Stop() {
    stopping_.store(true);
    if (server_) server_->Stop();
  }

  void Serve(Connection& c) {
    Message request;
    std::vector<uint8_t> reply, body;
    std::shared_ptr<const std::vector<uint8_t>> value;  // a Get's: the pool's own bytes, no copy
    while (!stopping_.load()) {
      Status s = c.Receive(&request, options_.idle_timeout_seconds);
      if (!s.ok()) return;  // idle, closed or broken: drop the client
      if (request.type == pool::kMsgGetFrame || request.type == pool::kMsgGetFrames) {
        if (!ServeFrames(c, request)) return;
        continue;
      }
      body.clear();
      value.reset();
      const Status result = Handle(request, &body, &value);
      pool::EncodeReplyHeader(result, &reply);
      std::span<const uint8_t> parts[3] = {reply, body, {}};
      if (result.ok() && value && request.type == pool::kMsgGet) parts[2] = *value;
      if (!c.SendParts(pool::kMsgReply, 0, parts).ok()) return;
    }
  }

  // A kMsgGetFrame (one key) or kMsgGetFrames: each key's reply and frame in
  // order, until a key is missing (or its value is not a frame) or the
  // client refuses a frame. False when the connection broke.
  bool ServeFrames(Connection& c, const Message& request) {
    auto keys = request.type == pool::kMsgGetFrame ? OneKey(request.payload) : pool::DecodeKeys(request.payload);
    if (keys.ok() && keys->empty()) keys = Status::InvalidArgument("get frames: no keys");
    Status answered;
    if (!keys.ok()) return ServeFrame(c, keys.status(), &answered);
    for (const PoolKey& key : *keys) {
      if (!ServeFrame(c, key, &answered)) return false;
      if (!answered.ok()) break;
    }
    return true;
  }

  // The key of a kMsgGetFrame, as a list of one.
  static Result<std::vector<PoolKey>> OneKey(std::span<const uint8_t> payload) {
    PoolKey key;
    KVSERVE_ASSIGN_OR_RETURN(size_t used, pool::DecodeKey(payload, &key));
    if (used != payload.size()) return Status::Corruption("trailing bytes in get");
    return std::vector<PoolKey>{std::move(key)};
  }

  // Answers a frame request for `key` (or the error its parsing gave): the
  // reply, then, when ok, the frame streamed as transfer 0 and the client's
  // ack. *answered: not ok when the reply was an error (a value that is not
  // a frame is refused before anything is streamed) or the client refused
  // the frame (its business: the connection stays usable). False when the
  // connection broke.
  bool ServeFrame(Connection& c, const Result<PoolKey>& key, Status* answered) {
    std::shared_ptr<const std::vector<uint8_t>> value;
    pool::FrameUnits units;
    Status result = key.status();
    if (result.ok()) result = ValidatePoolKey(*key);
    if (result.ok()) {
      auto got = pool_->GetShared(*key);
      result = got.status();
      if (got.ok()) value = std::move(*got);
    }
    if (result.ok()) {
      auto split = pool::SplitFrame(*value, c.options().max_message_bytes);
      if (split.ok()) units = std::move(*split);
      result = split.status();
    }
    std::vector<uint8_t> reply;
    pool::EncodeReplyHeader(result, &reply);
    std::span<const uint8_t> parts[1] = {reply};
    if (!c.SendParts(pool::kMsgReply, 0, parts).ok()) return false;
    *answered = result;
    if (!result.ok()) return true;
    FrameSender sender(&c);
    Status s = sender.Begin(0, units.header);
    if (s.ok() && !units.records.empty()) s = sender.SendRecords(units.records);
    if (!s.ok()) return false;
    auto acked = sender.Finish();  // a broken connection fails the next Receive
    *answered = acked.status();
    return true;
  }

  Status Handle(const Message& m, std::vector<uint8_t>* body,
                std::shared_ptr<const std::vector<uint8_t>>* value) {
    std::span<const uint8_t> p(m.payload);
    PoolKey key;
    switch (m.type) {
      case pool::kMsgPut: {
        KVSERVE_ASSIGN_OR_RETURN(size_t used, pool::DecodeKey(p, &key));
        return pool_->Put(key, p.subspan(used));
      }
      case pool::kMsgGet: {
        KVSERVE_ASSIGN_OR_RETURN(size_t used, pool::DecodeKey(p, &key));
        if (used != p.size()) return Status::Corruption("trailing bytes in get");
        KVSERVE_ASSIGN_OR_RETURN(*value, pool_->GetShared(key));
        return Status::Ok();
      }
      case pool::kMsgDelete: {
        KVSERVE_ASSIGN_OR_RETURN(size_t used, pool::DecodeKey(p, &key));
        if (used != p.size()) return Status::Corruption("trailing bytes in delete");
        return pool_->Delete(key);
      }
      case pool::kMsgLookup: {
        std::string model;
        uint64_t hash = 0;
        KVSERVE_RETURN_IF_ERROR(pool::DecodePrefix(p, &model, &hash));
        KVSERVE_ASSIGN_OR_RETURN(auto entries, pool_->Lookup(model, hash));
        pool::EncodeLookup(entries, body);
        return Status::Ok();
      }
      case pool::kMsgStats: {
        KVSERVE_ASSIGN_OR_RETURN(PoolStats stats, pool_->Stats());
        pool::EncodeStats(stats, body);
        return Status::Ok();
      }
      default:
        return Status::InvalidArgument("unknown pool request type " + std::to_string(m.type));
    }
  }

  Transport* transport_;
  KvPool* pool_;
  PoolServerOptions options_;
  std::unique_ptr<transport::ConnectionServer> server_;
  // Set before server_->Stop(); the handlers poll this, not server_, which a
  // handler may run before Start's assignment to server_ has completed.
  std::atomic<bool> stopping_{false};
  std::string address_;
};

PoolServer::PoolServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PoolServer::~PoolServer() { impl_->Stop(); }

Result<std::unique_ptr<PoolServer>> PoolServer::Start(Transport* transport, KvPool* pool,
                                                      PoolServerOptions options) {
  if (transport == nullptr || pool == nullptr)
    return Status::InvalidArgument("PoolServer::Start: null transport or pool");
  auto impl = std::make_unique<Impl>(transport, pool, std::move(options));
  KVSERVE_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<PoolServer>(new PoolServer(std::move(impl)));
}

std::string PoolServer::address() const { return impl_->address_; }
void PoolServer::Stop() { impl_->Stop(); }
int64_t PoolServer::auth_failures() const { return impl_->server_->auth_failures(); }

}  // namespace kvserve
