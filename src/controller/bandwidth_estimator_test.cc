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
  o.change_threshold = 0.0;  // the EWMA alone (change detection tested below)
  BandwidthEstimator busy(o), idle(o);
  for (BandwidthEstimator* e : {&busy, &idle}) {
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(e->Observe("p", 1e9, 0.1, i * 0.01).ok());
  }
  ASSERT_TRUE(busy.Observe("p", 1e9, 1.0, 0.21).ok());   // back to back
  ASSERT_TRUE(idle.Observe("p", 1e9, 1.0, 30.0).ok());   // after 30 s silence
  EXPECT_GT(busy.Estimate("p"), 4e9);
  EXPECT_NEAR(idle.Estimate("p"), 1e9, 1e7);
}

// Seeded random levels and 5% lognormal goodput noise: a step of 2x or more
// is tracked after one sample (the estimate is that sample), while noise
// alone raises almost no false changes and the spread estimate converges to
// the noise level.
TEST(BandwidthEstimatorTest, DetectsStepsInOneSampleAndIgnoresNoise) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    BandwidthEstimator e;
    const double level = std::exp(std::uniform_real_distribution<double>(20.0, 25.0)(rng));
    double t = 0.0;
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(e.Observe("p", 1e9, 1e9 / level * std::exp(noise(rng)), t += 0.05).ok());
    }
    const BandwidthEstimate before = e.Query("p");
    EXPECT_LE(before.changes, 1) << "trial " << trial;  // noise alone
    EXPECT_NEAR(before.log_sigma, 0.05, 0.03);
    EXPECT_NEAR(before.bytes_per_second / level, 1.0, 0.12);
    // A step up or down by 2x..10x: one sample moves the estimate there.
    const double factor = std::exp(std::uniform_real_distribution<double>(std::log(2.0),
                                                                          std::log(10.0))(rng));
    const double next = unit(rng) < 0.5 ? level * factor : level / factor;
    const double sample_seconds = 1e9 / next * std::exp(noise(rng));
    ASSERT_TRUE(e.Observe("p", 1e9, sample_seconds, t += 0.05).ok());
    const BandwidthEstimate after = e.Query("p");
    EXPECT_EQ(after.changes, before.changes + 1);
    EXPECT_DOUBLE_EQ(after.bytes_per_second, 1e9 / sample_seconds);
    EXPECT_DOUBLE_EQ(after.last_change_seconds, t - sample_seconds);
    // The step is not noise: the spread does not grow with it (it is the
    // spread as of the last sample within 3 sigma before the step).
    EXPECT_LE(after.log_sigma, before.log_sigma * (1 + 1e-12));
    EXPECT_GT(after.log_sigma, 0.5 * before.log_sigma);
    // A transfer that began before the change and completes only now
    // measured the old level: ignored, the new level stays.
    const double late_seconds = 0.01 + sample_seconds + 0.001;  // began before it
    ASSERT_TRUE(e.Observe("p", late_seconds * level, late_seconds, t + 0.01).ok());
    EXPECT_EQ(e.Query("p").samples, after.samples);
    EXPECT_DOUBLE_EQ(e.Query("p").bytes_per_second, 1e9 / sample_seconds);
  }
}

TEST(BandwidthEstimatorTest, QueryBeforeAnySampleIsTheUnknownPrior) {
  BandwidthEstimatorOptions o;
  o.prior_bytes_per_second = 2e9;
  BandwidthEstimator e(o);
  const BandwidthEstimate q = e.Query("x");
  EXPECT_DOUBLE_EQ(q.bytes_per_second, 2e9);
  EXPECT_EQ(q.log_sigma, kInfinity);
  EXPECT_EQ(q.samples, 0);
  ASSERT_TRUE(e.Observe("x", 1e8, 0.1, 1.0).ok());
  EXPECT_DOUBLE_EQ(e.Query("x").log_sigma, o.initial_log_sigma);
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
