// Copyright kvserve authors. experiments/pool_client.h.
#include "experiments/pool_client.h"

#include <fmt/format.h>

#include <cstdlib>

#include "experiments/lab.h"
#include "experiments/serving.h"

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

Status RunPoolServer(Transport& transport, KvPool& pool, const std::string& listen,
                     const ConnectionOptions& connection, double duration_seconds,
                     const std::string& backend, const std::string& transport_kind,
                     const Progress& progress) {
  BlockStopSignals();  // before threads start, so only the wait sees them
  PoolServerOptions so;
  so.listen_address = listen;
  so.connection = connection;
  RaiseOpenFileLimit(static_cast<uint64_t>(so.admission.max_unauthenticated) +
                         static_cast<uint64_t>(so.admission.max_connections) + 256,
                     progress);
  KVSERVE_ASSIGN_OR_RETURN(auto server, PoolServer::Start(&transport, &pool, so));
  Note(progress, "serving a {} pool on {} over {}; Ctrl-C stops", backend, server->address(),
       transport_kind);
  WaitForStopSignal(duration_seconds);
  server->Stop();
  auto stats = pool.Stats();
  if (stats.ok())
    Note(progress, "stopped: {} entries, {}, {} hits, {} misses, {} evictions, {} refused peers",
         stats->entries, HumanBytes(stats->bytes), stats->hits, stats->misses, stats->evictions,
         server->auth_failures());
  return Status::Ok();
}

}  // namespace kvserve::lab
