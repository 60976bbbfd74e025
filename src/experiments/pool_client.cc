// Copyright kvserve authors. experiments/pool_client.h.
#include "experiments/pool_client.h"

#include <fmt/format.h>

#include <cstdlib>

#include "experiments/lab.h"

namespace kvserve::lab {

Result<uint64_t> ParsePrefixHash(const std::string& hex) {
  if (hex.empty() || hex.size() > 16 ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return Status::InvalidArgument("--hash must be 1-16 hex digits (the prefix hash)");
  return std::strtoull(hex.c_str(), nullptr, 16);
}

Result<PoolOperationResult> RunPoolOperation(KvPool& pool, const std::string& op,
                                             const std::string& model, const std::string& hash_hex,
                                             const std::string& profile, const std::string& file) {
  PoolOperationResult r;
  if (op == "stats") {
    KVSERVE_ASSIGN_OR_RETURN(PoolStats s, pool.Stats());
    r.output = fmt::format("entries {}\nbytes {}\nhits {}\nmisses {}\nevictions {}\n", s.entries,
                           s.bytes, s.hits, s.misses, s.evictions);
    return r;
  }
  KVSERVE_ASSIGN_OR_RETURN(const uint64_t hash, ParsePrefixHash(hash_hex));
  if (op == "lookup") {
    KVSERVE_ASSIGN_OR_RETURN(auto entries, pool.Lookup(model, hash));
    for (const auto& e : entries) r.output += fmt::format("{}\t{}\n", e.profile, e.bytes);
    return r;
  }
  const PoolKey key{model, hash, profile};
  if (op == "put") {
    KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(file));
    KVSERVE_RETURN_IF_ERROR(pool.Put(key, bytes));
    r.note = fmt::format("stored {} under {}/{:016x}/{}", HumanBytes(bytes.size()), model, hash,
                         profile);
    return r;
  }
  if (op == "get") {
    std::vector<uint8_t> bytes;
    KVSERVE_RETURN_IF_ERROR(pool.Get(key, &bytes));
    KVSERVE_RETURN_IF_ERROR(WriteBinaryFile(file, bytes));
    return r;
  }
  if (op == "delete") {
    KVSERVE_RETURN_IF_ERROR(pool.Delete(key));
    return r;
  }
  return Status::InvalidArgument("unknown operation " + op);
}

}  // namespace kvserve::lab
