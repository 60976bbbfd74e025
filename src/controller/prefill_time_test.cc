// Copyright kvserve authors. PrefillTimePredictor: the prior before any
// prefill, the median of a length's last prefills, the nearest length
// scaled by the token ratio (or, for times with a fixed part, never scaled
// down), and a bounded memory per length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

TEST(PrefillTimePredictorTest, PriorThenMedianThenNearestScaled) {
  PrefillTimePredictor p(0.001, 3);
  EXPECT_TRUE(p.empty());
  EXPECT_DOUBLE_EQ(p.Predict(1000), 1.0);
  EXPECT_DOUBLE_EQ(p.Predict(0), 0.0);
  p.Observe(1000, 0.5);
  p.Observe(1000, 0.9);
  p.Observe(1000, 0.6);
  EXPECT_DOUBLE_EQ(p.Predict(1000), 0.6);  // median of 0.5, 0.6, 0.9
  // Only the last 3: 0.9, 0.6, 2.0 -> 0.9.
  p.Observe(1000, 2.0);
  EXPECT_DOUBLE_EQ(p.Predict(1000), 0.9);
  // Not seen: the nearest length's median scaled by the ratio.
  p.Observe(8000, 8.0);
  EXPECT_DOUBLE_EQ(p.Predict(2000), 0.9 * 2);   // log distance to 1000 < to 8000
  EXPECT_DOUBLE_EQ(p.Predict(6000), 8.0 * 0.75);
  // Bad samples are ignored.
  p.Observe(-5, 1.0);
  p.Observe(500, 0.0);
  p.Observe(500, std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(p.Predict(500), 0.9 * 0.5);
}

// A time with a fixed part: a shorter length than the nearest seen one is
// predicted no less than that one's time; a longer one still scales, and
// so does the prior.
TEST(PrefillTimePredictorTest, NoLessThanNearestDoesNotScaleDown) {
  PrefillTimePredictor p(0.001, 3);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(500), 0.5);
  p.Observe(10000, 1.5);
  EXPECT_DOUBLE_EQ(p.Predict(400), 1.5 * 0.04);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(400), 1.5);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(20000), 3.0);
  p.Observe(400, 0.2);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(300), 0.2);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(400), 0.2);
  EXPECT_DOUBLE_EQ(p.PredictNoLessThanNearest(0), 0.0);
}

// On seeded random histories: never below Predict; equal to it at or above
// the longest length seen; at or below the shortest, that length's time.
TEST(PrefillTimePredictorTest, NoLessThanNearestIsPredictFloored) {
  std::mt19937 rng(4242);
  for (int trial = 0; trial < 50; ++trial) {
    PrefillTimePredictor p(0.001, 3);
    std::uniform_int_distribution<int> length(64, 65536);
    std::uniform_real_distribution<double> seconds(0.01, 5.0);
    int shortest = std::numeric_limits<int>::max(), longest = 0;
    for (int i = 0, n = 1 + trial % 6; i < n; ++i) {
      const int tokens = length(rng);
      shortest = std::min(shortest, tokens);
      longest = std::max(longest, tokens);
      p.Observe(tokens, seconds(rng));
    }
    for (int i = 0; i < 40; ++i) {
      const int tokens = std::uniform_int_distribution<int>(1, 131072)(rng);
      const double floored = p.PredictNoLessThanNearest(tokens);
      EXPECT_GE(floored, p.Predict(tokens)) << tokens;
      if (tokens >= longest) EXPECT_DOUBLE_EQ(floored, p.Predict(tokens)) << tokens;
      if (tokens <= shortest) EXPECT_DOUBLE_EQ(floored, p.Predict(shortest)) << tokens;
    }
  }
}

}  // namespace
}  // namespace kvserve
