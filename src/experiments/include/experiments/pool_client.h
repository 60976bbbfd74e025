// Copyright kvserve authors. `kvserve pool put|get|delete|lookup|stats`: one
// operation on a pool, as the text the command prints. Not part of the
// installed library.
#ifndef KVSERVE_EXPERIMENTS_POOL_CLIENT_H_
#define KVSERVE_EXPERIMENTS_POOL_CLIENT_H_

#include <cstdint>
#include <string>

#include "kvserve/pool.h"

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

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_POOL_CLIENT_H_
