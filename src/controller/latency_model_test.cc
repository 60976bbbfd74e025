// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "controller/test_util.h"
#include "kvserve/controller.h"

namespace kvserve {
namespace {

using controller_test::LogUniform;

ProfileCost RandomProfile(std::mt19937_64& rng, bool with_t0) {
  ProfileCost p;
  p.spec = "p";
  p.compression_ratio = LogUniform(rng, 1.01, 16.0);
  p.encode_bytes_per_second = LogUniform(rng, 5e8, 1e11);
  p.decode_bytes_per_second = LogUniform(rng, 5e8, 1e11);
  p.overhead_seconds = with_t0 ? LogUniform(rng, 1e-5, 5e-3) : 0.0;
  return p;
}

TEST(LatencyModelTest, SerialIsEquationOnePlusOverhead) {
  ProfileCost p;
  p.compression_ratio = 4.0;
  p.encode_bytes_per_second = 2e9;
  p.decode_bytes_per_second = 4e9;
  p.overhead_seconds = 0.001;
  // 1/s_p = 1/enc + 1/dec (not a harmonic mean, which would be twice s_p).
  EXPECT_DOUBLE_EQ(p.CodecSecondsPerByte(), 1.0 / 2e9 + 1.0 / 4e9);
  EXPECT_DOUBLE_EQ(SerialSeconds(p, 1e9, 1e9), 0.001 + 0.5 + 0.25 + 0.25);
  EXPECT_DOUBLE_EQ(SerialSeconds(ProfileCost{}, 1e9, 2e9), 0.5);  // raw
  EXPECT_DOUBLE_EQ(StreamedSeconds(ProfileCost{}, 1e9, 2e9, 32), 0.5);
  // Gbps at the edge: 1 Gbps = 1.25e8 B/s.
  EXPECT_DOUBLE_EQ(GbpsToBytesPerSecond(8.0), 1e9);
}

TEST(LatencyModelTest, StreamedBoundsOnRandomProfiles) {
  std::mt19937_64 rng(21);
  for (int i = 0; i < 5000; ++i) {
    const ProfileCost p = RandomProfile(rng, true);
    const double v = LogUniform(rng, 1e5, 1e10), b = LogUniform(rng, 1e7, 1e11);
    const int layers = 1 + static_cast<int>(rng() % 80);
    const double serial = SerialSeconds(p, v, b);
    const double streamed = StreamedSeconds(p, v, b, layers);
    EXPECT_NEAR(StreamedSeconds(p, v, b, 1), serial, 1e-12 * serial);
    EXPECT_LE(streamed, serial * (1 + 1e-12));
    // Never faster than the bottleneck stage over all of V.
    const double bottleneck = std::max({v / p.encode_bytes_per_second,
                                        v / (b * p.compression_ratio),
                                        v / p.decode_bytes_per_second});
    EXPECT_GE(streamed, p.overhead_seconds + bottleneck * (1 - 1e-12));
  }
}

// Completion time of L identical jobs through stages `t` (a permutation flow
// shop), by the recurrence C[i][j] = max(C[i-1][j], C[i][j-1]) + t[j].
double FlowShop(int layers, const std::vector<double>& t) {
  std::vector<double> c(t.size(), 0.0);
  for (int i = 0; i < layers; ++i) {
    double prev = 0.0;
    for (size_t j = 0; j < t.size(); ++j) prev = c[j] = std::max(c[j], prev) + t[j];
  }
  return c.back();
}

// With a source in front, the streamed time is the four-stage flow shop's
// completion minus the source's own L s, simulated job by job; a profile that
// is not streamed overlaps only its encode, then moves the whole frame.
TEST(LatencyModelTest, SourceOverlapMatchesTheSimulatedFlowShop) {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 5000; ++i) {
    ProfileCost p = RandomProfile(rng, true);
    p.streamed = i % 3 != 0;
    const double v = LogUniform(rng, 1e5, 1e10), b = LogUniform(rng, 1e7, 1e11);
    const int layers = 1 + static_cast<int>(rng() % 80);
    const double source = i % 5 == 0 ? 0.0 : LogUniform(rng, 1e-4, 10.0);
    const double l = layers, s = source / l;
    const double e = v / l / p.encode_bytes_per_second, n = v / l / (b * p.compression_ratio),
                 d = v / l / p.decode_bytes_per_second;
    const double expect = p.streamed ? FlowShop(layers, {s, e, n, d}) - source + p.overhead_seconds
                                     : FlowShop(layers, {s, e}) - source + l * (n + d) + p.overhead_seconds;
    const double got = StreamedSeconds(p, v, b, layers, source);
    ASSERT_NEAR(got, expect, 1e-9 * expect) << "i " << i;
    // A source never makes the movement after it longer, and never hides the
    // last layer's own stages.
    EXPECT_LE(got, StreamedSeconds(p, v, b, layers) * (1 + 1e-12));
    EXPECT_GE(got, (p.overhead_seconds + e + n + d) * (1 - 1e-12));
    // The serial model overlaps nothing.
    EXPECT_EQ(PredictSeconds({LatencyModelKind::kSerial, layers}, p, v, b, source), SerialSeconds(p, v, b));
  }
}

// A codec `f` times slower (t0 too) with the link and the source unchanged
// is f T(V, B f, S / f): what the controller's codec drift relies on.
TEST(LatencyModelTest, CodecSlowdownScalesWithTheSourceInside) {
  std::mt19937_64 rng(24);
  for (int i = 0; i < 2000; ++i) {
    ProfileCost p = RandomProfile(rng, true);
    p.streamed = i % 2 == 0;
    const double v = LogUniform(rng, 1e5, 1e10), b = LogUniform(rng, 1e7, 1e11);
    const double source = LogUniform(rng, 1e-4, 10.0), f = LogUniform(rng, 0.25, 8.0);
    const int layers = 1 + static_cast<int>(rng() % 64);
    ProfileCost slow = p;
    slow.encode_bytes_per_second /= f;
    slow.decode_bytes_per_second /= f;
    slow.overhead_seconds *= f;
    const double direct = StreamedSeconds(slow, v, b, layers, source);
    ASSERT_NEAR(f * StreamedSeconds(p, v, b * f, layers, source / f), direct, 1e-9 * direct);
  }
}

TEST(LatencyModelTest, BenefitThresholdSeparatesFasterFromSlower) {
  std::mt19937_64 rng(22);
  for (int i = 0; i < 5000; ++i) {
    const bool with_t0 = i % 2;
    ProfileCost p = RandomProfile(rng, with_t0);
    p.streamed = i % 4 < 3;
    const double v = LogUniform(rng, 1e5, 1e10);
    if (!with_t0) {
      const double bstar = BenefitThreshold(p);
      const double s_p = 1.0 / p.CodecSecondsPerByte();
      EXPECT_NEAR(bstar, (1.0 - 1.0 / p.compression_ratio) * s_p, 1e-9 * bstar);
      EXPECT_LT(SerialSeconds(p, v, bstar * 0.999), v / (bstar * 0.999));
      EXPECT_GT(SerialSeconds(p, v, bstar * 1.001), v / (bstar * 1.001));
    }
    for (LatencyModelKind kind : {LatencyModelKind::kSerial, LatencyModelKind::kStreamed}) {
      const LatencyModel m{kind, 1 + static_cast<int>(rng() % 64)};
      const double bstar = BenefitThresholdForSize(m, p, v);
      EXPECT_LE(BenefitThresholdForSize({LatencyModelKind::kSerial, 1}, p, v),
                BenefitThreshold(p) * (1 + 1e-12));
      if (bstar <= 0.0) continue;
      EXPECT_LT(PredictSeconds(m, p, v, bstar * 0.999), v / (bstar * 0.999));
      EXPECT_GT(PredictSeconds(m, p, v, bstar * 1.001), v / (bstar * 1.001));
    }
  }
  ProfileCost no_gain;
  no_gain.compression_ratio = 0.9;
  no_gain.encode_bytes_per_second = no_gain.decode_bytes_per_second = 1e9;
  EXPECT_EQ(BenefitThreshold(no_gain), 0.0);
  EXPECT_EQ(BenefitThresholdForSize({}, no_gain, 1e6), 0.0);
}

}  // namespace
}  // namespace kvserve
