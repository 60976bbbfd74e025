// Copyright kvserve authors. `kvserve serve --role prefill|decode`: run one
// worker of disaggregated serving over the authenticated TCP transport
// (docs/e2e.md).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/model_directory.h"
#include "kvserve/codec.h"
#include "kvserve/controller.h"
#include "kvserve/pool.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "kvserve/transport.h"
#include "pool_cli.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "serve";

struct ServeArgs {
  std::string role;
  std::string model;
  std::string listen = "127.0.0.1:0";
  std::string decode;  // prefill: decode worker addresses
  std::string table;  // default: the model's measured table
  std::string workload;
  std::string secret_file;
  std::string address_file;
  double shape_gbps = 0;
  std::string latency_model = "streamed";
  bool no_bandit = false;
  TransportFlags transport;
  PoolBackendFlags store{.backend = "none"};
  std::string pool_profiles;
  int pool_chunk_tokens = PrefillWorkerOptions{}.pool_chunk_tokens;
  int threads = 0;
  int codec_threads = 1;
  double duration_seconds = 0;
  double timeout_seconds = 30;
};

Result<ConnectionOptions> Options(const ServeArgs& a, const std::string& id) {
  ConnectionOptions o;
  KVSERVE_ASSIGN_OR_RETURN(o.secret, LoadServeSecret(kCommand, a.secret_file));
  o.local_id = id;
  o.io_timeout_seconds = a.timeout_seconds;
  return o;
}

