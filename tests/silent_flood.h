// Copyright kvserve authors. A connection flood for admission tests and
// benchmarks (docs/transport.md §3): N TCP connections to a server that
// never send a byte, held open, and reopened as the server drops them (what
// an attacker keeping a server's slots busy does). Test-only.
#ifndef KVSERVE_TESTS_SILENT_FLOOD_H_
#define KVSERVE_TESTS_SILENT_FLOOD_H_

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::testing {

// Raises this process's RLIMIT_NOFILE soft limit to at least `needed`
// (the hard limit too when allowed, e.g. as root). Returns the soft limit
// now in force.
inline uint64_t RaiseFileLimit(uint64_t needed) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur >= needed) return r.rlim_cur;
  rlimit want = r;
  want.rlim_cur = needed;
  if (want.rlim_max < needed) want.rlim_max = needed;
  if (setrlimit(RLIMIT_NOFILE, &want) != 0) {
    want.rlim_cur = r.rlim_max;
    want.rlim_max = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &want);
  }
  getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

struct SilentFloodOptions {
  // Source addresses 127.0.0.<first_source> .. <first_source + sources - 1>,
  // used round-robin.
  int sources = 1;
  int first_source = 1;
  // Reopen the connections the server closes (checked every
  // poll_interval seconds); false: only hold what stays open.
  bool reopen = true;
  double poll_interval = 0.02;
};

class SilentFlood {
 public:
  // Opens `sockets` connections to the IPv4 "host:port" `address` and keeps
  // them open as `options` say.
  SilentFlood(const std::string& address, int sockets, SilentFloodOptions options = {})
      : options_(options) {
    const size_t colon = address.rfind(':');
    server_.sin_family = AF_INET;
    server_.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &server_.sin_addr);
    fds_.assign(static_cast<size_t>(sockets), -1);
    for (size_t i = 0; i < fds_.size(); ++i) fds_[i] = Open(i);
    for (int fd : fds_) open_.fetch_add(fd >= 0 ? 1 : 0);
    thread_ = std::thread([this] { Keep(); });
  }
  ~SilentFlood() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  SilentFlood(const SilentFlood&) = delete;
  SilentFlood& operator=(const SilentFlood&) = delete;

  int sockets() const { return static_cast<int>(fds_.size()); }
  // Sockets open now (connected or connecting; the rest failed to reopen).
  int open() const { return open_.load(); }
  // Connections the server closed (each was reopened).
  int64_t dropped() const { return dropped_.load(); }
  // Sockets that could not be opened (out of descriptors or ports).
  int64_t failed_opens() const { return failed_.load(); }

 private:
  int Open(size_t i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failed_.fetch_add(1);
      return -1;
    }
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr =
        htonl(0x7f000000u + static_cast<uint32_t>(options_.first_source) +
              static_cast<uint32_t>(i % static_cast<size_t>(std::max(1, options_.sources))));
    (void)::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&server_), sizeof(server_)) != 0 &&
        errno != EINPROGRESS) {
      ::close(fd);
      failed_.fetch_add(1);
      return -1;
    }
    return fd;
  }

  void Keep() {
    std::vector<pollfd> p(fds_.size());
    while (!stop_.load()) {
      for (size_t i = 0; i < fds_.size(); ++i) p[i] = pollfd{fds_[i], POLLIN | POLLRDHUP, 0};
      ::poll(p.data(), p.size(), static_cast<int>(options_.poll_interval * 1000));
      for (size_t i = 0; i < fds_.size() && !stop_.load(); ++i) {
        if (fds_[i] >= 0 && p[i].revents == 0) continue;
        if (fds_[i] >= 0) {
          ::close(fds_[i]);
          dropped_.fetch_add(1);
          open_.fetch_sub(1);
          fds_[i] = -1;
        }
        if (options_.reopen) {
          fds_[i] = Open(i);
          if (fds_[i] >= 0) open_.fetch_add(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(options_.poll_interval));
    }
  }

  SilentFloodOptions options_;
  sockaddr_in server_{};
  std::vector<int> fds_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> failed_{0};
};

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_SILENT_FLOOD_H_
