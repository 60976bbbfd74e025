// Copyright kvserve authors. The transfer benchmarks of `kvserve pool bench`
// and `kvserve transport serve|bench`: goodput of pool puts/gets and of
// layer-streamed frames, as structs the CLI prints. Not part of the
// installed library.
#ifndef KVSERVE_EXPERIMENTS_NET_BENCH_H_
#define KVSERVE_EXPERIMENTS_NET_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/pool.h"
#include "kvserve/transport.h"

namespace kvserve::lab {

// One put + get of a value of `bytes` bytes: goodput of each direction in
// Gbps (bytes over request-to-reply seconds); with records on, also of a
// record-by-record get (GetRecords) of it, else 0.
struct PoolBenchRound {
  uint64_t bytes = 0;
  int round = 0;
  double put_gbps = 0, get_gbps = 0;
  double records_gbps = 0;
};
struct PoolBenchRow {
  uint64_t bytes = 0;
  SampleSummary put_gbps, get_gbps;  // over the rounds of this size
  SampleSummary records_gbps;        // count 0 when records were off
  // One JSON line: medians and maxima in Gbps, medians in GB/s, with the
  // backend, round count and shaping rate the run used (records_gbps is
  // null when records were off).
  std::string Json(const std::string& backend, int count, double shape_gbps) const;
  // "64 MiB: put_gbps 1.2345 get_gbps 2.3456\n" (medians).
  std::string Text() const;
};

// For each size in `sizes` (bytes; the order is kept), `count` (>= 1)
// rounds of Put, Get and Delete of a seeded random value under the key
// ("bench", round, "none") on `pool`, with `on_round` (may be empty) told
// of each round as it ends. With `records` the value is a raw frame of
// about that size (f32 KV of 512 tokens, 8 heads of 128 dims, 2 MiB
// records: a prefix chunk's shape) and each round also gets it record by
// record (KvPool::GetRecords, as a prefix hit does). A Get that returns
// other bytes than were put, or GetRecords other records than the frame's,
// is Corruption; the pool's first error is returned (InvalidArgument for
// no sizes or count < 1).
Result<std::vector<PoolBenchRow>> RunPoolBench(
    KvPool& pool, const std::vector<uint64_t>& sizes, int count,
    const std::function<void(const PoolBenchRound&)>& on_round = {}, bool records = false);

// "1,2.5,64" -> MiB sizes, each in (0, 1024]; InvalidArgument naming the
// bad item, or for an empty list.
Result<std::vector<double>> ParseFrameSizesMb(const std::string& list);

// How RunTransportBench sends: per size, `warmup` unmeasured then `count`
// measured frames of a 64-byte header and records of `record_bytes`.
struct TransportBenchOptions {
  std::vector<double> sizes_mb;
  int count = 5;
  int warmup = 1;
  size_t record_bytes = size_t{1} << 20;
};
// One measured frame: frame bytes over Begin-to-ack seconds (gbps), wire
// bytes over the sender's busy seconds (busy_gbps), and the estimate
// (Gbps) the estimator held for the peer after it.
struct TransportBenchFrame {
  uint64_t transfer = 0;
  double frame_mib = 0, gbps = 0, busy_gbps = 0, estimate_gbps = 0;
  std::string Json() const;  // one line
};
struct TransportBenchRow {
  double frame_mib = 0;
  SampleSummary gbps, busy_gbps;
  double estimate_gbps = 0;  // after the last frame of this size
  // One JSON line / one text line naming the transport and its UCX
  // transports (`tls`, "-" for TCP).
  std::string Json(const std::string& transport, const std::string& tls, int count) const;
  std::string Text(const std::string& transport, const std::string& tls) const;
};

// Sends the frames of `options` on `connection` (to a frame sink: anything
// that receives frames with ReceiveFrame). `estimator` is the one the
// connection's goodput callback feeds; it is only read, for the peer's
// estimate. `on_frame` (may be empty) sees each measured frame. The first
// send error is returned with the frame's round and size as context.
Result<std::vector<TransportBenchRow>> RunTransportBench(
    Connection& connection, const BandwidthEstimator& estimator,
    const TransportBenchOptions& options,
    const std::function<void(const TransportBenchFrame&)>& on_frame = {});

// What a frame sink received.
struct FrameSinkCounts {
  int64_t frames = 0, bytes = 0;
};
// A frame sink on `listener`: accepts every peer that authenticates with
// `options` and receives its frames until it leaves, counting them, while
// `wait` runs; when `wait` returns, closes the listener and joins every
// peer's thread, then returns the counts. Refused peers and receive errors
// other than a peer leaving are reported through `progress`.
FrameSinkCounts RunFrameSink(Listener& listener, const ConnectionOptions& options,
                             const std::function<void()>& wait, const Progress& progress);

// `kvserve transport serve`: listens on `listen` over `transport` (the stop
// signals blocked first), writes the bound address to `address_file` (when
// not empty) and tells `on_listening`, then runs a frame sink until
// SIGINT/SIGTERM, or for `duration_seconds` when > 0. The listen and
// address-file errors.
Result<FrameSinkCounts> ServeFrameSink(Transport& transport, const std::string& listen,
                                       const ConnectionOptions& options,
                                       const std::string& address_file, double duration_seconds,
                                       const std::function<void(const std::string&)>& on_listening,
                                       const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_NET_BENCH_H_
