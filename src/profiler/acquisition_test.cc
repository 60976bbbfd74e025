// Copyright kvserve authors.
#include "profiler/acquisition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace kvserve::profiler {
namespace {

TEST(Acquisition, FeasibilityProbabilityIsMonotoneInMean) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const double var = static_cast<double>(rng() % 1000 + 1) * 1e-5;
    const double m = static_cast<double>(rng() % 1000) * 1e-3;
    EXPECT_LE(FeasibilityProbability(m, var, 0.97), FeasibilityProbability(m + 0.01, var, 0.97));
  }
  EXPECT_EQ(FeasibilityProbability(0.98, 0.0, 0.97), 1.0);
  EXPECT_EQ(FeasibilityProbability(0.96, 0.0, 0.97), 0.0);
  EXPECT_NEAR(FeasibilityProbability(0.97, 0.01, 0.97), 0.5, 1e-12);
}

TEST(Acquisition, ExplorationWeightSchedules) {
  for (int t = 0; t < 50; ++t) {
    EXPECT_LE(ExplorationWeight(ExplorationSchedule::kDecay, 1.0, 0.9, t + 1),
              ExplorationWeight(ExplorationSchedule::kDecay, 1.0, 0.9, t));
    EXPECT_EQ(ExplorationWeight(ExplorationSchedule::kConstant, 0.7, 0.9, t), 0.7);
    EXPECT_EQ(ExplorationWeight(ExplorationSchedule::kNone, 0.7, 0.9, t), 0.0);
  }
}

TEST(Acquisition, WithoutExplorationPrefersExpectedFeasibleCr) {
  std::mt19937_64 rng(3);
  const int n = 100;
  std::vector<double> mean(n), var(n), cr(n);
  for (int i = 0; i < n; ++i) {
    mean[i] = 0.9 + static_cast<double>(rng() % 1000) * 1e-4;
    var[i] = static_cast<double>(rng() % 100 + 1) * 1e-6;
    cr[i] = 1.0 + static_cast<double>(rng() % 1000) * 1e-2;
  }
  const double cr_max = *std::max_element(cr.begin(), cr.end());
  const auto score = Acquisition(mean, var, cr, cr_max, 0.97, 0.0);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(score[i], cr[i] / cr_max * FeasibilityProbability(mean[i], var[i], 0.97), 1e-12);
  }
  // Exploration adds at most lambda and rewards the most uncertain point most.
  const auto explore = Acquisition(mean, var, cr, cr_max, 0.97, 0.5);
  const int most_uncertain = std::max_element(var.begin(), var.end()) - var.begin();
  EXPECT_NEAR(explore[most_uncertain] - score[most_uncertain], 0.5, 1e-12);
}

}  // namespace
}  // namespace kvserve::profiler
