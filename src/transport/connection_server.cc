// Copyright kvserve authors. The shared accept loop with admission control;
// see connection_server.h and docs/transport.md §3.
#include "transport/connection_server.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <utility>

#include "transport/poll_wait.h"
#include "transport/server_handshake.h"

namespace kvserve::transport {

struct ConnectionServer::Pending {
  // Driven by the gate thread (streams with a PollHandle) ...
  std::unique_ptr<Connection::ServerHandshake> handshake;
  // ... or by a thread of its own (streams without one).
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
  std::shared_ptr<Stream> stream;  // to close it from the gate or Stop
  std::string source;
  double deadline = 0;
  uint64_t id = 0;  // epoll key (0 is the wake event)
};

std::string SourceOf(const std::string& remote) {
  const size_t colon = remote.rfind(':');
  if (colon == std::string::npos || colon + 1 == remote.size() ||
      remote.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return remote;
  return remote.substr(0, colon);
}

Result<std::unique_ptr<ConnectionServer>> ConnectionServer::Start(Transport* transport,
                                                                  const std::string& address,
                                                                  ConnectionOptions options,
                                                                  AdmissionOptions admission,
                                                                  Handler handler) {
  if (transport == nullptr) return Status::InvalidArgument("ConnectionServer: null transport");
  if (admission.max_connections < 1 || admission.max_unauthenticated < 1 ||
      admission.max_unauthenticated_per_source < 1)
    return Status::InvalidArgument("admission budgets must be >= 1");
  if (!(admission.unauthenticated_deadline_seconds > 0))
    return Status::InvalidArgument("unauthenticated_deadline_seconds must be > 0");
  std::unique_ptr<ConnectionServer> server(new ConnectionServer());
  server->transport_ = transport;
  server->options_ = std::move(options);
  server->admission_ = admission;
  server->handler_ = std::move(handler);
  server->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  server->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (server->wake_fd_ < 0 || server->epoll_fd_ < 0) return Status::IOError("eventfd/epoll failed");
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u64 = 0;
  if (::epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->wake_fd_, &wake) != 0)
    return Status::IOError("epoll_ctl failed");
  KVSERVE_ASSIGN_OR_RETURN(server->listener_, transport->Listen(address));
  server->address_ = server->listener_->Address();
  ConnectionServer* raw = server.get();
  server->gate_thread_ = std::thread([raw] { raw->GateLoop(); });
  server->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return server;
}

ConnectionServer::~ConnectionServer() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void ConnectionServer::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void ConnectionServer::Count(int64_t AdmissionCounters::*field) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(counters_.*field);
}

AdmissionCounters ConnectionServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ConnectionServer::Stop() {
  if (stopping_.exchange(true)) {
    if (accept_thread_.joinable()) accept_thread_.join();
    if (gate_thread_.joinable()) gate_thread_.join();
    return;
  }
  if (listener_) listener_->Close();
  Wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (gate_thread_.joinable()) gate_thread_.join();  // closes every unauthenticated peer
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
    if (!stream.ok()) {
      if (stream.status().code() == StatusCode::kTimeout || stopping_.load()) continue;
      // E.g. out of file descriptors: make room by dropping the peer that
      // has waited longest in the handshake, then retry (not in a spin).
      fd_pressure_.store(true);
      Wake();
      SleepSeconds(0.005);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(incoming_mu_);
      incoming_.push_back(std::shared_ptr<Stream>(std::move(*stream)));
    }
    Count(&AdmissionCounters::accepted);
    Wake();
  }
}

void ConnectionServer::Release(std::list<Pending>::iterator it) {
  auto count = per_source_.find(it->source);
  if (count != per_source_.end() && --count->second == 0) per_source_.erase(count);
  if (it->handshake) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->handshake->poll_handle(), nullptr);
    by_id_.erase(it->id);
  }
}

void ConnectionServer::Erase(std::list<Pending>::iterator it) {
  Release(it);
  // A finished handshake thread's stream may now belong to a connection.
  if (!(it->done && it->done->load())) it->stream->Close();
  if (it->thread.joinable()) it->thread.join();  // exits at once: its stream is closed
  pending_.erase(it);
}

// Drops one unauthenticated peer (of `source`, when given) to make room:
// among the 64 that have waited longest, the first of the least advanced
// (hung up, then silent, then with bytes waiting, then mid-handshake), so a
// client whose HELLO has arrived is not the one to go.
void ConnectionServer::DropOldest(const std::string* source) {
  auto victim = pending_.end();
  int victim_rank = 4;
  int looked = 0;
  for (auto it = pending_.begin(); it != pending_.end() && looked < 64; ++it) {
    if (source != nullptr && it->source != *source) continue;
    ++looked;
    int rank = 2;  // a handshake thread's stream: nothing to look at
    if (it->handshake) {
      pollfd p{it->handshake->poll_handle(), POLLIN | POLLRDHUP, 0};
      const int ready = ::poll(&p, 1, 0);
      if (ready > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        rank = 0;
      } else if (it->handshake->progressed()) {
        rank = 3;
      } else {
        rank = ready == 0 ? 1 : 2;
      }
    }
    if (rank < victim_rank) {
      victim = it;
      victim_rank = rank;
      if (rank == 0) break;
    }
  }
  if (victim == pending_.end()) return;
  Count(&AdmissionCounters::budget_drops);
  Erase(victim);
}

