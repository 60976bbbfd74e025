// Copyright kvserve authors.
#include "quantizers/grid_kernels.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kvserve/kv.h"

namespace kvserve::quantizers {
namespace {

float Ulp(float v) {
  const float a = std::fabs(v);
  return std::nextafter(a, INFINITY) - a;
}

// Restores automatic ISA selection when a test ends.
class IsaGuard {
 public:
  explicit IsaGuard(GridKernelIsa isa) { SetGridKernelIsaForTesting(isa); }
  ~IsaGuard() { SetGridKernelIsaForTesting(GridKernelIsa::kAuto); }
};

GridSpec RandomSpec(std::mt19937_64& rng) {
  GridSpec spec;
  const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
  spec.levels = kind == 0 ? std::uniform_int_distribution<int>(2, 256)(rng)
                          : (1 << std::uniform_int_distribution<int>(1, 8)(rng));
  spec.symmetric = std::bernoulli_distribution(0.4)(rng);
  spec.scale_dtype = std::bernoulli_distribution(0.5)(rng) ? ScaleDType::kF16 : ScaleDType::kF32;
  return spec;
}

RunShape RandomRunShape(std::mt19937_64& rng) {
  static const int kDims[] = {8, 12, 16, 24, 32, 64, 128};
  RunShape s;
  s.dim = kDims[std::uniform_int_distribution<int>(0, 6)(rng)];
  s.tokens = std::uniform_int_distribution<int>(1, 70)(rng);
  s.axis = std::bernoulli_distribution(0.5)(rng) ? QuantAxis::kToken : QuantAxis::kChannel;
  if (s.axis == QuantAxis::kToken) {
    std::vector<int> divisors = {0};
    for (int g = 1; g <= s.dim; ++g) {
      if (s.dim % g == 0) divisors.push_back(g);
    }
    s.group = divisors[std::uniform_int_distribution<size_t>(0, divisors.size() - 1)(rng)];
  } else {
    s.group = std::uniform_int_distribution<int>(0, 40)(rng);
  }
  return s;
}

// Values of a random magnitude and offset; sometimes constant, sometimes a
// mix of +0 and -0 (which min/max may order either way).
std::vector<float> RandomValues(std::mt19937_64& rng, size_t n, bool f16_safe) {
  std::vector<float> v(n);
  const int mode = std::uniform_int_distribution<int>(0, 9)(rng);
  const float scale = std::ldexp(1.0f, std::uniform_int_distribution<int>(-30, 10)(rng));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float offset = normal(rng) * scale * 4.0f;
  if (mode == 0) {
    float c = offset + normal(rng) * scale;
    if (f16_safe && std::bernoulli_distribution(0.5)(rng)) c = HalfToFloat(FloatToHalf(c));
    std::fill(v.begin(), v.end(), c);
  } else if (mode == 1) {
    for (float& x : v) x = std::bernoulli_distribution(0.5)(rng) ? 0.0f : -0.0f;
  } else {
    for (float& x : v) x = offset + normal(rng) * scale;
  }
  return v;
}

size_t GroupOf(const RunShape& s, int t, int d) {
  if (s.axis == QuantAxis::kToken) {
    const int gc = (s.group == 0 || s.group >= s.dim) ? s.dim : s.group;
    return static_cast<size_t>(t) * (s.dim / gc) + d / gc;
  }
  const int gt = s.group == 0 ? s.tokens : s.group;
  return static_cast<size_t>(t / gt) * s.dim + d;
}

TEST(GridParamsTest, StoredGridCoversTheGroupAndIsTight) {
  std::mt19937_64 rng(101);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 20000; ++trial) {
    const GridSpec spec = RandomSpec(rng);
    const float mag = std::ldexp(1.0f, std::uniform_int_distribution<int>(-30, 12)(rng));
    float a = normal(rng) * mag, b = normal(rng) * mag;
    if (trial % 17 == 0) b = a;
    const float mn = std::min(a, b), mx = std::max(a, b);
    GridParams p;
    ASSERT_TRUE(ComputeGridParams(spec, mn, mx, &p).ok()) << mn << " " << mx;
    const float lm1 = static_cast<float>(spec.levels - 1);
    ASSERT_GE(p.scale, 0.0f);
    if (spec.scale_dtype == ScaleDType::kF16) {
      EXPECT_EQ(HalfToFloat(FloatToHalf(p.scale)), p.scale);
      EXPECT_EQ(HalfToFloat(FloatToHalf(p.zero)), p.zero);
    }
    if (spec.symmetric) {
      const float amax = std::max(std::fabs(mn), std::fabs(mx));
      EXPECT_EQ(p.zero, 0.0f);
      EXPECT_GE(lm1 * 0.5f * p.scale, amax);
      const double ideal = amax / (lm1 * 0.5);
      const double slack = spec.scale_dtype == ScaleDType::kF16 ? 0x1p-9 : 0x1p-20;
      EXPECT_LE(p.scale,
                ideal * (1 + slack) + (spec.scale_dtype == ScaleDType::kF16 ? 0x1p-24 : FLT_MIN));
    } else {
      EXPECT_LE(p.zero, mn);
      EXPECT_GE(p.zero + (lm1 * p.scale), mx);
      const double ideal = (double{mx} - p.zero) / lm1;
      const double slack = spec.scale_dtype == ScaleDType::kF16 ? 0x1p-9 : 0x1p-20;
      EXPECT_LE(p.scale,
                ideal * (1 + slack) + (spec.scale_dtype == ScaleDType::kF16 ? 0x1p-24 : FLT_MIN));
      if (spec.scale_dtype == ScaleDType::kF32 && mn == mx) {
        EXPECT_EQ(p.scale, 0.0f);
      }
    }
  }
}

TEST(GridParamsTest, RejectsValuesOutsideFp16ZeroRange) {
  GridParams p;
  const GridSpec f16{16, false, ScaleDType::kF16};
  EXPECT_EQ(ComputeGridParams(f16, -70000.0f, 1.0f, &p).code(), StatusCode::kInvalidArgument);
  const GridSpec f32{16, false, ScaleDType::kF32};
  EXPECT_TRUE(ComputeGridParams(f32, -70000.0f, 1.0f, &p).ok());
  EXPECT_EQ(ComputeGridParams(f32, -FLT_MAX, FLT_MAX, &p).code(), StatusCode::kInvalidArgument);
}

struct RunResult {
  std::vector<uint8_t> codes;
  std::vector<GridParams> params;
  std::vector<float> recon;
};

RunResult RoundTrip(const GridSpec& spec, const RunShape& s, const std::vector<float>& x) {
  RunResult r;
  r.codes.assign(static_cast<size_t>(s.tokens) * s.dim, 0xEE);
  r.params.resize(s.NumGroups());
  Status st = QuantizeRun(spec, s, x.data(), s.dim, r.codes.data(), r.params.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  r.recon.assign(x.size(), -1.0f);
  st = DequantizeRun(spec, s, r.codes.data(), r.params.data(), r.recon.data(), s.dim);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

// Every element reconstructs within half of its group's stored scale, up to
// the rounding of the fp32 operations themselves.
TEST(GridRunTest, EveryElementWithinHalfStoredStep) {
  std::mt19937_64 rng(202);
  for (int trial = 0; trial < 600; ++trial) {
    const GridSpec spec = RandomSpec(rng);
    const RunShape s = RandomRunShape(rng);
    const std::vector<float> x = RandomValues(rng, static_cast<size_t>(s.tokens) * s.dim,
                                              spec.scale_dtype == ScaleDType::kF16);
    const RunResult r = RoundTrip(spec, s, x);
    bool all_equal = true;
    for (float v : x) all_equal = all_equal && v == x[0];
    for (int t = 0; t < s.tokens; ++t) {
      for (int d = 0; d < s.dim; ++d) {
        const size_t i = static_cast<size_t>(t) * s.dim + d;
        const GridParams& p = r.params[GroupOf(s, t, d)];
        ASSERT_LT(r.codes[i], spec.levels);
        const float err = std::fabs(r.recon[i] - x[i]);
        const float bound =
            0.5f * p.scale + p.scale * 0x1p-13f +
            4 * Ulp(std::max({std::fabs(x[i]), std::fabs(r.recon[i]), std::fabs(p.zero)}));
        ASSERT_LE(err, bound) << "trial " << trial << " t=" << t << " d=" << d << " x=" << x[i]
                              << " y=" << r.recon[i] << " scale=" << p.scale;
        // Constant runs are exact when the value is storable as a zero point.
        if (all_equal && !spec.symmetric && HalfToFloat(FloatToHalf(x[0])) == x[0]) {
          ASSERT_EQ(r.recon[i], x[i] + 0.0f);
        }
        if (all_equal && !spec.symmetric && spec.scale_dtype == ScaleDType::kF32) {
          ASSERT_EQ(r.recon[i], x[i] + 0.0f);
        }
      }
    }
  }
}

TEST(GridRunTest, Avx2MatchesScalarBitForBit) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937_64 rng(303);
  for (int trial = 0; trial < 600; ++trial) {
    const GridSpec spec = RandomSpec(rng);
    const RunShape s = RandomRunShape(rng);
    const std::vector<float> x = RandomValues(rng, static_cast<size_t>(s.tokens) * s.dim,
                                              spec.scale_dtype == ScaleDType::kF16);
    RunResult scalar, avx2;
    {
      IsaGuard guard(GridKernelIsa::kScalar);
      scalar = RoundTrip(spec, s, x);
    }
    {
      IsaGuard guard(GridKernelIsa::kAvx2);
      avx2 = RoundTrip(spec, s, x);
    }
    ASSERT_EQ(scalar.codes, avx2.codes) << "trial " << trial;
    ASSERT_EQ(scalar.params.size(), avx2.params.size());
    ASSERT_EQ(0, std::memcmp(scalar.params.data(), avx2.params.data(),
                             scalar.params.size() * sizeof(GridParams)));
    ASSERT_EQ(0, std::memcmp(scalar.recon.data(), avx2.recon.data(), x.size() * sizeof(float)));
  }
}

TEST(GridRunTest, NonFiniteInputIsInvalidArgumentOnEveryPath) {
  std::mt19937_64 rng(404);
  const float kBad[] = {NAN, INFINITY, -INFINITY};
  for (GridKernelIsa isa : {GridKernelIsa::kScalar, GridKernelIsa::kAvx2}) {
    IsaGuard guard(isa);
    for (int trial = 0; trial < 200; ++trial) {
      const GridSpec spec = RandomSpec(rng);
      const RunShape s = RandomRunShape(rng);
      std::vector<float> x = RandomValues(rng, static_cast<size_t>(s.tokens) * s.dim, true);
      x[std::uniform_int_distribution<size_t>(0, x.size() - 1)(rng)] = kBad[trial % 3];
      std::vector<uint8_t> codes(x.size());
      std::vector<GridParams> params(s.NumGroups());
      EXPECT_EQ(QuantizeRun(spec, s, x.data(), s.dim, codes.data(), params.data()).code(),
                StatusCode::kInvalidArgument);
    }
  }
}

TEST(GridRunTest, CodeAtOrAboveLevelsIsCorruption) {
  std::mt19937_64 rng(505);
  for (GridKernelIsa isa : {GridKernelIsa::kScalar, GridKernelIsa::kAvx2}) {
    IsaGuard guard(isa);
    for (int trial = 0; trial < 100; ++trial) {
      GridSpec spec = RandomSpec(rng);
      if (spec.levels == 256) spec.levels = 255;
      const RunShape s = RandomRunShape(rng);
      const std::vector<float> x = RandomValues(rng, static_cast<size_t>(s.tokens) * s.dim, true);
      RunResult r = RoundTrip(spec, s, x);
      r.codes[std::uniform_int_distribution<size_t>(0, r.codes.size() - 1)(rng)] =
          static_cast<uint8_t>(std::uniform_int_distribution<int>(spec.levels, 255)(rng));
      EXPECT_EQ(
          DequantizeRun(spec, s, r.codes.data(), r.params.data(), r.recon.data(), s.dim).code(),
          StatusCode::kCorruption);
    }
  }
}

TEST(GridParamsTest, SerializationRoundTripsAndRejectsBadBytes) {
  std::mt19937_64 rng(606);
  for (int trial = 0; trial < 300; ++trial) {
    const GridSpec spec = RandomSpec(rng);
    const RunShape s = RandomRunShape(rng);
    const std::vector<float> x = RandomValues(rng, static_cast<size_t>(s.tokens) * s.dim, true);
    const RunResult r = RoundTrip(spec, s, x);
    std::vector<uint8_t> bytes;
    pipeline::ByteWriter w(&bytes);
    WriteGridParams(spec, r.params.data(), r.params.size(), w);
    ASSERT_EQ(bytes.size(), r.params.size() * ParamBytesPerGroup(spec));
    std::vector<GridParams> back(r.params.size());
    {
      pipeline::ByteReader in(bytes);
      ASSERT_TRUE(ReadGridParams(spec, back.size(), in, back.data()).ok());
      EXPECT_TRUE(in.done());
      EXPECT_EQ(0, std::memcmp(back.data(), r.params.data(), back.size() * sizeof(GridParams)));
    }
    {
      std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 1);
      pipeline::ByteReader in(cut);
      EXPECT_EQ(ReadGridParams(spec, back.size(), in, back.data()).code(), StatusCode::kCorruption);
    }
    {
      std::vector<uint8_t> bad = bytes;
      const size_t width = spec.scale_dtype == ScaleDType::kF16 ? 2 : 4;
      const size_t slot = std::uniform_int_distribution<size_t>(0, bad.size() / width - 1)(rng);
      if (width == 2) {
        const uint16_t nan = trial % 2 ? 0x7E00 : 0xFC00;  // NaN or -inf
        std::memcpy(&bad[slot * 2], &nan, 2);
      } else {
        const uint32_t nan = trial % 2 ? 0x7FC00000u : 0xFF800000u;
        std::memcpy(&bad[slot * 4], &nan, 4);
      }
      pipeline::ByteReader in(bad);
      EXPECT_EQ(ReadGridParams(spec, back.size(), in, back.data()).code(), StatusCode::kCorruption);
    }
  }
}

}  // namespace
}  // namespace kvserve::quantizers
