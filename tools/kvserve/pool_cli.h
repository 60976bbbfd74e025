// Copyright kvserve authors. The pool backend flags (memory, redis,
// redis-cluster) shared by `kvserve serve --pool`, `kvserve pool serve
// --backend` and `kvserve pool bench --backend`; lab::OpenPoolBackend opens
// what they select.
#ifndef KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_

#include <CLI/CLI.hpp>

#include "experiments/serving.h"

namespace kvserve::cli {

using PoolBackendFlags = lab::PoolBackendConfig;
using lab::OpenPoolBackend;

// Adds --redis-host, --redis-port, --redis-nodes, --redis-prefix and
// --redis-piece-mb (the backend flag itself is the caller's: its name and
// choices differ per command).
void AddRedisFlags(CLI::App* app, PoolBackendFlags* flags);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_POOL_CLI_H_
