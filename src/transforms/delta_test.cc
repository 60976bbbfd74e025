// Copyright kvserve authors.
#include "transforms/delta.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "transforms/transform_test_util.h"

namespace kvserve::transforms {
namespace {

using testing::RandomShapeChunk;

constexpr float kEps = std::numeric_limits<float>::epsilon();

int RandomAnchor(std::mt19937_64& rng) {
  const int choices[] = {0, 1, 2, 7, 16, 64, 100, 256, 4096};
  return choices[rng() % std::size(choices)];
}

TEST(DeltaTransform, RoundTripWithinTwoRoundings) {
  std::mt19937_64 rng(0xde17a);
  for (int trial = 0; trial < 60; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    const int anchor = RandomAnchor(rng);
    SCOPED_TRACE(chunk.Describe() + " anchor=" + std::to_string(anchor));
    DeltaTransform transform(anchor);
    const auto original = chunk.values;
    std::vector<uint8_t> side_bytes;
    pipeline::ByteWriter writer(&side_bytes);
    ASSERT_TRUE(transform.Forward(chunk.info, chunk.tensor(), writer).ok());
    EXPECT_TRUE(side_bytes.empty());
    pipeline::ByteReader reader(side_bytes);
    ASSERT_TRUE(transform.Inverse(chunk.info, chunk.tensor(), reader).ok());
    // |x - a| <= 2 max|x| and each of the two roundings is <= half an ulp.
    const float tolerance = 4.0f * kEps * testing::MaxAbs(original);
    for (size_t k = 0; k < original.size(); ++k) {
      ASSERT_LE(std::fabs(chunk.values[k] - original[k]), tolerance) << "element " << k;
    }
  }
}

TEST(DeltaTransform, ForwardMatchesSpecification) {
  std::mt19937_64 rng(0xde17b);
  for (int trial = 0; trial < 30; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    const int anchor = RandomAnchor(rng);
    SCOPED_TRACE(chunk.Describe() + " anchor=" + std::to_string(anchor));
    const auto x = chunk.values;
    DeltaTransform transform(anchor);
    std::vector<uint8_t> side_bytes;
    pipeline::ByteWriter writer(&side_bytes);
    ASSERT_TRUE(transform.Forward(chunk.info, chunk.tensor(), writer).ok());
    const int tokens = chunk.info.tokens, dim = chunk.info.head_dim;
    const int run = anchor == 0 ? tokens : anchor;
    for (int h = 0; h < chunk.info.kv_heads; ++h) {
      for (int t = 0; t < tokens; ++t) {
        const int a = t - t % run;
        for (int i = 0; i < dim; ++i) {
          const size_t k = (static_cast<size_t>(h) * tokens + t) * dim + i;
          const size_t ka = (static_cast<size_t>(h) * tokens + a) * dim + i;
          const float expected = t == a ? x[k] : x[k] - x[ka];
          ASSERT_EQ(std::memcmp(&chunk.values[k], &expected, 4), 0)
              << "h=" << h << " t=" << t << " i=" << i;
        }
      }
    }
  }
}

TEST(DeltaTransform, DeltasShrinkRangeOfSmoothTokens) {
  // The point of delta: for temporally correlated tokens the non-anchor
  // values have a smaller spread than the raw values.
  std::mt19937_64 rng(0xde17c);
  auto chunk = testing::RandomChunk(rng, 4, 256, 64);
  const auto original = chunk.values;
  DeltaTransform transform(16);
  std::vector<uint8_t> side_bytes;
  pipeline::ByteWriter writer(&side_bytes);
  ASSERT_TRUE(transform.Forward(chunk.info, chunk.tensor(), writer).ok());
  double raw_energy = 0, delta_energy = 0;
  for (size_t k = 0; k < original.size(); ++k) {
    raw_energy += double{original[k]} * original[k];
    delta_energy += double{chunk.values[k]} * chunk.values[k];
  }
  EXPECT_LT(delta_energy, raw_energy);
}

TEST(DeltaTransform, RejectsBadArguments) {
  std::mt19937_64 rng(0xde17d);
  auto chunk = RandomShapeChunk(rng, testing::AnyDims());
  const auto original = chunk.values;
  std::vector<uint8_t> side_bytes;
  pipeline::ByteWriter writer(&side_bytes);
  EXPECT_EQ(DeltaTransform(-1).Forward(chunk.info, chunk.tensor(), writer).code(),
            StatusCode::kInvalidArgument);
  std::vector<uint8_t> extra(1 + rng() % 9, 0xab);
  pipeline::ByteReader reader(extra);
  EXPECT_EQ(DeltaTransform(4).Inverse(chunk.info, chunk.tensor(), reader).code(),
            StatusCode::kCorruption);
  EXPECT_TRUE(testing::SameBits(chunk.values, original));
}

}  // namespace
}  // namespace kvserve::transforms
