// Copyright kvserve authors. The accept loop every kvserve server shares
// (the pool server, the decode worker, the prefill worker's client port):
// listen, admit peers through the handshake under AdmissionOptions
// (docs/transport.md §3 "Admission"), and run a handler on its own thread
// per authenticated connection until the peer leaves or the server stops.
//
// Threads: one accepts; one drives every unauthenticated peer's handshake
// with epoll on the streams' PollHandle() (a peer that sends nothing costs
// its socket and a few hundred bytes, never a thread or a connection slot);
// one per authenticated connection. Streams without a PollHandle (loopback)
// run their handshake on a thread of their own, within the same budget.
#ifndef KVSERVE_TRANSPORT_CONNECTION_SERVER_H_
#define KVSERVE_TRANSPORT_CONNECTION_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvserve/transport.h"

namespace kvserve::transport {

// Totals since Start.
struct AdmissionCounters {
  int64_t accepted = 0;           // streams accepted
  int64_t authenticated = 0;      // handshakes completed
  int64_t auth_failures = 0;      // peers that failed to prove the secret
  int64_t handshake_failures = 0; // other handshake errors (malformed, hung up)
  int64_t deadline_drops = 0;     // unauthenticated peers past their deadline
  int64_t budget_drops = 0;       // dropped for max_unauthenticated(_per_source)
  int64_t busy_refusals = 0;      // authenticated beyond max_connections
};

// Thread safety: thread-safe; Stop may be called from any thread (also from
// a handler, which then must not wait for its own thread).
class ConnectionServer {
 public:
  // Runs on a connection's own thread with the authenticated connection;
  // returning ends (closes) the connection.
  using Handler = std::function<void(Connection& connection)>;

  // Listens on `address` over `transport` (not owned) and admits peers per
  // `admission`. InvalidArgument for a budget below 1 or a non-positive
  // deadline; IOError/Unavailable when it cannot listen.
  static Result<std::unique_ptr<ConnectionServer>> Start(Transport* transport,
                                                         const std::string& address,
                                                         ConnectionOptions options,
                                                         AdmissionOptions admission,
                                                         Handler handler);
  ~ConnectionServer();  // Stops.
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // The bound address (with the real port).
  const std::string& address() const { return address_; }
  // Closes the listener and every connection, joins every thread.
  void Stop();
  bool stopping() const { return stopping_.load(); }
  int64_t auth_failures() const { return counters().auth_failures; }
  AdmissionCounters counters() const;

 private:
  struct Pending;
  struct Peer {
    std::thread thread;
    std::shared_ptr<Stream> stream;  // shared so Stop can close it any time
    std::shared_ptr<std::atomic<bool>> done;
  };

  ConnectionServer() = default;
  void AcceptLoop();
  void GateLoop();
  // Gate thread: adds an accepted stream to the unauthenticated set,
  // dropping the longest-waiting peer(s) to stay within the budgets.
  void Admit(std::shared_ptr<Stream> stream);
  void DropOldest(const std::string* source);
  // Forgets `it` (budgets, epoll); Erase also closes its stream and removes it.
  void Release(std::list<Pending>::iterator it);
  void Erase(std::list<Pending>::iterator it);
  void Finished(Connection::ServerHandshake& handshake, const Status& status);
  // Starts the handler for an authenticated connection, or refuses it when
  // max_connections are being served.
  void Promote(std::unique_ptr<Connection> connection, std::shared_ptr<Stream> stream);
  void ReapPeers();  // requires mu_
  void Wake();
  void Count(int64_t AdmissionCounters::*field);

  Transport* transport_ = nullptr;
  ConnectionOptions options_;
  AdmissionOptions admission_;
  Handler handler_;
  std::unique_ptr<Listener> listener_;
  std::string address_;
  std::thread accept_thread_, gate_thread_;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> fd_pressure_{false};
  std::atomic<int> threads_done_{0};

  // Accept thread -> gate thread.
  std::mutex incoming_mu_;
  std::vector<std::shared_ptr<Stream>> incoming_;

  // Gate thread only.
  std::list<Pending> pending_;  // oldest first
  std::unordered_map<std::string, int> per_source_;
  std::unordered_map<uint64_t, std::list<Pending>::iterator> by_id_;
  uint64_t next_id_ = 0;

  mutable std::mutex mu_;  // peers_, counters_
  std::list<Peer> peers_;
  AdmissionCounters counters_;
};

// The host part of a RemoteAddress() ("127.0.0.1:5000" -> "127.0.0.1",
// "[::1]:7" -> "[::1]"); the whole string when it has no numeric port.
std::string SourceOf(const std::string& remote_address);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_CONNECTION_SERVER_H_