int RunServe(const ServeArgs& a) {
  if (a.role != "prefill" && a.role != "decode")
    return ReportError(kCommand, Status::InvalidArgument("--role must be prefill or decode"));
  auto dir = ServeModelDirectory(kCommand, a.model);
  if (!dir.ok()) return ReportError(kCommand, dir.status());
  if (a.threads > 0) SetBlasThreads(a.threads);
  auto model = Model::Load(*dir, {.threads = a.threads});
  if (!model.ok()) return ReportError(kCommand, model.status().WithContext("loading " + *dir));
  BlockStopSignals();
  lab::RaiseOpenFileLimit(static_cast<uint64_t>(AdmissionOptions{}.max_unauthenticated) + 512,
                          ProgressTo(kCommand));
  auto secret = LoadServeSecret(kCommand, a.secret_file);
  if (!secret.ok()) return ReportError(kCommand, secret.status());
  auto transport = MakeTransport(a.transport, *secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  Transport* tcp = transport->get();
  std::string address;
  std::unique_ptr<DecodeWorker> decode;
  std::unique_ptr<PrefillWorker> prefill;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<HeadScores> head_scores;  // <model>/head_scores.json, for mixhq/duo
  if (a.role == "decode") {
    DecodeWorkerOptions o;
    o.listen_address = a.listen;
    auto c = Options(a, "decode");
    if (!c.ok()) return ReportError(kCommand, c.status());
    o.connection = *c;
    o.decode_threads = a.codec_threads;
    auto w = DecodeWorker::Start(tcp, model->get(), o);
    if (!w.ok()) return ReportError(kCommand, w.status());
    decode = std::move(*w);
    address = decode->address();
  } else {
    auto data = DataDirectory();
    auto table_path = lab::PrefillTablePath(
        a.table, *dir, data.ok() ? lab::DataPath(*data, "configs/profiles") : "configs/profiles");
    if (!table_path.ok()) return ReportError(kCommand, table_path.status());
    if (a.table.empty()) Progress(kCommand, "profile table {} (measured for this model)", *table_path);
    auto table = ProfileTable::Load(*table_path);
    if (!table.ok()) return ReportError(kCommand, table.status().WithContext(*table_path));
    PrefillWorkerOptions o;
    o.listen_address = a.listen;
    o.decode_addresses = SplitList(a.decode);
    if (o.decode_addresses.empty())
      return ReportError(kCommand, Status::InvalidArgument("--role prefill needs --decode HOST:PORT[,...]"));
    auto c = Options(a, "prefill");
    if (!c.ok()) return ReportError(kCommand, c.status());
    o.client_connection = *c;
    o.decode_connection = *c;
    o.decode_connection.shape_bytes_per_second = GbpsToBytesPerSecond(a.shape_gbps);
    o.model_id = std::filesystem::path(*dir).filename().string();
    auto latency_model = lab::ParseWorkerLatencyModel(a.latency_model);
    if (!latency_model.ok()) return ReportError(kCommand, latency_model.status());
    o.controller.model = *latency_model;
    o.controller.bandit = !a.no_bandit;
    o.encode_threads = a.codec_threads;
    if (std::filesystem::exists(*dir + "/head_scores.json")) {
      auto scores = HeadScores::Load(*dir + "/head_scores.json");
      if (scores.ok()) head_scores = std::make_unique<HeadScores>(std::move(*scores));
      o.head_scores = head_scores.get();
    }
    if (a.store.backend != "none") {
      auto opened = OpenPoolBackend(a.store);
      if (!opened.ok()) return ReportError(kCommand, opened.status());
      pool = std::move(*opened);
    }
    o.pool = pool.get();
    o.pool_store_profiles = SplitList(a.pool_profiles);
    o.pool_chunk_tokens = a.pool_chunk_tokens;
    o.default_workload = a.workload;
    auto w = PrefillWorker::Start(tcp, model->get(), std::move(*table), o);
    if (!w.ok()) return ReportError(kCommand, w.status());
    prefill = std::move(*w);
    address = prefill->address();
  }
  if (Status s = a.address_file.empty() ? Status::Ok() : lab::WriteAddressFile(a.address_file, address);
      !s.ok())
    return ReportError(kCommand, s);
  Progress(kCommand, "{} worker listening on {}; Ctrl-C stops", a.role, address);
  fmt::print("{}\n", address);
  std::fflush(stdout);
  WaitForStopSignal(a.duration_seconds);
  if (decode) {
    decode->Stop();
    Progress(kCommand, "stopped: {} requests answered, {} frames refused, {} peers refused",
             decode->completed(), decode->refused_frames(), decode->auth_failures());
  }
  if (prefill) prefill->Stop();
  return 0;
}

RunFn SetupServe(CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  sub.description(
      "Run one worker of disaggregated (prefill/decode separated) serving over authenticated "
      "TCP or UCX (--transport). The decode worker receives KV frames layer by layer, decodes each chunk record as it "
      "arrives, refuses frames that fail a checksum or are incomplete, imports the KV and "
      "generates. The prefill worker answers `kvserve router` requests (workload, SLO, quality "
      "floor): it prefills, asks the controller for a profile at the measured bandwidth, streams "
      "the encoded KV to a decode worker (failing over to the next --decode address and "
      "re-sending on errors), feeds the observed KV latency back to the bandit, and returns the "
      "tokens with per-stage timings. Both print their address on stdout. Secret: --secret-file "
      "or $KVSERVE_SECRET (the same on every worker and router). docs/e2e.md has the protocol.");
  sub.add_option("--role", a->role, "prefill | decode")->required();
  sub.add_option("--model,-m", a->model,
                 "HF model directory (default: the first under <data>/models/; none there is an "
                 "error), or `random` for a random-weight Qwen2 model (meaningless output)");
  sub.add_option("--listen", a->listen, "address to listen on (port 0 picks one)");
  sub.add_option("--address-file", a->address_file, "also write the bound address to this file");
  sub.add_option("--secret-file", a->secret_file, "shared secret (else $KVSERVE_SECRET)");
  sub.add_option("--decode", a->decode, "prefill: decode worker addresses, tried in order");
  sub.add_option("--table", a->table,
                 "prefill: profile table JSON the controller chooses from (default: the model's "
                 "measured table, <data>/configs/profiles/<model>-unified.json; none is an error)");
  sub.add_option("--workload", a->workload,
                 "prefill: workload of requests that name none (default: unified when the table "
                 "has it, else its first)");
  sub.add_option("--shape-gbps", a->shape_gbps,
                 "prefill: pace KV transfers at this rate (token bucket; emulates a link)");
  sub.add_option("--latency-model", a->latency_model, "prefill: streamed (default) | serial");
  sub.add_flag("--no-bandit", a->no_bandit, "prefill: analytical choice only");
  sub.add_option("--pool", a->store.backend,
                 "prefill: prefix pool none | memory | redis | redis-cluster")
      ->check(CLI::IsMember({"none", "memory", "redis", "redis-cluster"}))
      ->capture_default_str();
  AddRedisFlags(&sub, &a->store);
  sub.add_option("--pool-budget-mb", a->store.budget_mb, "prefill: memory pool budget");
  AddTransportFlags(&sub, &a->transport);
  sub.add_option("--pool-profiles", a->pool_profiles,
                 "prefill: store missed prefixes under these profiles (default: the one sent)");
  sub.add_option("--pool-chunk-tokens", a->pool_chunk_tokens,
                 "prefill: tokens per pool chunk (prompts sharing their first chunks share them)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--threads", a->threads, "model threads, BLAS included (0 = all cores)");
  sub.add_option("--codec-threads", a->codec_threads, "encode/decode threads");
  sub.add_option("--timeout", a->timeout_seconds, "idle timeout of every network wait, seconds");
  sub.add_option("--duration", a->duration_seconds, "stop after this many seconds (0 = on Ctrl-C)");
  return [a] { return RunServe(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(serve, "Run a prefill or decode worker of disaggregated serving",
                kvserve::cli::SetupServe);
