#include "kvserve/kv.h"

#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

// Every fp16 bit pattern survives half -> float -> half (NaNs stay NaN).
TEST(HalfConversion, RoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    uint16_t back = FloatToHalf(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(back)));
    } else {
      EXPECT_EQ(back, h) << "pattern " << h;
    }
  }
}

// Every bf16 pattern round-trips likewise.
TEST(BFloat16Conversion, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    uint16_t back = FloatToBFloat16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(back)));
    } else {
      EXPECT_EQ(back, b);
    }
  }
}

// float -> half picks the nearest representable half (ties to even) on
// random floats across the whole fp16 range, including subnormals.
TEST(HalfConversion, RoundsToNearest) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> expo(-26.0f, 16.5f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    float f = std::exp2(expo(rng)) * (sign(rng) ? -1.0f : 1.0f);
    uint16_t h = FloatToHalf(f);
    float r = HalfToFloat(h);
    if (std::isinf(r)) {
      EXPECT_GE(std::fabs(f), 65504.0f);
      continue;
    }
    // Neighbours of h must not be strictly closer.
    for (int delta : {-1, 1}) {
      uint16_t n = static_cast<uint16_t>(h + delta);
      float rn = HalfToFloat(n);
      if (std::isnan(rn) || std::isinf(rn) || std::signbit(rn) != std::signbit(r)) continue;
      EXPECT_LE(std::fabs(r - f), std::fabs(rn - f)) << f;
    }
  }
}

TEST(KvView, StridedCopyMatchesElementwise) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 20; ++trial) {
    KvShape s{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 4),
              1 + static_cast<int>(rng() % 17), 1 + static_cast<int>(rng() % 9)};
    // A head-major engine layout: [layer][head][kind][token][dim].
    std::vector<float> buf(s.NumElements());
    for (auto& x : buf) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    KvStrides st;
    st.dim = 1;
    st.token = s.head_dim;
    st.kind = st.token * s.tokens;
    st.head = st.kind * 2;
    st.layer = st.head * s.kv_heads;
    KvView v{buf.data(), DType::kF32, s, st};
    ASSERT_TRUE(v.Validate().ok());
    auto copy = KvCache::CopyFrom(v);
    ASSERT_TRUE(copy.ok());
    KvView c = copy->view();
    for (int l = 0; l < s.layers; ++l)
      for (int k = 0; k < 2; ++k)
        for (int h = 0; h < s.kv_heads; ++h)
          for (int t = 0; t < s.tokens; ++t)
            for (int d = 0; d < s.head_dim; ++d)
              ASSERT_EQ(LoadAsFloat(c.At(l, k, h, t, d), DType::kF32),
                        LoadAsFloat(v.At(l, k, h, t, d), DType::kF32));
  }
}

TEST(KvView, RejectsBadShapes) {
  float x = 0;
  KvView v{&x, DType::kF32, KvShape{1, 1, 0, 1}, {}};
  EXPECT_EQ(v.Validate().code(), StatusCode::kInvalidArgument);
  v.shape.tokens = 1;
  v.data = nullptr;
  EXPECT_EQ(v.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
