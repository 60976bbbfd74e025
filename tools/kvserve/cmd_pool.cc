// Copyright kvserve authors. `kvserve pool`: run the KV pool server and talk
// to it (put/get/lookup/stats), and `pool bench` to measure transfer goodput
// to a pool over a (possibly tc- or token-bucket-shaped) link.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "experiments/net_bench.h"
#include "experiments/pool_client.h"
#include "kvserve/pool.h"
#include "kvserve/transport.h"
#include "pool_cli.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "pool";

struct PoolArgs {
  // Shared.
  std::string secret_file;
  double timeout_seconds = 30;
  uint64_t max_message_mb = 1024;
  TransportFlags transport;
  // serve (store.backend: memory | redis | redis-cluster).
  std::string listen = "127.0.0.1:7400";
  PoolBackendFlags store{.backend = "memory"};
  double duration_seconds = 0;
  // client.
  std::string server = "127.0.0.1:7400";
  std::string model = "default";
  std::string hash_hex;
  std::string profile = "none";
  std::string file;
  // bench (bench_backend: server | memory | redis | redis-cluster).
  std::string bench_backend = "server";
  std::string sizes_mb;
  uint64_t bench_mb = 64;
  int count = 3;
  double shape_gbps = 0;  // serve: what the server sends; bench: what the client sends
  bool records = false;
  bool json = false;
};

Result<ConnectionOptions> ConnOptions(const PoolArgs& a, std::string local_id) {
  return lab::PeerConnectionOptions({a.secret_file, std::move(local_id), a.timeout_seconds,
                                     a.max_message_mb << 20, a.shape_gbps},
                                    ProgressTo(kCommand));
}

