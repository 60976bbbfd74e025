// Copyright kvserve authors. `kvserve pool`: run the KV pool server and talk
// to it (put/get/lookup/stats), and `pool bench` to measure transfer goodput
// to a pool over a (possibly tc- or token-bucket-shaped) link.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "kvserve/controller.h"
#include "kvserve/pool.h"
#include "kvserve/transport.h"
#include "serve_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "pool";

struct PoolArgs {
  // Shared.
  std::string secret_file;
  double timeout_seconds = 30;
  uint64_t max_message_mb = 1024;
  // serve.
  std::string listen = "127.0.0.1:7400";
  uint64_t budget_mb = 1024;
  std::string backend = "memory";
  std::string redis_host = "127.0.0.1";
  int redis_port = 6379;
  std::string redis_prefix = "kvserve";
  double duration_seconds = 0;
  // client.
  std::string server = "127.0.0.1:7400";
  std::string model = "default";
  std::string hash_hex;
  std::string profile = "none";
  std::string file;
  // bench.
  uint64_t bench_mb = 64;
  int count = 3;
  double shape_gbps = 0;
  bool json = false;
};

Result<std::string> LoadSecret(const PoolArgs& a) {
  if (!a.secret_file.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(a.secret_file));
    std::string s(bytes.begin(), bytes.end());
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.empty()) return Status::InvalidArgument("secret file " + a.secret_file + " is empty");
    return s;
  }
  if (const char* env = std::getenv("KVSERVE_SECRET"); env != nullptr && *env != '\0')
    return std::string(env);
  Progress(kCommand, "warning: no --secret-file or KVSERVE_SECRET: peers are not authenticated");
  return std::string();
}

Result<ConnectionOptions> ConnOptions(const PoolArgs& a, std::string local_id) {
  ConnectionOptions o;
  KVSERVE_ASSIGN_OR_RETURN(o.secret, LoadSecret(a));
  o.local_id = std::move(local_id);
  o.io_timeout_seconds = a.timeout_seconds;
  o.max_message_bytes = a.max_message_mb << 20;
  o.shape_bytes_per_second = GbpsToBytesPerSecond(a.shape_gbps);
  return o;
}

