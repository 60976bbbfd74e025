// Copyright kvserve authors. The serve workers' accept loop.
#include "serve/connection_server.h"

#include <utility>

namespace kvserve::serve {

Result<std::unique_ptr<ConnectionServer>> ConnectionServer::Start(Transport* transport,
                                                                  const std::string& address,
                                                                  ConnectionOptions options,
                                                                  int max_connections,
                                                                  Handler handler) {
  std::unique_ptr<ConnectionServer> server(new ConnectionServer());
  server->transport_ = transport;
  server->options_ = std::move(options);
  server->max_connections_ = max_connections;
  server->handler_ = std::move(handler);
  KVSERVE_ASSIGN_OR_RETURN(server->listener_, transport->Listen(address));
  server->address_ = server->listener_->Address();
  ConnectionServer* raw = server.get();
  server->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return server;
}

ConnectionServer::~ConnectionServer() { Stop(); }

void ConnectionServer::Stop() {
  if (stopping_.exchange(true)) {
    if (accept_thread_.joinable() && accept_thread_.get_id() != std::this_thread::get_id())
      accept_thread_.join();
    return;
  }
  if (listener_) listener_->Close();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Peer> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : peers_) p.stream->Close();
    peers.swap(peers_);
  }
  for (auto& p : peers) {
    if (p.thread.get_id() == std::this_thread::get_id()) {
      p.thread.detach();
    } else {
      p.thread.join();
    }
  }
}

void ConnectionServer::AcceptLoop() {
  while (!stopping_.load()) {
    auto stream = listener_->Accept(0.2);
    Reap();
    if (!stream.ok()) continue;  // timeout, transient error, or closed (loop re-checks)
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.load() || static_cast<int>(peers_.size()) >= max_connections_) {
      (*stream)->Close();
      continue;
    }
    Peer p;
    p.stream = std::shared_ptr<Stream>(std::move(*stream));
    p.done = std::make_shared<std::atomic<bool>>(false);
    p.thread = std::thread([this, stream = p.stream, done = p.done] {
      Serve(stream);
      done->store(true);
    });
    peers_.push_back(std::move(p));
  }
}

void ConnectionServer::Reap() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

void ConnectionServer::Serve(std::shared_ptr<Stream> stream) {
  auto connection = Connection::Establish(std::make_unique<SharedStream>(stream),
                                          Connection::Role::kServer, options_);
  if (!connection.ok()) {
    if (connection.status().code() == StatusCode::kPermissionDenied) auth_failures_.fetch_add(1);
    return;
  }
  handler_(**connection);
  (*connection)->Close();
}

}  // namespace kvserve::serve
