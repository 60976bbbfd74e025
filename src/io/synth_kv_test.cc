// Copyright kvserve authors. Properties of the synthetic KV generator.
#include "io/synth_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kvserve/kv_file.h"

namespace kvserve {
namespace {

SynthOptions SmallOptions(uint64_t seed, DType dtype = DType::kF32) {
  SynthOptions o;
  o.shape = KvShape{3, 2, 300, 32};
  o.dtype = dtype;
  o.seed = seed;
  return o;
}

// Values of slab (layer, kind, head) as floats, [token][dim].
std::vector<float> Slab(const KvCache& c, int layer, int kind, int head) {
  const KvView v = c.view();
  std::vector<float> out;
  for (int t = 0; t < v.shape.tokens; ++t)
    for (int d = 0; d < v.shape.head_dim; ++d)
      out.push_back(LoadAsFloat(v.At(layer, kind, head, t, d), v.dtype));
  return out;
}

TEST(SynthRngTest, DeterministicAndRoughlyNormal) {
  io::SynthRng a(42), b(42), c(43);
  double sum = 0, sum_sq = 0;
  const int n = 20000;
  bool differs = false;
  for (int i = 0; i < n; ++i) {
    const double x = a.Normal();
    ASSERT_EQ(x, b.Normal());
    differs |= x != c.Normal();
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.05);
}

TEST(SynthKvTest, SameOptionsGiveSameBytesOtherSeedsDiffer) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (uint64_t seed : {1ull, 7ull, 123456789ull}) {
      auto a = SynthesizeKv(SmallOptions(seed, dtype));
      auto b = SynthesizeKv(SmallOptions(seed, dtype));
      auto c = SynthesizeKv(SmallOptions(seed + 1, dtype));
      ASSERT_TRUE(a.ok() && b.ok() && c.ok());
      EXPECT_EQ(a->dtype(), dtype);
      EXPECT_EQ(a->shape(), (KvShape{3, 2, 300, 32}));
      ASSERT_EQ(a->size_bytes(), b->size_bytes());
      EXPECT_EQ(0, std::memcmp(a->bytes(), b->bytes(), a->size_bytes()));
      EXPECT_NE(0, std::memcmp(a->bytes(), c->bytes(), a->size_bytes()));
    }
  }
}

TEST(SynthKvTest, ValuesAreFiniteAndVaried) {
  auto c = SynthesizeKv(SmallOptions(5));
  ASSERT_TRUE(c.ok());
  const float* p = reinterpret_cast<const float*>(c->bytes());
  const size_t n = c->size_bytes() / 4;
  size_t zeros = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(p[i]));
    zeros += p[i] == 0.0f;
  }
  EXPECT_LT(zeros, n / 1000);
}

// Keys: a low-frequency channel keeps a non-zero mean along tokens, and the
// largest |channel mean| stands far above the typical one (outliers).
TEST(SynthKvTest, KeysHaveChannelMeansAndOutliers) {
  for (uint64_t seed : {3ull, 11ull, 99ull}) {
    SynthOptions o = SmallOptions(seed);
    auto c = SynthesizeKv(o);
    ASSERT_TRUE(c.ok());
    const int T = o.shape.tokens, D = o.shape.head_dim;
    const std::vector<float> k = Slab(*c, 1, 0, 1);
    std::vector<double> abs_mean(D);
    for (int d = 0; d < D; ++d) {
      double m = 0;
      for (int t = 0; t < T; ++t) m += k[t * D + d];
      abs_mean[d] = std::fabs(m / T);
    }
    std::vector<double> sorted = abs_mean;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_GT(sorted.back(), 5.0 * sorted[D / 2]) << "seed " << seed;
    // The slowest RoPE pair (i = D/2 - 1) barely rotates: its mean survives.
    EXPECT_GT(abs_mean[D / 2 - 1] + abs_mean[D - 1], 0.05);
  }
}

