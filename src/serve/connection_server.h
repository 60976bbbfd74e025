// Copyright kvserve authors. The accept loop both serve workers share: listen,
// authenticate each peer, and run a handler on its own thread per
// connection until the peer leaves or the server stops.
#ifndef KVSERVE_SERVE_CONNECTION_SERVER_H_
#define KVSERVE_SERVE_CONNECTION_SERVER_H_

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kvserve/transport.h"

namespace kvserve::serve {

// Thread safety: thread-safe; Stop may be called from any thread (also from
// a handler, which then must not wait for its own thread).
class ConnectionServer {
 public:
  // Runs on a connection's own thread with the authenticated connection;
  // returning ends (closes) the connection.
  using Handler = std::function<void(Connection& connection)>;

  // Listens on `address` over `transport` (not owned). Peers that fail the
  // handshake are dropped and counted; beyond `max_connections` live
  // connections new peers are closed at once. IOError/Unavailable when it
  // cannot listen.
  static Result<std::unique_ptr<ConnectionServer>> Start(Transport* transport,
                                                         const std::string& address,
                                                         ConnectionOptions options,
                                                         int max_connections, Handler handler);
  ~ConnectionServer();  // Stops.
  // The bound address (with the real port).
  const std::string& address() const { return address_; }
  // Closes the listener and every connection, joins every thread.
  void Stop();
  bool stopping() const { return stopping_.load(); }
  int64_t auth_failures() const { return auth_failures_.load(); }

 private:
  ConnectionServer() = default;
  struct Peer {
    std::thread thread;
    std::shared_ptr<Stream> stream;  // shared so Stop can close it any time
    std::shared_ptr<std::atomic<bool>> done;
  };
  void AcceptLoop();
  void Reap();
  void Serve(std::shared_ptr<Stream> stream);

  Transport* transport_ = nullptr;
  ConnectionOptions options_;
  int max_connections_ = 16;
  Handler handler_;
  std::unique_ptr<Listener> listener_;
  std::string address_;
  std::thread accept_thread_;
  std::mutex mu_;
  std::list<Peer> peers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> auth_failures_{0};
};

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_CONNECTION_SERVER_H_