int RunServe(const PoolArgs& a) {
  auto options = ConnOptions(a, "kvserve-pool");
  if (!options.ok()) return ReportError(kCommand, options.status());
  auto pool = OpenPoolBackend(a.store);
  if (!pool.ok()) return ReportError(kCommand, pool.status());
  BlockStopSignals();  // before the transport's threads start
  auto transport = MakeTransport(a.transport, options->secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  Status s = lab::RunPoolServer(**transport, **pool, a.listen, *options, a.duration_seconds,
                                a.store.backend, a.transport.kind, ProgressTo(kCommand));
  return s.ok() ? 0 : ReportError(kCommand, s);
}

Result<std::unique_ptr<KvPool>> Client(const PoolArgs& a, Transport* tcp,
                                       GoodputCallback goodput = {}) {
  KVSERVE_ASSIGN_OR_RETURN(ConnectionOptions o, ConnOptions(a, "kvserve-cli"));
  o.goodput = std::move(goodput);
  RemotePoolOptions ro;
  ro.address = a.server;
  ro.connection = o;
  ro.goodput_min_bytes = 1;
  return NewRemotePool(tcp, ro);
}

int RunClient(const std::string& op, const PoolArgs& a) {
  auto secret = LoadServeSecret(kCommand, a.secret_file);
  if (!secret.ok()) return ReportError(kCommand, secret.status());
  auto tcp = MakeTransport(a.transport, *secret);
  if (!tcp.ok()) return ReportError(kCommand, tcp.status());
  auto pool = Client(a, tcp->get());
  if (!pool.ok()) return ReportError(kCommand, pool.status());
  auto r = lab::RunPoolOperation(**pool, op, a.model, a.hash_hex, a.profile, a.file);
  if (!r.ok()) return ReportError(kCommand, r.status());
  fmt::print("{}", r->output);
  if (!r->note.empty()) Progress(kCommand, "{}", r->note);
  return 0;
}

// Puts and gets a random value `count` times per size; prints the goodput
// of each direction (bytes / request-to-reply seconds), the numbers the
// netns test compares with the tc rate and scripts/pool_cluster_bench.sh
// compares with redis-benchmark. --backend server goes through a `pool
// serve`; memory / redis / redis-cluster open that backend in this process.
int RunBench(const PoolArgs& a) {
  std::unique_ptr<Transport> transport;
  Result<std::unique_ptr<KvPool>> pool = Status::Internal("unset");
  auto sizes_mb = lab::ParseFrameSizesMb(a.sizes_mb.empty() ? std::to_string(a.bench_mb) : a.sizes_mb);
  if (!sizes_mb.ok()) return ReportError(kCommand, sizes_mb.status());
  if (a.bench_backend == "server") {
    auto secret = LoadServeSecret(kCommand, a.secret_file);
    if (!secret.ok()) return ReportError(kCommand, secret.status());
    auto t = MakeTransport(a.transport, *secret);
    if (!t.ok()) return ReportError(kCommand, t.status());
    transport = std::move(*t);
    pool = Client(a, transport.get());
  } else {
    PoolBackendFlags store = a.store;
    store.backend = a.bench_backend;
    pool = OpenPoolBackend(store);
  }
  if (!pool.ok()) return ReportError(kCommand, pool.status());
  std::vector<uint64_t> sizes;
  for (double mb : *sizes_mb) sizes.push_back(static_cast<uint64_t>(mb * (1 << 20)));
  auto rows = lab::RunPoolBench(
      **pool, sizes, a.count,
      [&](const lab::PoolBenchRound& r) {
        if (a.json) return;
        if (a.records)
          Progress(kCommand, "{} MiB round {}: put {:.3f} Gbps, get {:.3f} Gbps, by record {:.3f} Gbps",
                   r.bytes >> 20, r.round, r.put_gbps, r.get_gbps, r.records_gbps);
        else
          Progress(kCommand, "{} MiB round {}: put {:.3f} Gbps, get {:.3f} Gbps", r.bytes >> 20,
                   r.round, r.put_gbps, r.get_gbps);
      },
      a.records);
  if (!rows.ok()) return ReportError(kCommand, rows.status());
  for (const lab::PoolBenchRow& r : *rows)
    fmt::print("{}", a.json ? r.Json(a.bench_backend, a.count, a.shape_gbps) : r.Text());
  std::fflush(stdout);
  return 0;
}

RunFn SetupPool(CLI::App& sub) {
  auto a = std::make_shared<PoolArgs>();
  sub.description(
      "The KV pool: `pool serve` runs a pool server (embedded in-memory LRU or Redis backend) on "
      "the authenticated transport; put/get/delete/lookup/stats talk to one; `pool bench` "
      "measures transfer goodput to one. The shared secret comes from --secret-file or "
      "KVSERVE_SECRET. docs/transport.md describes the protocol.");
  sub.require_subcommand(1);
  auto common = [a](CLI::App* c) {
    AddConnectionFlags(c, &a->transport, &a->secret_file, &a->timeout_seconds);
    c->add_option("--max-message-mb", a->max_message_mb, "Largest message accepted, MiB")
        ->capture_default_str();
  };
  auto serve = sub.add_subcommand("serve", "Run a pool server until SIGINT/SIGTERM");
  common(serve);
  serve->add_option("--listen", a->listen, "host:port to listen on")->capture_default_str();
  serve->add_option("--budget-mb", a->store.budget_mb, "Byte budget of the memory backend, MiB")
      ->capture_default_str();
  serve->add_option("--backend", a->store.backend, "memory | redis | redis-cluster")
      ->check(CLI::IsMember({"memory", "redis", "redis-cluster"}))
      ->capture_default_str();
  AddRedisFlags(serve, &a->store);
  serve->add_option("--duration", a->duration_seconds, "Stop after this many seconds (0: never)");
  serve->add_option("--shape-gbps", a->shape_gbps,
                    "Token-bucket shaping of what the server sends (its replies), Gbps (0: off)")
      ->check(CLI::NonNegativeNumber);
  std::vector<std::pair<std::string, CLI::App*>> ops;
  for (const char* op : {"put", "get", "delete", "lookup", "stats"}) {
    auto c = sub.add_subcommand(op, std::string(op) + " on a pool server");
    common(c);
    c->add_option("--server", a->server, "Pool server host:port")->capture_default_str();
    if (std::string(op) != "stats") {
      c->add_option("--model", a->model, "Model id")->capture_default_str();
      c->add_option("--hash", a->hash_hex, "Prefix hash, hex")->required();
    }
    if (std::string(op) == "put" || std::string(op) == "get" || std::string(op) == "delete")
      c->add_option("--profile", a->profile, "Profile spec of the stored frame")
          ->capture_default_str();
    if (std::string(op) == "put" || std::string(op) == "get")
      c->add_option("--file", a->file, "Frame file to store / to write")->required();
    ops.emplace_back(op, c);
  }
  auto bench = sub.add_subcommand("bench", "Measure put/get goodput to a pool server");
  common(bench);
  bench->add_option("--server", a->server, "Pool server host:port")->capture_default_str();
  bench->add_option("--backend", a->bench_backend,
                    "server (a `pool serve` at --server) or a backend opened here: memory | "
                    "redis | redis-cluster")
      ->check(CLI::IsMember({"server", "memory", "redis", "redis-cluster"}))
      ->capture_default_str();
  AddRedisFlags(bench, &a->store);
  bench->add_option("--mb", a->bench_mb, "Value size, MiB")->capture_default_str();
  bench->add_option("--sizes-mb", a->sizes_mb, "Value sizes, MiB, comma-separated (overrides --mb)");
  bench->add_option("--count", a->count, "Rounds (the median is printed)")->capture_default_str();
  bench->add_option("--shape-gbps", a->shape_gbps,
                    "Token-bucket shaping of what this client sends, Gbps (0: off)");
  bench->add_flag("--records", a->records,
                  "Store raw frames of about each size and also get each record by record, as a "
                  "prefix hit does (records_gbps)");
  bench->add_flag("--json", a->json, "One JSON line per size");
  return [a, serve, bench, ops]() -> int {
    if (serve->parsed()) return RunServe(*a);
    if (bench->parsed()) return RunBench(*a);
    for (const auto& [name, c] : ops)
      if (c->parsed()) return RunClient(name, *a);
    return 1;
  };
}

}  // namespace

KVSERVE_COMMAND(pool, "KV pool server and client (put/get/lookup/stats/bench)", SetupPool);

}  // namespace kvserve::cli
