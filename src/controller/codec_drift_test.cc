// Copyright kvserve authors.
#include "controller/codec_drift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kvserve::controller_internal {
namespace {

// Seeded per-profile mismatches and 2% observation noise: the factors
// converge to the true ones; a shared step of 1.25x..3x (beyond change_log plus noise) (either way) is taken
// by the shared factor after one observation of any profile, and the other
// profiles' factors follow without being observed again.
TEST(CodecDriftTest, LearnsMismatchAndTracksASharedStepInOneObservation) {
  std::mt19937_64 rng(51);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 100; ++trial) {
    const int profiles = 2 + static_cast<int>(rng() % 10);
    CodecDrift drift(profiles, {});
    std::vector<double> mismatch(profiles, 1.0);
    for (int p = 1; p < profiles; ++p) mismatch[p] = std::exp(0.1 * normal(rng));
    double shared = 1.0;
    auto observe = [&](int p) {
      const double expected = std::exp(std::uniform_real_distribution<double>(-6, 0)(rng));
      drift.Observe(p, expected, expected * shared * mismatch[p] * std::exp(0.02 * normal(rng)));
    };
    for (int i = 0; i < 400; ++i) observe(1 + static_cast<int>(rng() % (profiles - 1)));
    for (int p = 1; p < profiles; ++p) {
      EXPECT_NEAR(std::log(drift.Factor(p) / mismatch[p]), 0.0, 0.05) << "trial " << trial;
    }
    const double step = std::exp((unit(rng) < 0.5 ? 1 : -1) *
                                 std::uniform_real_distribution<double>(std::log(1.25),
                                                                        std::log(3.0))(rng));
    shared *= step;
    observe(1);
    // Bound: profile p's and profile 1's errors before the step (each
    // <= 0.05, checked above) plus 3 sigma of one observation's noise.
    for (int p = 1; p < profiles; ++p) {
      EXPECT_NEAR(std::log(drift.Factor(p) / (shared * mismatch[p])), 0.0, 0.16)
          << "trial " << trial << " profile " << p;
    }
  }
}

TEST(CodecDriftTest, RawAndBadInputsAreIgnored) {
  CodecDrift drift(3, {});
  drift.Observe(0, 1.0, 5.0);   // raw has no codec
  drift.Observe(7, 1.0, 5.0);   // out of range
  drift.Observe(1, 0.0, 5.0);
  drift.Observe(1, 1.0, -1.0);
  drift.Observe(1, 1.0, std::nan(""));
  EXPECT_EQ(drift.Shared(), 1.0);
  EXPECT_EQ(drift.Factor(0), 1.0);
  EXPECT_EQ(drift.Factor(1), 1.0);
  EXPECT_EQ(drift.Count(1), 0);
  drift.Observe(1, 1.0, 1.3);  // first sighting: the profile's own offset
  EXPECT_NEAR(drift.Factor(1), 1.3, 1e-12);
  EXPECT_EQ(drift.Shared(), 1.0);
  EXPECT_EQ(drift.Factor(2), 1.0);
}

}  // namespace
}  // namespace kvserve::controller_internal
