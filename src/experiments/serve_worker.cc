// Copyright kvserve authors. experiments/serve_worker.h.
#include "experiments/serve_worker.h"

#include <filesystem>
#include <memory>

#include "kvserve/controller.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {
namespace {

// The prefill worker's options, or the error that stops it starting.
Result<PrefillWorkerOptions> PrefillOptions(const ServeWorkerOptions& a, const std::string& dir,
                                            const ConnectionOptions& c) {
  PrefillWorkerOptions o;
  o.listen_address = a.listen;
  o.decode_addresses = SplitList(a.decode);
  if (o.decode_addresses.empty())
    return Status::InvalidArgument("--role prefill needs --decode HOST:PORT[,...]");
  o.client_connection = c;
  o.decode_connection = c;
  o.decode_connection.shape_bytes_per_second = GbpsToBytesPerSecond(a.shape_gbps);
  o.model_id = std::filesystem::path(dir).filename().string();
  KVSERVE_ASSIGN_OR_RETURN(o.controller.model, ParseWorkerLatencyModel(a.latency_model));
  o.controller.bandit = !a.no_bandit;
  o.encode_threads = a.codec_threads;
  o.pool_store_profiles = SplitList(a.pool_profiles);
  o.pool_chunk_tokens = a.pool_chunk_tokens;
  o.max_decode_connections = a.max_decode_connections;
  o.default_workload = a.workload;
  return o;
}

}  // namespace

Status RunServeWorker(const ServeWorkerOptions& a, const std::string& dir,
                      const std::string& profiles_dir, const std::string& secret,
                      const std::function<void(const std::string& address)>& on_listening,
                      const Progress& progress) {
  if (a.role != "prefill" && a.role != "decode")
    return Status::InvalidArgument("--role must be prefill or decode");
  if (a.threads > 0) SetBlasThreads(a.threads);
  auto model = Model::Load(dir, {.threads = a.threads});
  if (!model.ok()) return model.status().WithContext("loading " + dir);
  BlockStopSignals();
  RaiseOpenFileLimit(static_cast<uint64_t>(AdmissionOptions{}.max_unauthenticated) + 512, progress);
  KVSERVE_ASSIGN_OR_RETURN(auto transport, MakeTransport(a.transport, secret));
  ConnectionOptions c;
  c.secret = secret;
  c.local_id = a.role;
  c.io_timeout_seconds = a.timeout_seconds;
  std::string address;
  std::unique_ptr<DecodeWorker> decode;
  std::unique_ptr<PrefillWorker> prefill;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<HeadScores> head_scores;  // <model>/head_scores.json, for mixhq/duo
  if (a.role == "decode") {
    DecodeWorkerOptions o;
    o.listen_address = a.listen;
    o.connection = c;
    o.decode_threads = a.codec_threads;
    // The prefill workers' shared pool: prefix hits are then fetched here.
    if (a.store.backend == "memory")
      return Status::InvalidArgument(
          "--pool memory is a pool inside this process; a decode worker reads the prefill workers' "
          "shared pool (redis, redis-cluster) or none");
    if (a.store.backend != "none") {
      KVSERVE_ASSIGN_OR_RETURN(pool, OpenPoolBackend(a.store));
    }
    o.pool = pool.get();
    KVSERVE_ASSIGN_OR_RETURN(decode, DecodeWorker::Start(transport.get(), model->get(), o));
    address = decode->address();
  } else {
    KVSERVE_ASSIGN_OR_RETURN(const std::string table_path,
                             PrefillTablePath(a.table, dir, profiles_dir));
    if (a.table.empty()) Note(progress, "profile table {} (measured for this model)", table_path);
    auto table = ProfileTable::Load(table_path);
    if (!table.ok()) return table.status().WithContext(table_path);
    KVSERVE_ASSIGN_OR_RETURN(PrefillWorkerOptions o, PrefillOptions(a, dir, c));
    if (std::filesystem::exists(dir + "/head_scores.json")) {
      auto scores = HeadScores::Load(dir + "/head_scores.json");
      if (scores.ok()) head_scores = std::make_unique<HeadScores>(std::move(*scores));
      o.head_scores = head_scores.get();
    }
    if (a.store.backend != "none") {
      KVSERVE_ASSIGN_OR_RETURN(pool, OpenPoolBackend(a.store));
    }
    o.pool = pool.get();
    KVSERVE_ASSIGN_OR_RETURN(
        prefill, PrefillWorker::Start(transport.get(), model->get(), std::move(*table), o));
    address = prefill->address();
  }
  if (!a.address_file.empty()) {
    KVSERVE_RETURN_IF_ERROR(WriteAddressFile(a.address_file, address));
  }
  if (on_listening) on_listening(address);
  WaitForStopSignal(a.duration_seconds);
  if (decode) {
    decode->Stop();
    Note(progress, "stopped: {} requests answered, {} frames refused, {} peers refused",
         decode->completed(), decode->refused_frames(), decode->auth_failures());
  }
  if (prefill) prefill->Stop();
  return Status::Ok();
}

}  // namespace kvserve::lab
