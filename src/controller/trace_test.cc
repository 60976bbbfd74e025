// Copyright kvserve authors.
#include <gtest/gtest.h>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

TEST(TraceTest, ParsesCsvAndLooksUpPiecewiseConstant) {
  Result<Trace> t = Trace::FromCsv(
      "# comment\ntime_s,bandwidth_gbps,codec_slowdown\n0,40,1\n10,8,1.5\n20,8,1.5\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_DOUBLE_EQ(t->BandwidthAt(5.0), GbpsToBytesPerSecond(40));
  EXPECT_DOUBLE_EQ(t->BandwidthAt(10.0), GbpsToBytesPerSecond(8));
  EXPECT_DOUBLE_EQ(t->SlowdownAt(9.99), 1.0);
  EXPECT_DOUBLE_EQ(t->SlowdownAt(15.0), 1.5);
  EXPECT_DOUBLE_EQ(t->duration_seconds(), 20.0);
  Result<Trace> two = Trace::FromCsv("time_s,bandwidth_gbps\n0,10\n5,20\n");
  ASSERT_TRUE(two.ok());
  EXPECT_DOUBLE_EQ(two->SlowdownAt(1.0), 1.0);
}

TEST(TraceTest, RejectsMalformedCsv) {
  for (const char* bad : {"", "time,bw\n0,1\n1,1\n", "time_s,bandwidth_gbps\n0,1\n",
                          "time_s,bandwidth_gbps\n1,1\n2,1\n", "time_s,bandwidth_gbps\n0,1\n0,1\n",
                          "time_s,bandwidth_gbps\n0,-1\n1,1\n", "time_s,bandwidth_gbps\n0,x\n1,1\n",
                          "time_s,bandwidth_gbps\n0,1,1\n1,1\n"}) {
    EXPECT_EQ(Trace::FromCsv(bad).status().code(), StatusCode::kCorruption) << bad;
  }
}

TEST(TraceTest, GeneratorsModifiersAndCsvRoundTrip) {
  const Trace walk = Trace::RandomWalk(20, 5, 50, 0.1, 1.0, 100.0, 7);
  for (const TracePoint& p : walk.points()) {
    EXPECT_GE(BytesPerSecondToGbps(p.bandwidth), 5 - 1e-9);
    EXPECT_LE(BytesPerSecondToGbps(p.bandwidth), 50 + 1e-9);
  }
  const Trace t = walk.WithBandwidthDrop(30.5, 60.0, 4.0).WithCodecSlowdown(50.0, 1.5);
  EXPECT_DOUBLE_EQ(t.BandwidthAt(40.0), GbpsToBytesPerSecond(4.0));
  EXPECT_DOUBLE_EQ(t.BandwidthAt(60.0), walk.BandwidthAt(60.0));
  EXPECT_DOUBLE_EQ(t.BandwidthAt(30.0), walk.BandwidthAt(30.0));
  EXPECT_DOUBLE_EQ(t.SlowdownAt(49.0), 1.0);
  EXPECT_DOUBLE_EQ(t.SlowdownAt(99.0), 1.5);
  Result<Trace> back = Trace::FromCsv(t.ToCsv());
  ASSERT_TRUE(back.ok());
  for (double x = 0; x < 100; x += 0.7) {
    EXPECT_NEAR(back->BandwidthAt(x), t.BandwidthAt(x), 1e-8 * t.BandwidthAt(x));
  }
  const Trace steps = Trace::Steps({10, 20}, 5.0, 20.0);
  EXPECT_DOUBLE_EQ(steps.BandwidthAt(7.0), GbpsToBytesPerSecond(20));
  EXPECT_DOUBLE_EQ(steps.BandwidthAt(12.0), GbpsToBytesPerSecond(10));
}

}  // namespace
}  // namespace kvserve
