// Copyright kvserve authors.
#include "controller/envelope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "controller/test_util.h"

namespace kvserve::controller_internal {
namespace {

using controller_test::LogUniform;

double Tolerance(double v) { return 1e-9 * std::abs(v) + 1e-15; }

TEST(LowerEnvelopeTest, MatchesBruteForceOnRandomLines) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 24);
    std::vector<EnvelopeLine> lines;
    for (int i = 0; i < n; ++i) {
      // Coarse values so parallel lines and concurrent triples occur.
      const double a = (trial % 3 == 0) ? static_cast<double>(rng() % 5) : LogUniform(rng, 1e-3, 10);
      const double s = (trial % 3 == 0) ? static_cast<double>(rng() % 4) : LogUniform(rng, 1e-2, 10);
      lines.push_back({a, s, i});
    }
    const LowerEnvelope env = LowerEnvelope::Build(lines);
    ASSERT_FALSE(env.segments().empty());
    for (size_t k = 1; k < env.breakpoints().size(); ++k) {
      ASSERT_LT(env.breakpoints()[k - 1], env.breakpoints()[k]);
    }
    for (int q = 0; q < 50; ++q) {
      const double x = q == 0 ? 0.0 : LogUniform(rng, 1e-4, 1e4);
      double best = INFINITY;
      for (const EnvelopeLine& l : lines) best = std::min(best, l.intercept + l.slope * x);
      const EnvelopeLine& got = env.segments()[env.SegmentAt(x)];
      ASSERT_NEAR(got.intercept + got.slope * x, best, Tolerance(best)) << "x=" << x;
    }
  }
}

TEST(ParametricEnvelopeTest, MatchesBruteForceForEverySize) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 16);
    std::vector<PlaneLine> lines = {{0.0, 0.0, 1.0, 0}};  // raw
    for (int i = 1; i < n; ++i) {
      PlaneLine l;
      l.t0 = rng() % 5 == 0 ? 0.0 : LogUniform(rng, 1e-5, 5e-3);
      l.g = LogUniform(rng, 1e-11, 2e-9);
      l.slope = 1.0 / LogUniform(rng, 1.0, 16.0);
      if (trial % 4 == 0 && i > 1 && rng() % 2) l.slope = lines[i - 1].slope;  // parallel
      l.id = i;
      lines.push_back(l);
    }
    const ParametricEnvelope env = ParametricEnvelope::Build(lines);
    for (int q = 0; q < 50; ++q) {
      const double v = LogUniform(rng, 1e4, 1e10);
      const double b = LogUniform(rng, 1e7, 1e11);
      const double u = 1.0 / v, x = 1.0 / b;
      double best = INFINITY;
      for (const PlaneLine& l : lines) best = std::min(best, l.t0 * u + l.g + l.slope * x);
      const ParametricEnvelope::Hit hit = env.Query(u, x);
      ASSERT_GE(hit.id, 0);
      const PlaneLine& got = lines[hit.id];
      ASSERT_NEAR(got.t0 * u + got.g + got.slope * x, best, Tolerance(best))
          << "trial " << trial << " v=" << v << " b=" << b;
      // The segment index names the same line in the slab's sequence.
      ASSERT_EQ(env.Sequence(hit.slab)[hit.segment], hit.id);
    }
  }
}

TEST(ParametricEnvelopeTest, EmptyAndSingle) {
  EXPECT_EQ(ParametricEnvelope::Build({}).Query(1.0, 1.0).id, -1);
  const ParametricEnvelope one = ParametricEnvelope::Build({{0.0, 0.0, 1.0, 7}});
  EXPECT_EQ(one.Query(0.0, 0.0).id, 7);
  EXPECT_EQ(one.Query(1e-3, 1e3).id, 7);
}

}  // namespace
}  // namespace kvserve::controller_internal
