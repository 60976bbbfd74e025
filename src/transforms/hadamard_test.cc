// Copyright kvserve authors.
#include "transforms/hadamard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <set>

#include "transforms/transform_test_util.h"

namespace kvserve::transforms {
namespace {

using testing::RandomShapeChunk;

constexpr float kEps = std::numeric_limits<float>::epsilon();

Status RunForward(const pipeline::Transform& transform, testing::Chunk& chunk) {
  std::vector<uint8_t> side_bytes;
  pipeline::ByteWriter writer(&side_bytes);
  Status status = transform.Forward(chunk.info, chunk.tensor(), writer);
  if (status.ok() && !side_bytes.empty()) return Status::Internal("unexpected side bytes");
  return status;
}

Status RunInverse(const pipeline::Transform& transform, testing::Chunk& chunk) {
  std::vector<uint8_t> none;
  pipeline::ByteReader reader(none);
  return transform.Inverse(chunk.info, chunk.tensor(), reader);
}

std::vector<int> PowerOfTwoDimsUpTo(int max_dim) {
  std::vector<int> dims;
  for (int d = 1; d <= max_dim; d *= 2) dims.push_back(d);
  return dims;
}

TEST(Hadamard, RoundTripWithinFewUlpsOfMax) {
  std::mt19937_64 rng(0x4ada1);
  for (int trial = 0; trial < 60; ++trial) {
    auto chunk = RandomShapeChunk(rng, PowerOfTwoDimsUpTo(256));
    const uint64_t seed = rng() & 0x7fffffff;
    SCOPED_TRACE(chunk.Describe() + " seed=" + std::to_string(seed));
    HadamardTransform transform(seed);
    const auto original = chunk.values;
    ASSERT_TRUE(RunForward(transform, chunk).ok());
    ASSERT_TRUE(RunInverse(transform, chunk).ok());
    const int log_d = std::countr_zero(static_cast<unsigned>(chunk.info.head_dim));
    const float tolerance = 2.0f * (log_d + 2) * kEps * testing::MaxAbs(original) *
                            std::sqrt(static_cast<float>(chunk.info.head_dim));
    for (size_t k = 0; k < original.size(); ++k) {
      ASSERT_LE(std::fabs(chunk.values[k] - original[k]), tolerance) << "element " << k;
    }
  }
}

TEST(Hadamard, PreservesRowEnergy) {
  std::mt19937_64 rng(0x4ada2);
  for (int trial = 0; trial < 30; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::PowerOfTwoDims());
    SCOPED_TRACE(chunk.Describe());
    const auto original = chunk.values;
    ASSERT_TRUE(RunForward(HadamardTransform(rng()), chunk).ok());
    const int d = chunk.info.head_dim;
    for (size_t row = 0; row < original.size() / d; ++row) {
      double before = 0, after = 0;
      for (int i = 0; i < d; ++i) {
        before += double{original[row * d + i]} * original[row * d + i];
        after += double{chunk.values[row * d + i]} * chunk.values[row * d + i];
      }
      ASSERT_NEAR(after, before, 1e-4 * before + 1e-30) << "row " << row;
    }
  }
}

TEST(Hadamard, FlattensOutlierChannels) {
  // QuaRot's point: the max/RMS ratio of a row drops after rotation.
  std::mt19937_64 rng(0x4ada3);
  auto chunk = testing::RandomChunk(rng, 4, 200, 128);
  auto ratio = [&](const std::vector<float>& v) {
    double total = 0;
    for (size_t row = 0; row < v.size() / 128; ++row) {
      double sq = 0, peak = 0;
      for (int i = 0; i < 128; ++i) {
        sq += double{v[row * 128 + i]} * v[row * 128 + i];
        peak = std::max(peak, std::fabs(double{v[row * 128 + i]}));
      }
      total += peak / std::sqrt(sq / 128 + 1e-30);
    }
    return total;
  };
  const double before = ratio(chunk.values);
  ASSERT_TRUE(RunForward(HadamardTransform(7), chunk).ok());
  EXPECT_LT(ratio(chunk.values), before);
}

TEST(Hadamard, MatchesDenseDefinitionInDouble) {
  // y = H (s .* x) / sqrt(d) with H[i][j] = (-1)^popcount(i & j), in double,
  // agrees with the fp32 result to rounding.
  std::mt19937_64 rng(0x4ada4);
  for (int trial = 0; trial < 10; ++trial) {
    auto chunk = RandomShapeChunk(rng, PowerOfTwoDimsUpTo(128));
    SCOPED_TRACE(chunk.Describe());
    const uint64_t seed = rng();
    const auto x = chunk.values;
    ASSERT_TRUE(RunForward(HadamardTransform(seed), chunk).ok());
    const int d = chunk.info.head_dim, tokens = chunk.info.tokens;
    const float tolerance = 4.0f * 10 * kEps * testing::MaxAbs(x) * std::sqrt(float(d));
    for (int h = 0; h < chunk.info.kv_heads; ++h) {
      for (int t = 0; t < tokens; ++t) {
        const size_t base = (static_cast<size_t>(h) * tokens + t) * d;
        for (int i = 0; i < d; ++i) {
          double sum = 0;
          for (int j = 0; j < d; ++j) {
            const uint64_t word = HadamardSignWord(seed, chunk.info.layer, chunk.info.kind, h, j / 64);
            const double s = ((word >> (j % 64)) & 1) ? -1.0 : 1.0;
            const double hij = (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0 : 1.0;
            sum += hij * s * x[base + j];
          }
          ASSERT_NEAR(chunk.values[base + i], sum / std::sqrt(double(d)), tolerance);
        }
      }
    }
  }
}

TEST(Hadamard, SignsDifferAcrossLayerKindHeadAndSeed) {
  std::mt19937_64 rng(0x4ada5);
  for (int trial = 0; trial < 5; ++trial) {
    const uint64_t seed = rng() & 0x7fffffff;
    std::set<std::pair<uint64_t, uint64_t>> seen;
    int negatives = 0, total = 0;
    for (int layer = 0; layer < 32; ++layer) {
      for (int kind = 0; kind < 2; ++kind) {
        for (int head = 0; head < 8; ++head) {
          const uint64_t w0 = HadamardSignWord(seed, layer, static_cast<KvKind>(kind), head, 0);
          const uint64_t w1 = HadamardSignWord(seed, layer, static_cast<KvKind>(kind), head, 1);
          EXPECT_TRUE(seen.insert({w0, w1}).second)
              << "layer=" << layer << " kind=" << kind << " head=" << head;
          negatives += std::popcount(w0) + std::popcount(w1);
          total += 128;
        }
      }
    }
    EXPECT_NEAR(static_cast<double>(negatives) / total, 0.5, 0.02);
    EXPECT_NE(HadamardSignWord(seed, 0, KvKind::kKey, 0, 0),
              HadamardSignWord(seed + 1, 0, KvKind::kKey, 0, 0));
  }
}

TEST(Hadamard, SignWordGoldenValues) {
  // Pins the specified hash so a CUDA or other backend can check itself
  // against these numbers (checked against an independent Python implementation).
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(0x5eed), 0x09F1FD9D03F0A9B4ull);
  EXPECT_EQ(HadamardSignWord(0x5eed, 0, KvKind::kKey, 0, 0), 0xEA02BDD5EA2DFCB8ull);
  EXPECT_EQ(HadamardSignWord(7, 3, KvKind::kValue, 5, 1), 0x99EDF709348B3242ull);
  // The chain itself, step by step.
  EXPECT_EQ(HadamardSignWord(7, 3, KvKind::kValue, 5, 1),
            SplitMix64(SplitMix64(SplitMix64(SplitMix64(SplitMix64(7) ^ 3) ^ 1) ^ 5) + 1));
}

TEST(Hadamard, ScaleConstants) {
  EXPECT_EQ(std::bit_cast<uint32_t>(HadamardScale(2)), 0x3F3504F3u);
  for (int k = 0; k <= 7; ++k) {
    EXPECT_EQ(HadamardScale(1 << (2 * k)), std::ldexp(1.0f, -k));
    EXPECT_EQ(HadamardScale(2 << (2 * k)), std::ldexp(std::bit_cast<float>(0x3F3504F3u), -k));
  }
}

TEST(Hadamard, DeterministicBytes) {
  std::mt19937_64 rng(0x4ada6);
  for (int trial = 0; trial < 10; ++trial) {
    auto a = RandomShapeChunk(rng, testing::PowerOfTwoDims());
    auto b = a;
    const uint64_t seed = rng();
    ASSERT_TRUE(RunForward(HadamardTransform(seed), a).ok());
    ASSERT_TRUE(RunForward(HadamardTransform(seed), b).ok());
    EXPECT_TRUE(testing::SameBits(a.values, b.values));
    auto c = b;
    ASSERT_TRUE(RunInverse(HadamardTransform(seed), b).ok());
    ASSERT_TRUE(RunInverse(HadamardTransform(seed), c).ok());
    EXPECT_TRUE(testing::SameBits(b.values, c.values));
  }
}

TEST(Hadamard, ScalarAndAvx2BitIdentical) {
  if (!Avx2Available()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937_64 rng(0x4ada7);
  for (int trial = 0; trial < 80; ++trial) {
    auto scalar = RandomShapeChunk(rng, PowerOfTwoDimsUpTo(1024));
    // Sprinkle values that stress rounding: signed zeros, huge, tiny, subnormal.
    for (size_t k = 0; k < scalar.values.size(); k += 1 + rng() % 17) {
      const float specials[] = {0.0f, -0.0f, 3e37f, -3e37f, 1e-40f, -1e-42f, 1e-30f};
      scalar.values[k] = specials[rng() % std::size(specials)];
    }
    auto avx2 = scalar;
    SCOPED_TRACE(scalar.Describe());
    const uint64_t seed = rng();
    ASSERT_TRUE(RunForward(HadamardTransform(seed, KernelPath::kScalar), scalar).ok());
    ASSERT_TRUE(RunForward(HadamardTransform(seed, KernelPath::kAvx2), avx2).ok());
    ASSERT_TRUE(testing::SameBits(scalar.values, avx2.values)) << "forward";
    ASSERT_TRUE(RunInverse(HadamardTransform(seed, KernelPath::kScalar), scalar).ok());
    ASSERT_TRUE(RunInverse(HadamardTransform(seed, KernelPath::kAvx2), avx2).ok());
    ASSERT_TRUE(testing::SameBits(scalar.values, avx2.values)) << "inverse";
  }
}

TEST(Hadamard, NonPowerOfTwoDimIsInvalidArgumentAndUntouched) {
  std::mt19937_64 rng(0x4ada8);
  for (int dim : {3, 6, 24, 48, 80, 96, 112, 129}) {
    auto chunk = testing::RandomChunk(rng, 1 + rng() % 8, 1 + rng() % 300, dim);
    const auto original = chunk.values;
    const Status forward = RunForward(HadamardTransform(1), chunk);
    EXPECT_EQ(forward.code(), StatusCode::kInvalidArgument) << dim;
    EXPECT_NE(forward.message().find("power of two"), std::string::npos);
    EXPECT_EQ(RunInverse(HadamardTransform(1), chunk).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(testing::SameBits(chunk.values, original));
  }
}

TEST(Hadamard, InverseRejectsSideBytes) {
  std::mt19937_64 rng(0x4ada9);
  auto chunk = RandomShapeChunk(rng, testing::PowerOfTwoDims());
  const auto original = chunk.values;
  std::vector<uint8_t> extra(1 + rng() % 32, 1);
  pipeline::ByteReader reader(extra);
  EXPECT_EQ(HadamardTransform(3).Inverse(chunk.info, chunk.tensor(), reader).code(),
            StatusCode::kCorruption);
  EXPECT_TRUE(testing::SameBits(chunk.values, original));
}

}  // namespace
}  // namespace kvserve::transforms
