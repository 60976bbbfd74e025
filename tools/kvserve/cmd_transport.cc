// Copyright kvserve authors. `kvserve transport serve|bench`: a frame sink and
// a frame sender that measure the goodput of layer-streamed KV frames over
// our TCP or UCX, on loopback or on tc-shaped links (scripts/
// transport_bench.sh, tests/netns_transport_test.sh).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "command.h"
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

Result<ConnectionOptions> Options(const TransportArgs& a, const std::string& id,
                                  std::string* secret) {
  ConnectionOptions o;
  KVSERVE_ASSIGN_OR_RETURN(o.secret, LoadServeSecret(kCommand, a.secret_file));
  *secret = o.secret;
  o.local_id = id;
  o.io_timeout_seconds = a.timeout_seconds;
  o.handshake_timeout_seconds = std::min(a.timeout_seconds, 10.0);
  o.max_message_bytes = uint64_t{1} << 30;
  o.shape_bytes_per_second = GbpsToBytesPerSecond(a.shape_gbps);
  return o;
}

// Receives frames on every connection until the peer leaves; counts them.
int RunServe(const TransportArgs& a) {
  std::string secret;
  auto options = Options(a, "transport-sink", &secret);
  if (!options.ok()) return ReportError(kCommand, options.status());
  auto transport = MakeTransport(a.transport, secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  BlockStopSignals();
  auto listener = (*transport)->Listen(a.listen);
  if (!listener.ok()) return ReportError(kCommand, listener.status());
  const std::string address = (*listener)->Address();
  if (!a.address_file.empty()) {
    const std::string tmp = a.address_file + ".tmp";
    { std::ofstream(tmp) << address << "\n"; }
    std::rename(tmp.c_str(), a.address_file.c_str());
  }
  Progress(kCommand, "frame sink ({}) listening on {}", a.transport.kind, address);
  fmt::print("{}\n", address);
  std::fflush(stdout);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> frames{0}, bytes{0};
  std::list<std::thread> peers;
  std::thread acceptor([&] {
    while (!stop.load()) {
      auto c = Connection::Accept(**listener, *options, 0.2);
      if (!c.ok()) {
        if (c.status().code() != StatusCode::kTimeout && !stop.load())
          Progress(kCommand, "refused a peer: {}", c.status().ToString());
        continue;
      }
      peers.emplace_back([&, connection = std::shared_ptr<Connection>(std::move(*c))] {
        while (!stop.load()) {
          auto frame = ReceiveFrame(*connection, {}, 0.5);
          if (frame.ok()) {
            frames.fetch_add(1);
            bytes.fetch_add(static_cast<int64_t>(frame->frame_bytes));
            continue;
          }
          if (frame.status().code() == StatusCode::kTimeout) continue;
          if (frame.status().code() != StatusCode::kUnavailable)
            Progress(kCommand, "peer {}: {}", connection->peer_id(), frame.status().ToString());
          return;
        }
      });
    }
  });
  WaitForStopSignal(a.duration_seconds);
  stop = true;
  (*listener)->Close();
  acceptor.join();
  for (auto& t : peers) t.join();
  Progress(kCommand, "stopped: {} frames, {} received", frames.load(),
           HumanBytes(static_cast<uint64_t>(bytes.load())));
  return 0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sends `count` frames of each size (header + records of record_kb) and
// reports the goodput of each: frame bytes / (Begin to the receiver's ack).
int RunBench(const TransportArgs& a) {
  std::vector<double> sizes;
  for (const std::string& s : SplitList(a.sizes_mb)) {
    try {
      sizes.push_back(std::stod(s));
    } catch (const std::exception&) {
      return ReportError(kCommand, Status::InvalidArgument("--sizes-mb: '" + s + "' is not a number"));
    }
    if (!(sizes.back() > 0) || sizes.back() > 1024)
      return ReportError(kCommand, Status::InvalidArgument("--sizes-mb: sizes must be in (0, 1024]"));
  }
  if (sizes.empty()) return ReportError(kCommand, Status::InvalidArgument("--sizes-mb is empty"));
  std::string secret;
  auto options = Options(a, "transport-bench", &secret);
  if (!options.ok()) return ReportError(kCommand, options.status());
  BandwidthEstimator estimator;
  options->goodput = [&estimator](std::string_view peer, double bytes, double seconds) {
    (void)estimator.Observe(peer, bytes, seconds, MonotonicSeconds());
  };
  auto transport = MakeTransport(a.transport, secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  auto connection = Connection::Dial(**transport, a.server, *options);
  if (!connection.ok()) return ReportError(kCommand, connection.status());
  const size_t largest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()) * 1048576);
  std::vector<uint8_t> payload(largest);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= payload.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(payload.data() + i, &r, 8);
  }
  const std::vector<uint8_t> header(64, 0x5A);
  const size_t record = static_cast<size_t>(a.record_kb) << 10;
  FrameSender sender(connection->get());
  uint64_t transfer = 0;
  const std::string tls = a.transport.kind == "ucx"
                              ? (a.transport.ucx_tls.empty() ? "default" : a.transport.ucx_tls)
                              : "-";
  for (double mb : sizes) {
    const size_t frame_bytes = static_cast<size_t>(mb * 1048576);
    std::vector<double> gbps, busy_gbps;
    for (int round = 0; round < a.warmup + a.count; ++round) {
      Status s = sender.Begin(++transfer, header);
      for (size_t off = 0; s.ok() && off < frame_bytes; off += record)
        s = sender.SendRecord(
            std::span<const uint8_t>(payload).subspan(off, std::min(record, frame_bytes - off)));
      Result<TransferStats> stats = s.ok() ? sender.Finish() : Result<TransferStats>(s);
      if (!stats.ok())
        return ReportError(kCommand, stats.status().WithContext(
                                         fmt::format("frame {} of {} MiB", round, mb)));
      if (round < a.warmup) continue;
      const double g = BytesPerSecondToGbps(static_cast<double>(stats->frame_bytes) /
                                            stats->elapsed_seconds);
      const double b = BytesPerSecondToGbps(static_cast<double>(stats->wire_bytes) /
                                            stats->busy_seconds);
      gbps.push_back(g);
      busy_gbps.push_back(b);
      if (a.per_frame) {
        fmt::print("{{\"frame\":{},\"frame_mib\":{},\"gbps\":{:.4f},\"busy_gbps\":{:.4f},"
                   "\"estimate_gbps\":{:.4f}}}\n",
                   transfer, mb, g, b,
                   BytesPerSecondToGbps(estimator.Estimate((*connection)->peer_id())));
        std::fflush(stdout);
      }
    }
    const double estimate = BytesPerSecondToGbps(estimator.Estimate((*connection)->peer_id()));
    if (a.json) {
      fmt::print("{{\"transport\":\"{}\",\"tls\":\"{}\",\"frame_mib\":{},\"count\":{},"
                 "\"gbps_median\":{:.4f},\"gbps_max\":{:.4f},\"gbps_min\":{:.4f},"
                 "\"busy_gbps_median\":{:.4f},\"estimate_gbps\":{:.4f}}}\n",
                 a.transport.kind, tls, mb, a.count, Median(gbps),
                 *std::max_element(gbps.begin(), gbps.end()),
                 *std::min_element(gbps.begin(), gbps.end()), Median(busy_gbps), estimate);
    } else if (!a.per_frame) {
      fmt::print("{} ({}) {:>6} MiB: median {:.2f} Gbps (min {:.2f}, max {:.2f}), estimate {:.2f} Gbps\n",
                 a.transport.kind, tls, mb, Median(gbps),
                 *std::min_element(gbps.begin(), gbps.end()),
                 *std::max_element(gbps.begin(), gbps.end()), estimate);
    }
    std::fflush(stdout);
  }
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
