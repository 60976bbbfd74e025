// Copyright kvserve authors.
#include "transforms/affine.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "transforms/transform_test_util.h"

namespace kvserve::transforms {
namespace {

using testing::RandomShapeChunk;

constexpr float kEps = std::numeric_limits<float>::epsilon();

std::vector<uint8_t> Forward(testing::Chunk& chunk) {
  std::vector<uint8_t> side_bytes;
  pipeline::ByteWriter writer(&side_bytes);
  EXPECT_TRUE(AffineTransform().Forward(chunk.info, chunk.tensor(), writer).ok());
  return side_bytes;
}

Status Inverse(testing::Chunk& chunk, const std::vector<uint8_t>& side_bytes) {
  pipeline::ByteReader reader(side_bytes);
  return AffineTransform().Inverse(chunk.info, chunk.tensor(), reader);
}

float SideFloat(const std::vector<uint8_t>& side, size_t index) {
  float v;
  std::memcpy(&v, side.data() + 4 * index, 4);
  return v;
}

void SetSideFloat(std::vector<uint8_t>& side, size_t index, float v) {
  std::memcpy(side.data() + 4 * index, &v, 4);
}

TEST(Affine, RoundTripWithinFewUlpsOfChannelMax) {
  std::mt19937_64 rng(0xaff1);
  for (int trial = 0; trial < 60; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    SCOPED_TRACE(chunk.Describe());
    const auto original = chunk.values;
    const auto side = Forward(chunk);
    ASSERT_EQ(side.size(), AffineTransform::SideBytes(chunk.info.kv_heads, chunk.info.head_dim));
    ASSERT_TRUE(Inverse(chunk, side).ok());
    const float tolerance = 8.0f * kEps * testing::MaxAbs(original);
    for (size_t k = 0; k < original.size(); ++k) {
      ASSERT_LE(std::fabs(chunk.values[k] - original[k]), tolerance) << "element " << k;
    }
  }
}

TEST(Affine, ForwardMatchesSpecificationAndEqualizesChannels) {
  std::mt19937_64 rng(0xaff2);
  for (int trial = 0; trial < 30; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    SCOPED_TRACE(chunk.Describe());
    const auto x = chunk.values;
    const auto side = Forward(chunk);
    const int heads = chunk.info.kv_heads, tokens = chunk.info.tokens, dim = chunk.info.head_dim;
    const size_t channels = static_cast<size_t>(heads) * dim;
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < dim; ++i) {
        float mn = std::numeric_limits<float>::infinity(), mx = -mn;
        for (int t = 0; t < tokens; ++t) {
          const float v = x[(static_cast<size_t>(h) * tokens + t) * dim + i];
          mn = std::min(mn, v);
          mx = std::max(mx, v);
        }
        float shift = 0.5f * mx + 0.5f * mn;
        if (shift == 0.0f) shift = 0.0f;
        float scale = 0.5f * mx - 0.5f * mn;
        if (scale == 0.0f) scale = 1.0f;
        const size_t c = static_cast<size_t>(h) * dim + i;
        ASSERT_EQ(std::bit_cast<uint32_t>(SideFloat(side, c)), std::bit_cast<uint32_t>(shift));
        ASSERT_EQ(std::bit_cast<uint32_t>(SideFloat(side, channels + c)),
                  std::bit_cast<uint32_t>(scale));
        for (int t = 0; t < tokens; ++t) {
          const size_t k = (static_cast<size_t>(h) * tokens + t) * dim + i;
          const float expected = (x[k] - shift) / scale;
          ASSERT_EQ(std::bit_cast<uint32_t>(chunk.values[k]), std::bit_cast<uint32_t>(expected));
          // Equalized: every channel, outlier or not, now spans [-1, 1] up
          // to the rounding of shift (large when the range is tiny next to
          // the channel's offset).
          ASSERT_LE(std::fabs(chunk.values[k]),
                    1.0f + 4 * kEps + kEps * std::fabs(shift) / scale);
        }
      }
    }
  }
}

