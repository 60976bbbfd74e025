// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>

#include "controller/test_util.h"
#include "kvserve/controller.h"

namespace kvserve {
namespace {

using controller_test::BruteForceMin;
using controller_test::LogUniform;

// Every bandwidth falls in exactly one interval, whose profile is optimal.
TEST(PolicyTest, IntervalsCoverAndAreOptimal) {
  std::mt19937_64 rng(61);
  for (int trial = 0; trial < 1000; ++trial) {
    const ProfileTable table = controller_test::RandomTable(rng, 1 + static_cast<int>(rng() % 12), 1);
    const LatencyModel m{trial % 2 ? LatencyModelKind::kStreamed : LatencyModelKind::kSerial,
                         1 + static_cast<int>(rng() % 40)};
    const double v = LogUniform(rng, 1e5, 1e10);
    const double q_min = 0.9;
    Result<std::vector<PolicyInterval>> pol = PiecewisePolicy(table, m, 0, q_min, v);
    ASSERT_TRUE(pol.ok());
    ASSERT_FALSE(pol->empty());
    EXPECT_EQ(pol->front().min_bandwidth, 0.0);
    EXPECT_TRUE(std::isinf(pol->back().max_bandwidth));
    EXPECT_EQ(pol->back().profile, ProfileTable::kRaw);  // infinite bandwidth: raw
    for (size_t k = 1; k < pol->size(); ++k) {
      EXPECT_NEAR((*pol)[k].min_bandwidth, (*pol)[k - 1].max_bandwidth,
                  1e-12 * (*pol)[k].min_bandwidth);
      EXPECT_NE((*pol)[k].profile, (*pol)[k - 1].profile);
    }
    for (int q = 0; q < 30; ++q) {
      const double b = LogUniform(rng, 1e7, 1e11);
      const PolicyInterval* hit = nullptr;
      for (const PolicyInterval& iv : *pol) {
        if (b >= iv.min_bandwidth && b < iv.max_bandwidth) hit = &iv;
      }
      ASSERT_NE(hit, nullptr);
      int expect = 0;
      const double best = BruteForceMin(table, m, 0, q_min, v, b, &expect);
      const double t = PredictSeconds(m, table.profile(hit->profile), v, b);
      ASSERT_NEAR(t, best, 1e-9 * best) << "trial " << trial << " b=" << b;
      ASSERT_GE(table.Quality(hit->profile, 0), q_min);
    }
  }
}

}  // namespace
}  // namespace kvserve
