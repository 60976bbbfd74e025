// Copyright kvserve authors. The pool backends the CLI can open (memory,
// redis, redis-cluster) from one set of flags, shared by `kvserve serve
// --pool`, `kvserve pool serve --backend` and `kvserve pool bench --backend`.
#ifndef KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "kvserve/pool.h"

namespace kvserve::cli {

struct PoolBackendFlags {
  std::string backend;  // memory | redis | redis-cluster
  uint64_t budget_mb = 1024;
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::string redis_nodes = "127.0.0.1:7000";  // cluster seeds, comma-separated
  std::string redis_prefix = "kvserve";
  uint64_t piece_mb = RedisClusterPoolOptions{}.max_piece_bytes >> 20;
};

// Adds --redis-host, --redis-port, --redis-nodes, --redis-prefix and
// --redis-piece-mb (the backend flag itself is the caller's: its name and
// choices differ per command).
void AddRedisFlags(CLI::App* app, PoolBackendFlags* flags);

// Opens the backend `flags.backend` names. InvalidArgument for another name;
// the backend's errors (e.g. Unavailable when Redis is down).
Result<std::unique_ptr<KvPool>> OpenPoolBackend(const PoolBackendFlags& flags);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_
