// Copyright kvserve authors.
#include "profiler/encoding.h"

#include <gtest/gtest.h>

#include <set>

#include "kvserve/profiler.h"

namespace kvserve::profiler {
namespace {

TEST(ProfileEncoder, OneHotMinMaxFeaturesAreInUnitRangeAndDistinct) {
  auto space = StrategySpace::Load(std::string(KVSERVE_SOURCE_DIR) + "/configs/strategy_space.json");
  ASSERT_TRUE(space.ok());
  const ProfileEncoder e = ProfileEncoder::Fit(space->profiles(), EncodingMode::kOneHotMinMax);
  const Eigen::MatrixXd x = e.Encode(space->profiles());
  ASSERT_EQ(x.cols(), e.dimensions());
  EXPECT_GE(x.minCoeff(), 0.0);
  EXPECT_LE(x.maxCoeff(), 1.0);
  // Exactly one transform, one quantizer, one codec.
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    EXPECT_DOUBLE_EQ(x.row(r).head(15).sum(), 3.0);
  }
  std::set<std::vector<double>> rows;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    std::vector<double> v(x.cols());
    for (Eigen::Index c = 0; c < x.cols(); ++c) v[c] = x(r, c);
    rows.insert(v);
  }
  // Distinct profiles have distinct encodings.
  EXPECT_EQ(rows.size(), static_cast<size_t>(x.rows()));
}

TEST(ProfileEncoder, RawModeKeepsParameterValues) {
  auto a = Profile::Parse("identity+kivi(k=2,v=3,group=64)+pack");
  auto b = Profile::Parse("hadamard+kivi(k=4,v=3,group=32)+rans");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<Profile> space = {*a, *b};
  const ProfileEncoder e = ProfileEncoder::Fit(space, EncodingMode::kRaw);
  const Eigen::MatrixXd x = e.Encode(space);
  EXPECT_EQ(x(0, 0), 0.0);  // identity
  EXPECT_EQ(x(1, 0), 2.0);  // hadamard
  EXPECT_EQ(x(0, 2), 0.0);  // pack
  EXPECT_EQ(x(1, 2), 1.0);  // rans
  // Varying parameters: k and group (seed applies to one profile only, so
  // it is constant over the space and dropped).
  EXPECT_EQ(x.cols(), 3 + 2);
  EXPECT_GT(x.maxCoeff(), 1.0);
}

}  // namespace
}  // namespace kvserve::profiler
