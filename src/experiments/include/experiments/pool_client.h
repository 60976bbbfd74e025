// Copyright kvserve authors. `kvserve pool serve` (a pool server until a
// stop signal) and `kvserve pool put|get|delete|lookup|stats` (one operation
// on a pool, as the text the command prints). Not part of the installed
// library.
#ifndef KVSERVE_EXPERIMENTS_POOL_CLIENT_H_
#define KVSERVE_EXPERIMENTS_POOL_CLIENT_H_

#include <cstdint>
#include <string>

#include "experiments/lab.h"
#include "kvserve/pool.h"
#include "kvserve/transport.h"

namespace kvserve::lab {

// "00ff" -> 255: 1 to 16 hex digits. InvalidArgument otherwise.
Result<uint64_t> ParsePrefixHash(const std::string& hex);

// What an operation printed: `output` for stdout (stats' counters,
// lookup's "profile<TAB>bytes" lines), `note` for a progress line (what put
// stored).
struct PoolOperationResult {
  std::string output, note;
};

// Runs `op` on `pool`: stats; lookup of (model, hash_hex); put of `file`'s
// bytes, get into `file` (written whole or not at all), or delete, under
// (model, hash_hex, profile). InvalidArgument for an unknown op or a bad
// hash; the pool's and the file's errors otherwise.
Result<PoolOperationResult> RunPoolOperation(KvPool& pool, const std::string& op,
                                             const std::string& model, const std::string& hash_hex,
                                             const std::string& profile, const std::string& file);

// Serves `pool` on `listen` over `transport` (connections authenticated
// with `connection`) until SIGINT/SIGTERM, or for `duration_seconds` when
// > 0: blocks the stop signals, raises the open-file limit for the
// server's admission bounds, reports where it serves and, after stopping,
// the pool's counters through `progress`. `backend` and `transport_kind`
// name the pool and transport in those lines. PoolServer::Start's errors.
Status RunPoolServer(Transport& transport, KvPool& pool, const std::string& listen,
                     const ConnectionOptions& connection, double duration_seconds,
                     const std::string& backend, const std::string& transport_kind,
                     const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_POOL_CLIENT_H_
