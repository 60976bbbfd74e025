// Copyright kvserve authors. `kvserve serve --role prefill|decode`: run one
// worker of disaggregated serving over the authenticated TCP transport
// (docs/e2e.md).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/serve_worker.h"
#include "pool_cli.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "serve";

struct ServeArgs : lab::ServeWorkerOptions {
  std::string model;
  std::string secret_file;
};

int RunServe(const ServeArgs& a) {
  if (a.role != "prefill" && a.role != "decode")
    return ReportError(kCommand, Status::InvalidArgument("--role must be prefill or decode"));
  auto dir = ServeModelDirectory(kCommand, a.model);
  if (!dir.ok()) return ReportError(kCommand, dir.status());
  auto secret = LoadServeSecret(kCommand, a.secret_file);
  if (!secret.ok()) return ReportError(kCommand, secret.status());
  auto data = DataDirectory();
  const std::string profiles =
      data.ok() ? lab::DataPath(*data, "configs/profiles") : "configs/profiles";
  Status s = lab::RunServeWorker(
      a, *dir, profiles, *secret,
      [&](const std::string& address) {
        Progress(kCommand, "{} worker listening on {}; Ctrl-C stops", a.role, address);
        fmt::print("{}\n", address);
        std::fflush(stdout);
      },
      ProgressTo(kCommand));
  return s.ok() ? 0 : ReportError(kCommand, s);
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
                 "prefix pool none | memory | redis | redis-cluster (prefill: looks prompts up and "
                 "stores them; decode: the same shared pool, whose hits it then fetches itself; "
                 "memory is prefill only)")
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
  sub.add_option("--max-decode-connections", a->max_decode_connections,
                 "prefill: requests generating at once on one decode worker (the next request's "
                 "prefill runs while they generate; keep the sum over prefill workers within the "
                 "decode worker's admission, 16)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
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