TEST(Affine, ConstantChannelsAndNonFiniteValues) {
  std::mt19937_64 rng(0xaff3);
  auto chunk = testing::RandomChunk(rng, 2, 40, 16);
  const int tokens = 40, dim = 16;
  for (int t = 0; t < tokens; ++t) chunk.values[t * dim + 3] = 2.5f;  // constant channel
  for (int t = 0; t < tokens; ++t) chunk.values[t * dim + 4] = (t % 2) ? 0.0f : -0.0f;
  chunk.values[5 * dim + 7] = std::numeric_limits<float>::infinity();
  chunk.values[9 * dim + 7] = std::numeric_limits<float>::quiet_NaN();
  for (int t = 0; t < tokens; ++t) {  // a channel with no finite value
    chunk.values[(tokens + t) * dim + 9] = -std::numeric_limits<float>::infinity();
  }
  const auto original = chunk.values;
  const auto side = Forward(chunk);
  const size_t channels = 2 * dim;
  EXPECT_EQ(SideFloat(side, 3), 2.5f);
  EXPECT_EQ(SideFloat(side, channels + 3), 1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(SideFloat(side, 4)), 0u);  // canonical +0
  EXPECT_EQ(SideFloat(side, channels + 4), 1.0f);
  EXPECT_EQ(SideFloat(side, dim + 9), 0.0f);
  EXPECT_EQ(SideFloat(side, channels + dim + 9), 1.0f);
  EXPECT_TRUE(std::isinf(chunk.values[5 * dim + 7]));
  EXPECT_TRUE(std::isnan(chunk.values[9 * dim + 7]));
  ASSERT_TRUE(Inverse(chunk, side).ok());
  EXPECT_EQ(chunk.values[5 * dim + 7], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(chunk.values[9 * dim + 7]));
  EXPECT_EQ(chunk.values[(tokens + 3) * dim + 9], -std::numeric_limits<float>::infinity());
  for (int t = 0; t < tokens; ++t) EXPECT_EQ(chunk.values[t * dim + 3], 2.5f);
}

TEST(Affine, ExtremeRangesDoNotOverflow) {
  std::mt19937_64 rng(0xaff4);
  auto chunk = testing::RandomChunk(rng, 1, 64, 32);
  const float big = std::numeric_limits<float>::max();
  for (int t = 0; t < 64; ++t) chunk.values[t * 32 + 1] = (t % 2) ? big : -big;
  const auto original = chunk.values;
  const auto side = Forward(chunk);
  for (float v : chunk.values) ASSERT_TRUE(std::isfinite(v));
  ASSERT_TRUE(Inverse(chunk, side).ok());
  for (int t = 0; t < 64; ++t) EXPECT_EQ(chunk.values[t * 32 + 1], original[t * 32 + 1]);
}

TEST(Affine, MalformedSideBytesAreCorruptionAndLeaveDataUntouched) {
  std::mt19937_64 rng(0xaff5);
  for (int trial = 0; trial < 40; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    SCOPED_TRACE(chunk.Describe());
    const auto good = Forward(chunk);
    const auto transformed = chunk.values;
    const size_t channels = good.size() / 8;
    auto expect_corruption = [&](const std::vector<uint8_t>& side, const char* what) {
      auto copy = chunk;
      EXPECT_EQ(Inverse(copy, side).code(), StatusCode::kCorruption) << what;
      EXPECT_TRUE(testing::SameBits(copy.values, transformed)) << what;
    };
    expect_corruption(std::vector<uint8_t>(good.begin(), good.begin() + rng() % good.size()),
                      "truncated");
    auto extra = good;
    extra.resize(good.size() + 1 + rng() % 8, 0);
    expect_corruption(extra, "extra bytes");
    const float bad_scales[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(), 0.0f, -0.0f, -1.5f};
    for (float bad : bad_scales) {
      auto side = good;
      SetSideFloat(side, channels + rng() % channels, bad);
      expect_corruption(side, "bad scale");
    }
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      -std::numeric_limits<float>::infinity()}) {
      auto side = good;
      SetSideFloat(side, rng() % channels, bad);
      expect_corruption(side, "bad shift");
    }
    // Random garbage of the right length: any status but a crash; when it is
    // accepted, every shift and scale was finite and scales positive.
    std::vector<uint8_t> garbage(good.size());
    for (auto& b : garbage) b = static_cast<uint8_t>(rng());
    auto copy = chunk;
    const Status status = Inverse(copy, garbage);
    EXPECT_TRUE(status.ok() || status.code() == StatusCode::kCorruption);
  }
}

}  // namespace
}  // namespace kvserve::transforms
