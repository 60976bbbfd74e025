// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

TEST(BandwidthEstimatorTest, PriorThenFirstSampleReplacesIt) {
  BandwidthEstimatorOptions o;
  o.prior_bytes_per_second = 1e9;
  BandwidthEstimator e(o);
  EXPECT_DOUBLE_EQ(e.Estimate("a"), 1e9);
  ASSERT_TRUE(e.Observe("a", 4e8, 0.1, 1.0).ok());  // 4 GB/s
  EXPECT_DOUBLE_EQ(e.Estimate("a"), 4e9);
  EXPECT_DOUBLE_EQ(e.Estimate("b"), 1e9);  // peers are independent
  EXPECT_EQ(e.SampleCount("a"), 1);
}

TEST(BandwidthEstimatorTest, TracksAStepAndAveragesInverseBandwidth) {
  std::mt19937_64 rng(41);
  BandwidthEstimator e;
  double t = 0.0;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(e.Observe("p", 1e8, 1e8 / 3e9, t += 0.01).ok());
  EXPECT_NEAR(e.Estimate("p"), 3e9, 1e-6 * 3e9);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(e.Observe("p", 1e8, 1e8 / 1e9, t += 0.01).ok());
  EXPECT_NEAR(e.Estimate("p"), 1e9, 1e-3 * 1e9);
  // Alternating 1 and 3 GB/s: the estimate is near the harmonic mean (1.5
  // GB/s), which makes predicted latency (linear in 1/B) unbiased.
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(e.Observe("p", 1e8, 1e8 / (i % 2 ? 3e9 : 1e9), t += 0.01).ok());
  }
  EXPECT_NEAR(e.Estimate("p"), 1.5e9, 0.2e9);
}

TEST(BandwidthEstimatorTest, IdleGapLetsTheNextSampleDominate) {
  BandwidthEstimatorOptions o;
  o.alpha = 0.1;
  o.idle_time_constant_seconds = 1.0;
  BandwidthEstimator busy(o), idle(o);
  for (BandwidthEstimator* e : {&busy, &idle}) {
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(e->Observe("p", 1e9, 0.1, i * 0.01).ok());
  }
  ASSERT_TRUE(busy.Observe("p", 1e9, 1.0, 0.21).ok());   // back to back
  ASSERT_TRUE(idle.Observe("p", 1e9, 1.0, 30.0).ok());   // after 30 s silence
  EXPECT_GT(busy.Estimate("p"), 4e9);
  EXPECT_NEAR(idle.Estimate("p"), 1e9, 1e7);
}

TEST(BandwidthEstimatorTest, RejectsBadSamplesAndIgnoresTinyOnes) {
  BandwidthEstimator e;
  EXPECT_EQ(e.Observe("p", 0.0, 1.0, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.Observe("p", 1.0, -1.0, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(e.Observe("p", 100.0, 1e-7, 0.0).ok());
  EXPECT_EQ(e.SampleCount("p"), 0);
}

}  // namespace
}  // namespace kvserve
