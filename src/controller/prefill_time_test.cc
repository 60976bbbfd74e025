// Copyright kvserve authors. PrefillTimePredictor: the prior before any
// prefill, the median of a length's last prefills, the nearest length
// scaled by the token ratio (or, for times with a fixed part, never scaled
// down), and a bounded memory per length.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace kvserve
