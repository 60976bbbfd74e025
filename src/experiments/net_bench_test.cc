// Copyright kvserve authors. The transfer benches: the pool bench runs every
// round of every size on a real pool and leaves it empty; a pool that
// returns other bytes is caught; the transport bench's frames all reach a
// frame sink, which counts every byte; sizes lists are checked.
#include "experiments/net_bench.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "pool/forwarding_pool_test_util.h"

namespace kvserve::lab {
namespace {

TEST(PoolBenchTest, EveryRoundOfEverySize) {
  auto pool = NewMemoryPool({.budget_bytes = uint64_t{64} << 20});
  std::vector<PoolBenchRound> rounds;
  auto rows = RunPoolBench(*pool, {1 << 20, 3 << 18}, 3,
                           [&](const PoolBenchRound& r) { rounds.push_back(r); });
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].bytes, 1u << 20);
  EXPECT_EQ((*rows)[1].bytes, 3u << 18);
  ASSERT_EQ(rounds.size(), 6u);
  for (const PoolBenchRow& r : *rows) {
    EXPECT_EQ(r.put_gbps.count, 3u);
    EXPECT_GT(r.put_gbps.min, 0);
    EXPECT_LE(r.get_gbps.min, r.get_gbps.median);
    EXPECT_LE(r.get_gbps.median, r.get_gbps.max);
  }
  auto stats = pool->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->entries, 0u);  // every value was deleted again
  EXPECT_EQ(RunPoolBench(*pool, {}, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RunPoolBench(*pool, {1024}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*rows)[0].records_gbps.count, 0u);  // records were off
  EXPECT_NE((*rows)[0].Json("memory", 3, 0).find("\"records_gbps\": null"), std::string::npos);
}

TEST(PoolBenchTest, RecordRoundsGetTheStoredFrameRecordByRecord) {
  auto pool = NewMemoryPool({.budget_bytes = uint64_t{64} << 20});
  std::vector<PoolBenchRound> rounds;
  auto rows = RunPoolBench(
      *pool, {4 << 20}, 2, [&](const PoolBenchRound& r) { rounds.push_back(r); }, true);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rounds.size(), 2u);
  for (const PoolBenchRound& r : rounds) EXPECT_GT(r.records_gbps, 0);
  EXPECT_EQ((*rows)[0].records_gbps.count, 2u);
  EXPECT_GE((*rows)[0].bytes, uint64_t{4} << 20);  // a frame of the size, header included
  EXPECT_EQ(pool->Stats()->entries, 0u);
}

// A pool that flips a byte of what it returns.
class LyingPool final : public pooltest::ForwardingPool {
 public:
  using ForwardingPool::ForwardingPool;
  Status Get(const PoolKey& key, std::vector<uint8_t>* value) override {
    Status s = ForwardingPool::Get(key, value);
    if (s.ok() && !value->empty()) (*value)[value->size() / 2] ^= 1;
    return s;
  }
};

TEST(PoolBenchTest, OtherBytesAreCorruption) {
  auto base = NewMemoryPool();
  LyingPool pool(base.get());
  EXPECT_EQ(RunPoolBench(pool, {4096}, 2).status().code(), StatusCode::kCorruption);
}

TEST(TransportBenchTest, SinkCountsEveryFrame) {
  auto transport = NewTcpTransport();
  auto listener = transport->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  ConnectionOptions options;
  options.secret = "net-bench-test";
  std::promise<void> done;
  std::shared_future<void> finished = done.get_future().share();
  FrameSinkCounts counts;
  std::thread sink(
      [&] { counts = RunFrameSink(**listener, options, [&] { finished.wait(); }, {}); });
  BandwidthEstimator estimator;
  ConnectionOptions client = options;
  client.goodput = [&](std::string_view peer, double bytes, double seconds) {
    (void)estimator.Observe(peer, bytes, seconds, MonotonicSeconds());
  };
  auto connection = Connection::Dial(*transport, (*listener)->Address(), client);
  ASSERT_TRUE(connection.ok()) << connection.status().ToString();
  std::vector<TransportBenchFrame> frames;
  const TransportBenchOptions o{
      .sizes_mb = {0.25, 1}, .count = 3, .warmup = 1, .record_bytes = 64 << 10};
  auto rows = RunTransportBench(**connection, estimator, o,
                                [&](const TransportBenchFrame& f) { frames.push_back(f); });
  (*connection)->Close();
  done.set_value();
  sink.join();
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(frames.size(), 6u);  // measured frames only
  for (const TransportBenchRow& r : *rows) {
    EXPECT_EQ(r.gbps.count, 3u);
    EXPECT_GT(r.gbps.min, 0);
    EXPECT_LE(r.gbps.median, r.gbps.max);
  }
  EXPECT_EQ(frames.back().transfer, 8u);  // warm-up frames are sent too
  EXPECT_EQ(counts.frames, 8);
  EXPECT_GE(counts.bytes, 4 * (int64_t{1} << 18) + 4 * (int64_t{1} << 20));
}

TEST(TransportBenchTest, SizesAreChecked) {
  auto sizes = ParseFrameSizesMb("1, 2.5,64");
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(*sizes, (std::vector<double>{1, 2.5, 64}));
  for (const char* bad : {"", "1,x", "0", "2048", "-1"})
    EXPECT_EQ(ParseFrameSizesMb(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace kvserve::lab
