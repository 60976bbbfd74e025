// Copyright kvserve authors. Pool backends from CLI flags.
#include "pool_cli.h"

namespace kvserve::cli {

void AddRedisFlags(CLI::App* app, PoolBackendFlags* flags) {
  app->add_option("--redis-host", flags->redis_host, "redis: host")->capture_default_str();
  app->add_option("--redis-port", flags->redis_port, "redis: port")->capture_default_str();
  app->add_option("--redis-nodes", flags->redis_nodes,
                  "redis-cluster: seed nodes host:port[,...] (scripts/start_redis_cluster.sh)")
      ->capture_default_str();
  app->add_option("--redis-prefix", flags->redis_prefix, "redis / redis-cluster: key namespace")
      ->capture_default_str();
  app->add_option("--redis-piece-mb", flags->piece_mb,
                  "redis-cluster: frames above this many MiB are split across keys of one slot")
      ->check(CLI::Range(uint64_t{1}, uint64_t{512}))
      ->capture_default_str();
}

}  // namespace kvserve::cli
