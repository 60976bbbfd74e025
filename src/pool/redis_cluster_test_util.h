// Copyright kvserve authors. A Redis Cluster (3 masters + 3 replicas on
// 127.0.0.1) for tests, started and stopped with scripts/
// start_redis_cluster.sh in a temporary directory on free ports. Header-only,
// for the pool and serve tests.
#ifndef KVSERVE_POOL_REDIS_CLUSTER_TEST_UTIL_H_
#define KVSERVE_POOL_REDIS_CLUSTER_TEST_UTIL_H_

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/pool.h"

namespace kvserve::pooltest {

inline bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A free loopback port below the kernel's ephemeral range (32768+), or 0:
// a server restarted on it cannot find it taken meanwhile by another test's
// outgoing connection (or by a client that connected to itself while the
// server was down), as an ephemeral port can be.
inline int FreePortBelowEphemeralRange() {
  std::mt19937 rng(std::random_device{}());
  for (int tries = 0; tries < 100; ++tries) {
    const int port = 10000 + static_cast<int>(rng() % 22700);
    if (PortFree(port)) return port;
  }
  return 0;
}

// The answer of `redis-cli -p port <args>` (first line), or "" on failure.
inline std::string RedisCli(int port, const std::string& args) {
  const std::string cmd =
      "redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ::pclose(p);
  return out;
}

class RedisCluster {
 public:
  static bool Available() {
    return std::system("command -v redis-server >/dev/null 2>&1 && "
                       "command -v redis-cli >/dev/null 2>&1") == 0;
  }

  explicit RedisCluster(bool persist = false, int node_timeout_ms = 1000)
      : persist_(persist), node_timeout_ms_(node_timeout_ms) {
    char tmpl[] = "/tmp/kvserve-cluster-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    PickPorts();
  }
  ~RedisCluster() {
    Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts (or restarts, on the same directory) the six nodes and waits for
  // cluster_state:ok. A free port can be taken between PickPorts and redis
  // binding it (other tests run alongside): a first start that fails is
  // retried on fresh ports, up to three times; the last attempt's log goes to
  // stderr.
  bool Start() {
    if (dir_.empty() || base_ == 0) return false;
    const bool fresh = !std::filesystem::exists(dir_ + "/" + std::to_string(base_) + "/nodes.conf");
    for (int attempt = 0; attempt < (fresh ? 3 : 1); ++attempt) {
      if (attempt > 0) {
        Stop(/*force=*/true);
        for (const auto& e : std::filesystem::directory_iterator(dir_)) std::filesystem::remove_all(e);
        PickPorts();
        if (base_ == 0) return false;
      }
      std::string cmd = std::string(KVSERVE_SOURCE_DIR) + "/scripts/start_redis_cluster.sh --base-port " +
                        std::to_string(base_) + " --dir " + dir_ + " --node-timeout " +
                        std::to_string(node_timeout_ms_) + (persist_ ? " --persist" : "") +
                        " >" + dir_ + "/start.log 2>&1";
      running_ = std::system(cmd.c_str()) == 0;
      if (running_) return true;
    }
    std::ifstream log(dir_ + "/start.log");
    std::cerr << "start_redis_cluster.sh failed (base port " << base_ << "):\n" << log.rdbuf();
    return false;
  }
  // Shuts the nodes down; `force` also when the start failed half-way.
  void Stop(bool force = false) {
    if (!running_ && !force) return;
    std::string cmd = std::string(KVSERVE_SOURCE_DIR) + "/scripts/start_redis_cluster.sh --base-port " +
                      std::to_string(base_) + " --dir " + dir_ + " --stop >/dev/null 2>&1";
    (void)std::system(cmd.c_str());
    running_ = false;
  }

  std::vector<std::string> Seeds() const {
    std::vector<std::string> s;
    for (int i = 0; i < 6; ++i) s.push_back("127.0.0.1:" + std::to_string(base_ + i));
    return s;
  }
  int port(int i) const { return base_ + i; }

  // Ports of the nodes that are masters right now (as node `ask` sees it).
  std::vector<int> Masters(int ask) const {
    std::vector<int> out;
    std::istringstream nodes(RedisCli(ask, "cluster nodes"));
    std::string line;
    while (std::getline(nodes, line)) {
      if (line.find("master") == std::string::npos || line.find("fail") != std::string::npos)
        continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos) out.push_back(std::atoi(line.c_str() + colon + 1));
    }
    return out;
  }

  // SIGKILLs the node on `port` (its pid file).
  void Kill(int port) {
    std::ifstream in(dir_ + "/" + std::to_string(port) + "/redis.pid");
    pid_t pid = 0;
    if (in >> pid && pid > 0) ::kill(pid, SIGKILL);
  }

  RedisClusterPoolOptions PoolOptions() const {
    RedisClusterPoolOptions o;
    o.seeds = Seeds();
    o.key_prefix = "kvtest";
    o.connect_timeout_seconds = 0.5;
    o.command_timeout_seconds = 5;
    o.retry_attempts = 14;  // ~12 s: rides out the failover
    return o;
  }

 private:
  // Six node ports and their cluster bus ports (+10000), all free and below
  // the kernel's ephemeral range (32768+), so outgoing connections of other
  // tests do not take them.
  void PickPorts() {
    base_ = 0;
    std::mt19937 rng(std::random_device{}());
    for (int tries = 0; tries < 50 && base_ == 0; ++tries) {
      const int base = 10000 + static_cast<int>(rng() % 12700);
      bool free = true;
      for (int i = 0; i < 6 && free; ++i) free = PortFree(base + i) && PortFree(base + i + 10000);
      if (free) base_ = base;
    }
  }

  bool persist_;
  int node_timeout_ms_;
  std::string dir_;
  int base_ = 0;
  bool running_ = false;
};

}  // namespace kvserve::pooltest

#endif  // KVSERVE_POOL_REDIS_CLUSTER_TEST_UTIL_H_