void ConnectionServer::Admit(std::shared_ptr<Stream> stream) {
  std::string source = SourceOf(stream->RemoteAddress());
  while (static_cast<int>(pending_.size()) >= admission_.max_unauthenticated) DropOldest(nullptr);
  auto count = per_source_.find(source);
  if (count != per_source_.end() && count->second >= admission_.max_unauthenticated_per_source)
    DropOldest(&source);
  Pending p;
  p.stream = stream;
  p.source = source;
  p.handshake = std::make_unique<Connection::ServerHandshake>(
      std::make_unique<SharedStream>(stream), options_, admission_.unauthenticated_deadline_seconds);
  p.deadline = p.handshake->deadline();
  ++per_source_[source];
  if (p.handshake->poll_handle() >= 0) {
    p.id = ++next_id_;
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.u64 = p.id;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.handshake->poll_handle(), &e) != 0) {
      --per_source_[source];
      Count(&AdmissionCounters::handshake_failures);
      return;  // the handshake's destructor closes the stream
    }
    pending_.push_back(std::move(p));
    by_id_[pending_.back().id] = std::prev(pending_.end());
    return;
  }
  // No handle to poll: this peer's handshake blocks a thread of its own.
  p.done = std::make_shared<std::atomic<bool>>(false);
  p.thread = std::thread([this, handshake = std::move(p.handshake), stream, done = p.done] {
    for (;;) {
      auto finished = handshake->Advance(handshake->deadline() - MonotonicSeconds());
      if (!finished.ok()) {
        Finished(*handshake, finished.status());
        break;
      }
      if (*finished) {
        Promote(handshake->Take(), stream);
        break;
      }
    }
    done->store(true);
    threads_done_.fetch_add(1);
    Wake();
  });
  pending_.push_back(std::move(p));
}

void ConnectionServer::Finished(Connection::ServerHandshake&, const Status& status) {
  switch (status.code()) {
    case StatusCode::kPermissionDenied:
      Count(&AdmissionCounters::auth_failures);
      break;
    case StatusCode::kTimeout:
      Count(&AdmissionCounters::deadline_drops);
      break;
    default:
      Count(&AdmissionCounters::handshake_failures);
  }
}

void ConnectionServer::GateLoop() {
  std::vector<epoll_event> events(256);
  while (!stopping_.load()) {
    // The list is in accept order and every deadline is accept time plus
    // the same allowance: the first polled entry expires first.
    int wait_ms = 1000;
    for (const Pending& p : pending_) {
      if (!p.handshake) continue;
      const double left = p.deadline - MonotonicSeconds();
      wait_ms = std::clamp(static_cast<int>(std::ceil(left * 1000.0)), 0, wait_ms);
      break;
    }
    const int ready = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), wait_ms);
    if (ready < 0 && errno != EINTR) SleepSeconds(0.001);
    if (stopping_.load()) break;
    bool woken = false;
    for (int i = 0; i < ready; ++i) {
      if (events[i].data.u64 == 0) {
        woken = true;
        continue;
      }
      auto found = by_id_.find(events[i].data.u64);
      if (found == by_id_.end()) continue;  // dropped earlier in this batch
      auto it = found->second;
      auto finished = it->handshake->Advance(0);
      if (!finished.ok()) {
        Finished(*it->handshake, finished.status());
        Erase(it);
      } else if (*finished) {
        Release(it);
        std::unique_ptr<Connection> connection = it->handshake->Take();
        std::shared_ptr<Stream> stream = it->stream;
        pending_.erase(it);
        Promote(std::move(connection), std::move(stream));
      }
    }
    // Past their deadline: dropped, oldest first.
    const double now = MonotonicSeconds();
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto next = std::next(it);
      if (it->handshake) {
        if (now < it->deadline) break;
        Count(&AdmissionCounters::deadline_drops);
        Erase(it);
      }
      it = next;
    }
    if (woken) {
      uint64_t drained;
      (void)!::read(wake_fd_, &drained, sizeof(drained));
    }
    // Finished handshake threads: joined.
    if (threads_done_.exchange(0) > 0) {
      for (auto it = pending_.begin(); it != pending_.end();) {
        auto next = std::next(it);
        if (it->done && it->done->load()) Erase(it);
        it = next;
      }
    }
    std::vector<std::shared_ptr<Stream>> incoming;
    {
      std::lock_guard<std::mutex> lock(incoming_mu_);
      incoming.swap(incoming_);
    }
    for (auto& s : incoming) Admit(std::move(s));
    if (fd_pressure_.exchange(false)) DropOldest(nullptr);
  }
  while (!pending_.empty()) Erase(pending_.begin());
  std::lock_guard<std::mutex> lock(incoming_mu_);
  for (auto& s : incoming_) s->Close();
  incoming_.clear();
}

void ConnectionServer::ReapPeers() {
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

void ConnectionServer::Promote(std::unique_ptr<Connection> connection,
                               std::shared_ptr<Stream> stream) {
  if (!connection) return;
  std::unique_lock<std::mutex> lock(mu_);
  ++counters_.authenticated;
  ReapPeers();
  if (stopping_.load()) {
    lock.unlock();
    connection->Close();
    return;
  }
  if (static_cast<int>(peers_.size()) >= admission_.max_connections) {
    ++counters_.busy_refusals;
    lock.unlock();  // the refusal's write must not hold up other admissions
    connection->Fail(Status::ResourceExhausted(
        "server " + address_ + " is serving its maximum of " +
        std::to_string(admission_.max_connections) + " connections"));
    return;
  }
  Peer p;
  p.stream = std::move(stream);
  p.done = std::make_shared<std::atomic<bool>>(false);
  p.thread = std::thread([this, c = std::shared_ptr<Connection>(std::move(connection)),
                          done = p.done] {
    handler_(*c);
    c->Close();
    done->store(true);
  });
  peers_.push_back(std::move(p));
}

}  // namespace kvserve::transport