// RoPE: the fastest pair (0, D/2) rotates by ~1 rad per token, so each of its
// channels averages out along tokens while the pair's norm does not.
TEST(SynthKvTest, KeysRotateInRopePairs) {
  SynthOptions o = SmallOptions(17);
  o.shape.tokens = 2000;
  auto c = SynthesizeKv(o);
  ASSERT_TRUE(c.ok());
  const int T = o.shape.tokens, D = o.shape.head_dim;
  for (int head = 0; head < o.shape.kv_heads; ++head) {
    const std::vector<float> k = Slab(*c, 0, 0, head);
    double mean0 = 0, norm = 0;
    for (int t = 0; t < T; ++t) {
      mean0 += k[t * D];
      norm += std::hypot(k[t * D], k[t * D + D / 2]);
    }
    EXPECT_LT(std::fabs(mean0 / T), 0.2 * norm / T);
  }
}

double Lag1Correlation(const std::vector<float>& x, int T, int D, int channel) {
  double mean = 0;
  for (int t = 0; t < T; ++t) mean += x[t * D + channel];
  mean /= T;
  double num = 0, den = 0;
  for (int t = 0; t < T; ++t) {
    const double a = x[t * D + channel] - mean;
    den += a * a;
    if (t > 0) num += a * (x[(t - 1) * D + channel] - mean);
  }
  return num / den;
}

TEST(SynthKvTest, NeighbouringTokensAreCorrelated) {
  SynthOptions o = SmallOptions(21);
  o.shape.tokens = 4000;
  o.token_correlation_value = 0.6f;
  auto c = SynthesizeKv(o);
  ASSERT_TRUE(c.ok());
  const int T = o.shape.tokens, D = o.shape.head_dim;
  const std::vector<float> v = Slab(*c, 2, 1, 0);
  double avg = 0;
  for (int d = 0; d < D; ++d) avg += Lag1Correlation(v, T, D, d);
  EXPECT_NEAR(avg / D, 0.6, 0.08);
  // Keys: the slow RoPE channels carry the AR(1) correlation (0.9).
  const std::vector<float> k = Slab(*c, 2, 0, 0);
  EXPECT_GT(Lag1Correlation(k, T, D, D - 1), 0.75);
}

TEST(SynthKvTest, ValuesSmallerThanKeysAndSinkNearZero) {
  SynthOptions o = SmallOptions(8);
  auto c = SynthesizeKv(o);
  ASSERT_TRUE(c.ok());
  const int T = o.shape.tokens, D = o.shape.head_dim;
  const std::vector<float> k = Slab(*c, 0, 0, 0), v = Slab(*c, 0, 1, 0);
  double k_rms = 0, v_rms = 0, sink = 0;
  for (size_t i = 0; i < k.size(); ++i) k_rms += k[i] * k[i], v_rms += v[i] * v[i];
  for (int d = 0; d < D; ++d) sink += v[d] * v[d];
  k_rms = std::sqrt(k_rms / k.size());
  v_rms = std::sqrt(v_rms / v.size());
  EXPECT_LT(v_rms, k_rms);
  EXPECT_LT(std::sqrt(sink / D), 0.2 * v_rms);
  (void)T;
}

TEST(SynthKvTest, RejectsBadOptions) {
  SynthOptions o = SmallOptions(1);
  o.shape.head_dim = 33;
  EXPECT_EQ(SynthesizeKv(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(1);
  o.shape.tokens = 0;
  EXPECT_EQ(SynthesizeKv(o).status().code(), StatusCode::kInvalidArgument);
  o = SmallOptions(1);
  o.token_correlation_key = 1.0f;
  EXPECT_EQ(SynthesizeKv(o).status().code(), StatusCode::kOutOfRange);
  o = SmallOptions(1);
  o.shape = KvShape{1 << 20, 64, 1 << 20, 64};
  EXPECT_EQ(SynthesizeKv(o).status().code(), StatusCode::kResourceExhausted);
}

TEST(SynthKvTest, ShapePresets) {
  auto small = FindSynthShapePreset("small");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(SynthShapePresets().front().name, "small");
  auto llama = FindSynthShapePreset("llama3-8b");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->shape.layers, 32);
  EXPECT_EQ(llama->shape.kv_heads, 8);
  EXPECT_EQ(llama->shape.head_dim, 128);
  auto missing = FindSynthShapePreset("gpt-5");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("llama3-8b"), std::string::npos);
}

TEST(SynthKvTest, MetadataSaysSynthetic) {
  const KvFileMetadata m = SynthMetadata(SmallOptions(77));
  EXPECT_EQ(m.at("synthetic"), "true");
  EXPECT_EQ(m.at("synth.seed"), "77");
}

}  // namespace
}  // namespace kvserve
