// Copyright kvserve authors. `kvserve transport serve|bench`: a frame sink and
// a frame sender that measure the goodput of layer-streamed KV frames over
// our TCP or UCX, on loopback or on tc-shaped links (scripts/
// transport_bench.sh, tests/netns_transport_test.sh).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/net_bench.h"
#include "kvserve/controller.h"
#include "kvserve/transport.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "transport";

struct TransportArgs {
  TransportFlags transport;
  std::string secret_file;
  double timeout_seconds = 30;
  // serve
  std::string listen = "127.0.0.1:7500";
  std::string address_file;
  double duration_seconds = 0;
  // bench
  std::string server = "127.0.0.1:7500";
  std::string sizes_mb = "1,2,4,8,16,32,64";
  int count = 5;
  int warmup = 1;
  uint64_t record_kb = 1024;
  double shape_gbps = 0;
  bool per_frame = false;
  bool json = false;
};

Result<ConnectionOptions> Options(const TransportArgs& a, const std::string& id) {
  return lab::PeerConnectionOptions({a.secret_file, id, a.timeout_seconds, uint64_t{1} << 30, a.shape_gbps},
                                    ProgressTo(kCommand));
}

// Receives frames on every connection until the peer leaves; counts them.
int RunServe(const TransportArgs& a) {
  auto options = Options(a, "transport-sink");
  if (!options.ok()) return ReportError(kCommand, options.status());
  auto transport = MakeTransport(a.transport, options->secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  auto got = lab::ServeFrameSink(
      **transport, a.listen, *options, a.address_file, a.duration_seconds,
      [&](const std::string& address) {
        Progress(kCommand, "frame sink ({}) listening on {}", a.transport.kind, address);
        fmt::print("{}\n", address);
        std::fflush(stdout);
      },
      ProgressTo(kCommand));
  if (!got.ok()) return ReportError(kCommand, got.status());
  Progress(kCommand, "stopped: {} frames, {} received", got->frames,
           HumanBytes(static_cast<uint64_t>(got->bytes)));
  return 0;
}

// Sends `count` frames of each size (header + records of record_kb) and
// reports the goodput of each: frame bytes / (Begin to the receiver's ack).
int RunBench(const TransportArgs& a) {
  auto sizes = lab::ParseFrameSizesMb(a.sizes_mb);
  if (!sizes.ok()) return ReportError(kCommand, sizes.status());
  auto options = Options(a, "transport-bench");
  if (!options.ok()) return ReportError(kCommand, options.status());
  BandwidthEstimator estimator;
  options->goodput = [&estimator](std::string_view peer, double bytes, double seconds) {
    (void)estimator.Observe(peer, bytes, seconds, MonotonicSeconds());
  };
  auto transport = MakeTransport(a.transport, options->secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  auto connection = Connection::Dial(**transport, a.server, *options);
  if (!connection.ok()) return ReportError(kCommand, connection.status());
  const std::string tls = a.transport.kind == "ucx"
                              ? (a.transport.ucx_tls.empty() ? "default" : a.transport.ucx_tls)
                              : "-";
  auto per_frame = [&](const lab::TransportBenchFrame& f) {
    if (!a.per_frame) return;
    fmt::print("{}", f.Json());
    std::fflush(stdout);
  };
  auto rows = lab::RunTransportBench(
      **connection, estimator,
      {.sizes_mb = *sizes, .count = a.count, .warmup = a.warmup, .record_bytes = a.record_kb << 10},
      per_frame);
  if (!rows.ok()) return ReportError(kCommand, rows.status());
  for (const lab::TransportBenchRow& r : *rows) {
    if (a.json || !a.per_frame)
      fmt::print("{}", a.json ? r.Json(a.transport.kind, tls, a.count) : r.Text(a.transport.kind, tls));
  }
  std::fflush(stdout);
  (*connection)->Close();
  return 0;
}

RunFn SetupTransport(CLI::App& sub) {
  auto a = std::make_shared<TransportArgs>();
  sub.description(
      "Goodput of layer-streamed frames over our TCP or UCX: `transport serve` is a frame sink, "
      "`transport bench` sends frames of each --sizes-mb (records of --record-kb) and reports "
      "frame bytes over Begin-to-ack seconds (median, min, max of --count frames after "
      "--warmup), and the bandwidth estimator fed by the transfers. The secret comes from "
      "--secret-file or KVSERVE_SECRET. scripts/transport_bench.sh runs the comparison.");
  sub.require_subcommand(1);
  auto common = [a](CLI::App* c) {
    AddConnectionFlags(c, &a->transport, &a->secret_file, &a->timeout_seconds);
  };
  auto serve = sub.add_subcommand("serve", "Receive frames until SIGINT/SIGTERM or --duration");
  common(serve);
  serve->add_option("--listen", a->listen, "host:port to listen on (port 0 picks one)")
      ->capture_default_str();
  serve->add_option("--address-file", a->address_file, "Also write the bound address here");
  serve->add_option("--duration", a->duration_seconds, "Stop after this many seconds (0: never)");
  auto bench = sub.add_subcommand("bench", "Send frames to a `transport serve` and report goodput");
  common(bench);
  bench->add_option("--server", a->server, "Frame sink host:port")->capture_default_str();
  bench->add_option("--sizes-mb", a->sizes_mb, "Frame sizes, MiB, comma-separated")
      ->capture_default_str();
  bench->add_option("--count", a->count, "Measured frames per size")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  bench->add_option("--warmup", a->warmup, "Unmeasured frames first per size")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  bench->add_option("--record-kb", a->record_kb, "Chunk record size, KiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  bench->add_option("--shape-gbps", a->shape_gbps, "Token-bucket shaping of the sender (0: off)");
  bench->add_flag("--per-frame", a->per_frame, "One JSON line per frame (with the estimate)");
  bench->add_flag("--json", a->json, "One JSON line per size");
  return [a, serve, bench]() -> int {
    if (serve->parsed()) return RunServe(*a);
    if (bench->parsed()) return RunBench(*a);
    return 1;
  };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(transport, "Frame sink and goodput benchmark over TCP or UCX",
                kvserve::cli::SetupTransport);