Result<uint64_t> ParseHash(const std::string& hex) {
  if (hex.empty() || hex.size() > 16 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return Status::InvalidArgument("--hash must be 1-16 hex digits (the prefix hash)");
  return std::strtoull(hex.c_str(), nullptr, 16);
}

int RunServe(const PoolArgs& a) {
  auto options = ConnOptions(a, "kvserve-pool");
  if (!options.ok()) return ReportError(kCommand, options.status());
  std::unique_ptr<KvPool> pool;
  if (a.backend == "memory") {
    pool = NewMemoryPool({.budget_bytes = a.budget_mb << 20});
  } else if (a.backend == "redis") {
    RedisPoolOptions ro;
    ro.host = a.redis_host;
    ro.port = a.redis_port;
    ro.key_prefix = a.redis_prefix;
    auto r = NewRedisPool(ro);
    if (!r.ok()) return ReportError(kCommand, r.status());
    pool = std::move(*r);
  } else {
    return ReportError(kCommand, Status::InvalidArgument("--backend must be memory or redis"));
  }
  // Block the stop signals before threads start so only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto tcp = NewTcpTransport();
  PoolServerOptions so;
  so.listen_address = a.listen;
  so.connection = *options;
  RaiseOpenFileLimit(kCommand, static_cast<uint64_t>(so.admission.max_unauthenticated) +
                                   static_cast<uint64_t>(so.admission.max_connections) + 256);
  auto server = PoolServer::Start(tcp.get(), pool.get(), so);
  if (!server.ok()) return ReportError(kCommand, server.status());
  Progress(kCommand, "serving a {} pool on {} (budget {} MiB); Ctrl-C stops", a.backend,
           (*server)->address(), a.budget_mb);
  std::fflush(stdout);
  if (a.duration_seconds > 0) {
    timespec ts{static_cast<time_t>(a.duration_seconds),
                static_cast<long>((a.duration_seconds - static_cast<time_t>(a.duration_seconds)) * 1e9)};
    while (sigtimedwait(&signals, nullptr, &ts) < 0 && errno == EINTR) {
    }
  } else {
    int sig = 0;
    sigwait(&signals, &sig);
  }
  (*server)->Stop();
  auto stats = pool->Stats();
  if (stats.ok())
    Progress(kCommand, "stopped: {} entries, {}, {} hits, {} misses, {} evictions, {} refused peers",
             stats->entries, HumanBytes(stats->bytes), stats->hits, stats->misses,
             stats->evictions, (*server)->auth_failures());
  return 0;
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
  auto tcp = NewTcpTransport();
  auto pool = Client(a, tcp.get());
  if (!pool.ok()) return ReportError(kCommand, pool.status());
  if (op == "stats") {
    auto s = (*pool)->Stats();
    if (!s.ok()) return ReportError(kCommand, s.status());
    fmt::print("entries {}\nbytes {}\nhits {}\nmisses {}\nevictions {}\n", s->entries, s->bytes,
               s->hits, s->misses, s->evictions);
    return 0;
  }
  auto hash = ParseHash(a.hash_hex);
  if (!hash.ok()) return ReportError(kCommand, hash.status());
  if (op == "lookup") {
    auto entries = (*pool)->Lookup(a.model, *hash);
    if (!entries.ok()) return ReportError(kCommand, entries.status());
    for (const auto& e : *entries) fmt::print("{}\t{}\n", e.profile, e.bytes);
    return 0;
  }
  PoolKey key{a.model, *hash, a.profile};
  if (op == "put") {
    auto bytes = ReadBinaryFile(a.file);
    if (!bytes.ok()) return ReportError(kCommand, bytes.status());
    Status s = (*pool)->Put(key, *bytes);
    if (!s.ok()) return ReportError(kCommand, s);
    Progress(kCommand, "stored {} under {}/{:016x}/{}", HumanBytes(bytes->size()), a.model, *hash,
             a.profile);
    return 0;
  }
  if (op == "get") {
    std::vector<uint8_t> bytes;
    Status s = (*pool)->Get(key, &bytes);
    if (s.ok()) s = WriteBinaryFile(a.file, bytes);
    if (!s.ok()) return ReportError(kCommand, s);
    return 0;
  }
  if (op == "delete") {
    Status s = (*pool)->Delete(key);
    return s.ok() ? 0 : ReportError(kCommand, s);
  }
  return ReportError(kCommand, Status::InvalidArgument("unknown operation " + op));
}

// Puts and gets a random value `count` times; prints the goodput of each
// direction (bytes / request-to-reply seconds), the numbers the netns test
// compares with the tc rate.
int RunBench(const PoolArgs& a) {
  auto tcp = NewTcpTransport();
  auto pool = Client(a, tcp.get());
  if (!pool.ok()) return ReportError(kCommand, pool.status());
  std::vector<uint8_t> value(a.bench_mb << 20);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= value.size(); i += 8) {
    uint64_t r = rng();
    std::memcpy(value.data() + i, &r, 8);
  }
  std::vector<double> put_gbps, get_gbps;
  std::vector<uint8_t> got;
  for (int i = 0; i < a.count; ++i) {
    PoolKey key{"bench", static_cast<uint64_t>(i), "none"};
    double t0 = NowSeconds();
    Status s = (*pool)->Put(key, value);
    double t1 = NowSeconds();
    if (s.ok()) s = (*pool)->Get(key, &got);
    double t2 = NowSeconds();
    if (s.ok()) s = (*pool)->Delete(key);
    if (!s.ok()) return ReportError(kCommand, s);
    put_gbps.push_back(BytesPerSecondToGbps(value.size() / (t1 - t0)));
    get_gbps.push_back(BytesPerSecondToGbps(value.size() / (t2 - t1)));
    Progress(kCommand, "round {}: put {:.3f} Gbps, get {:.3f} Gbps", i, put_gbps.back(),
             get_gbps.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (a.json) {
    fmt::print("{{\"bytes\": {}, \"count\": {}, \"shape_gbps\": {}, \"put_gbps\": {:.4f}, "
               "\"get_gbps\": {:.4f}, \"put_gbps_max\": {:.4f}, \"get_gbps_max\": {:.4f}}}\n",
               value.size(), a.count, a.shape_gbps, median(put_gbps), median(get_gbps),
               *std::max_element(put_gbps.begin(), put_gbps.end()),
               *std::max_element(get_gbps.begin(), get_gbps.end()));
  } else {
    fmt::print("put_gbps {:.4f}\nget_gbps {:.4f}\n", median(put_gbps), median(get_gbps));
  }
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
    c->add_option("--secret-file", a->secret_file, "File holding the shared secret");
    c->add_option("--timeout", a->timeout_seconds, "I/O idle timeout, seconds")->capture_default_str();
    c->add_option("--max-message-mb", a->max_message_mb, "Largest message accepted, MiB")
        ->capture_default_str();
  };
  auto serve = sub.add_subcommand("serve", "Run a pool server until SIGINT/SIGTERM");
  common(serve);
  serve->add_option("--listen", a->listen, "host:port to listen on")->capture_default_str();
  serve->add_option("--budget-mb", a->budget_mb, "Byte budget of the memory backend, MiB")
      ->capture_default_str();
  serve->add_option("--backend", a->backend, "memory or redis")->capture_default_str();
  serve->add_option("--redis-host", a->redis_host, "Redis host")->capture_default_str();
  serve->add_option("--redis-port", a->redis_port, "Redis port")->capture_default_str();
  serve->add_option("--redis-prefix", a->redis_prefix, "Key namespace in Redis")
      ->capture_default_str();
  serve->add_option("--duration", a->duration_seconds, "Stop after this many seconds (0: never)");
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
  bench->add_option("--mb", a->bench_mb, "Value size, MiB")->capture_default_str();
  bench->add_option("--count", a->count, "Rounds (the median is printed)")->capture_default_str();
  bench->add_option("--shape-gbps", a->shape_gbps,
                    "Token-bucket shaping of what this client sends, Gbps (0: off)");
  bench->add_flag("--json", a->json, "One JSON line");
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
