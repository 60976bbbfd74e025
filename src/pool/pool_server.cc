// Copyright kvserve authors. `kvserve pool serve`: a KvPool served over the
// authenticated transport, one thread per client connection.
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/pool.h"
#include "pool/pool_wire.h"

namespace kvserve {

class PoolServer::Impl {
 public:
  Impl(Transport* transport, KvPool* pool, PoolServerOptions options)
      : transport_(transport), pool_(pool), options_(std::move(options)) {}

  ~Impl() { Stop(); }

  Status Start() {
    KVSERVE_ASSIGN_OR_RETURN(listener_, transport_->Listen(options_.listen_address));
    address_ = listener_->Address();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return Status::Ok();
  }

  void Stop() {
    if (stopping_.exchange(true)) {
      if (accept_thread_.joinable()) accept_thread_.join();
      return;
    }
    if (listener_) listener_->Close();
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<Client> clients;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : clients_) c.stream->Close();
      clients.swap(clients_);
    }
    for (auto& c : clients) c.thread.join();
  }

  struct Client {
    std::thread thread;
    // Shared with the client thread's Connection; kept alive until joined
    // so Stop can shut it down (Stream::Close is thread-safe) at any time.
    std::shared_ptr<Stream> stream;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void AcceptLoop() {
    while (!stopping_.load()) {
      auto stream = listener_->Accept(0.2);
      Reap();
      if (!stream.ok()) {
        if (stream.status().code() == StatusCode::kTimeout) continue;
        if (stopping_.load()) return;
        continue;  // transient accept error
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int>(clients_.size()) >= options_.max_connections) {
        (*stream)->Close();
        continue;
      }
      auto shared_stream = std::shared_ptr<Stream>(std::move(*stream));
      Client c;
      c.done = std::make_shared<std::atomic<bool>>(false);
      c.stream = shared_stream;
      c.thread = std::thread([this, shared_stream, done = c.done]() mutable {
        Serve(shared_stream);
        done->store(true);
      });
      clients_.push_back(std::move(c));
    }
  }

  // Joins finished client threads.
  void Reap() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void Serve(std::shared_ptr<Stream> stream) {
    auto conn = Connection::Establish(std::make_unique<SharedStream>(stream),
                                      Connection::Role::kServer, options_.connection);
    if (!conn.ok()) {
      if (conn.status().code() == StatusCode::kPermissionDenied) auth_failures_.fetch_add(1);
      return;
    }
    Connection& c = **conn;
    Message request;
    std::vector<uint8_t> reply, body, value;
    while (!stopping_.load()) {
      Status s = c.Receive(&request, options_.idle_timeout_seconds);
      if (!s.ok()) return;  // idle, closed or broken: drop the client
      body.clear();
      Status result = Handle(request, &body, &value);
      pool::EncodeReplyHeader(result, &reply);
      std::span<const uint8_t> parts[3] = {reply, body, {}};
      if (result.ok() && request.type == pool::kMsgGet) parts[2] = value;
      if (!c.SendParts(pool::kMsgReply, 0, parts).ok()) return;
    }
  }

  Status Handle(const Message& m, std::vector<uint8_t>* body, std::vector<uint8_t>* value) {
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
        return pool_->Get(key, value);
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
  std::unique_ptr<Listener> listener_;
  std::string address_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> auth_failures_{0};
  std::mutex mu_;
  std::list<Client> clients_;
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
int64_t PoolServer::auth_failures() const { return impl_->auth_failures_.load(); }

}  // namespace kvserve
