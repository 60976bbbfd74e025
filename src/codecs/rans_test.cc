// Copyright kvserve authors.
#include "codecs/rans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

using testing::Distribution;
using testing::RandomCount;
using testing::RandomLevels;
using testing::RandomSegment;

std::vector<uint8_t> EncodeOrDie(const RansCodec& codec, const pipeline::CodeSegment& seg) {
  std::vector<uint8_t> out;
  Status s = codec.Encode(seg, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(RansNormalizeTest, SumsToTableSizeAndKeepsEverySeenSymbol) {
  std::mt19937_64 rng(0xf7e9);
  for (int trial = 0; trial < 2000; ++trial) {
    const int table_bits = std::uniform_int_distribution<int>(8, 15)(rng);
    const int levels = RandomLevels(rng);
    std::vector<uint64_t> counts(levels);
    const int shape = trial % 3;
    for (auto& c : counts) {
      if (shape == 0) c = std::uniform_int_distribution<uint64_t>(0, 1000000)(rng);
      if (shape == 1) c = std::uniform_int_distribution<int>(0, 3)(rng) == 0
                              ? std::uniform_int_distribution<uint64_t>(0, 3)(rng)
                              : 0;
      if (shape == 2) c = uint64_t{1} << std::uniform_int_distribution<int>(0, 39)(rng);
    }
    if (std::accumulate(counts.begin(), counts.end(), uint64_t{0}) == 0) counts[0] = 1;
    std::vector<uint32_t> freqs(levels), again(levels);
    NormalizeFrequencies(counts, table_bits, freqs);
    NormalizeFrequencies(counts, table_bits, again);
    EXPECT_EQ(freqs, again);
    uint64_t sum = 0;
    for (int s = 0; s < levels; ++s) {
      sum += freqs[s];
      EXPECT_EQ(counts[s] > 0, freqs[s] > 0) << "symbol " << s;
    }
    EXPECT_EQ(sum, uint64_t{1} << table_bits);
  }
}

TEST(RansTest, RoundTripsEveryTableSizeAndDistribution) {
  std::mt19937_64 rng(0x2a45);
  for (int trial = 0; trial < 240; ++trial) {
    const int table_bits = 8 + trial % 8;
    const int levels = RandomLevels(rng);
    const auto dist = testing::kAllDistributions[(trial / 8) % 5];
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 200000), dist);
    RansCodec codec(table_bits);
    const auto bytes = EncodeOrDie(codec, seg);
    ASSERT_EQ(bytes, EncodeOrDie(codec, seg)) << "not deterministic";
    std::vector<uint8_t> back(seg.symbols.size() + 1, 0xEE);
    Status s = codec.Decode(bytes, seg.levels, seg.symbols.size(), back.data());
    ASSERT_TRUE(s.ok()) << s.ToString() << " levels " << levels << " count "
                        << seg.symbols.size();
    ASSERT_EQ(back.back(), 0xEE);
    back.pop_back();
    ASSERT_EQ(back, seg.symbols);
    // Never larger than the packed fallback.
    ASSERT_LE(bytes.size(), 1 + PackedSize(seg.symbols.size(), pipeline::BitsForLevels(levels)));
    // A decoder configured with other table bits reads it too.
    back.assign(seg.symbols.size(), 0);
    ASSERT_TRUE(RansCodec(8 + (trial + 3) % 8)
                    .Decode(bytes, seg.levels, seg.symbols.size(), back.data())
                    .ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

// The normative encoder written the obvious way (a division per symbol, as
// in docs/format.md §Codecs/rans): the reference the fast encoder must match
// byte for byte.
std::vector<uint8_t> ReferenceRansEncode(const pipeline::CodeSegment& seg, int table_bits) {
  const size_t count = seg.symbols.size();
  const int bits = pipeline::BitsForLevels(seg.levels);
  std::vector<uint8_t> packed(1 + PackedSize(count, bits));
  packed[0] = static_cast<uint8_t>(RansMode::kPacked);
  PackSymbols(seg.symbols.data(), count, bits, packed.data() + 1, PackImpl::kScalar);
  if (count == 0) return packed;
  std::vector<uint64_t> counts(seg.levels, 0);
  for (uint8_t s : seg.symbols) ++counts[s];
  std::vector<uint32_t> freqs(seg.levels), cum(seg.levels + 1, 0);
  NormalizeFrequencies(counts, table_bits, freqs);
  for (int s = 0; s < seg.levels; ++s) cum[s + 1] = cum[s] + freqs[s];
  std::vector<uint16_t> words;
  uint32_t state[kRansLanes];
  for (uint32_t& x : state) x = kRansStateLow;
  for (size_t k = count; k-- > 0;) {
    const uint32_t f = freqs[seg.symbols[k]];
    uint32_t x = state[k % kRansLanes];
    if (x >= (uint64_t{f} << (32 - table_bits))) {
      words.push_back(static_cast<uint16_t>(x));
      x >>= 16;
    }
    state[k % kRansLanes] = ((x / f) << table_bits) + (x % f) + cum[seg.symbols[k]];
  }
  std::vector<uint8_t> out = {static_cast<uint8_t>(RansMode::kRans),
                              static_cast<uint8_t>(seg.levels - 1),
                              static_cast<uint8_t>(table_bits)};
  for (uint32_t f : freqs) {
    for (; f >= 0x80; f >>= 7) out.push_back(static_cast<uint8_t>(f | 0x80));
    out.push_back(static_cast<uint8_t>(f));
  }
  for (size_t l = 0; l < std::min<size_t>(count, kRansLanes); ++l) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(state[l] >> (8 * b)));
  }
  for (size_t w = words.size(); w-- > 0;) {
    out.push_back(static_cast<uint8_t>(words[w]));
    out.push_back(static_cast<uint8_t>(words[w] >> 8));
  }
  return out.size() < packed.size() ? out : packed;
}

TEST(RansTest, EncoderMatchesDivisionReference) {
  std::mt19937_64 rng(0xd1f);
  for (int trial = 0; trial < 400; ++trial) {
    const int table_bits = 8 + trial % 8;
    const int levels = trial % 7 == 0 ? 2 : RandomLevels(rng);
    const auto dist = testing::kAllDistributions[(trial / 8) % 5];
    const size_t count = trial % 5 == 0 ? RandomCount(rng, 100) : RandomCount(rng, 50000);
    const auto seg = RandomSegment(rng, levels, count, dist);
    ASSERT_EQ(EncodeOrDie(RansCodec(table_bits), seg), ReferenceRansEncode(seg, table_bits))
        << "levels " << levels << " count " << count << " table_bits " << table_bits;
  }
}

TEST(RansTest, ScalarAndAvx2DecodersAgreeOnValidAndCorruptInput) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937_64 rng(0xa7f2);
  for (int trial = 0; trial < 120; ++trial) {
    const int table_bits = 8 + trial % 8;
    const int levels = RandomLevels(rng);
    const auto dist = testing::kAllDistributions[trial % 5];
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 40000), dist);
    auto bytes = EncodeOrDie(RansCodec(table_bits), seg);
    if (trial % 2 == 1 && !bytes.empty()) {
      for (int f = 0; f < 4; ++f) {
        bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng)] ^=
            static_cast<uint8_t>(1u << (rng() % 8));
      }
    }
    const size_t count = seg.symbols.size();
    std::vector<uint8_t> scalar(count + 1, 0xAB), avx2(count + 1, 0xAB);
    const Status a = RansCodec(table_bits, PackImpl::kScalar)
                         .Decode(bytes, seg.levels, count, scalar.data());
    const Status b =
        RansCodec(table_bits, PackImpl::kAvx2).Decode(bytes, seg.levels, count, avx2.data());
    ASSERT_EQ(a.code(), b.code()) << a.ToString() << " vs " << b.ToString();
    ASSERT_EQ(a.message(), b.message());
    if (a.ok()) {
      ASSERT_EQ(scalar, avx2);
    }
  }
}

TEST(RansTest, SingleSymbolSegmentsUseFullTable) {
  std::mt19937_64 rng(0x5e9);
  for (int trial = 0; trial < 50; ++trial) {
    const int levels = RandomLevels(rng);
    const size_t count = std::uniform_int_distribution<size_t>(5000, 300000)(rng);
    const auto seg = RandomSegment(rng, levels, count, Distribution::kSingle);
    RansCodec codec(8 + trial % 8);
    const auto bytes = EncodeOrDie(codec, seg);
    ASSERT_EQ(bytes[0], static_cast<uint8_t>(RansMode::kRans));
    // Header + table + 32 states, no words.
    EXPECT_LE(bytes.size(), 3u + 3 * levels + 4 * kRansLanes);
    std::vector<uint8_t> back(count);
    ASSERT_TRUE(codec.Decode(bytes, seg.levels, count, back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

TEST(RansTest, CompressesSkewedDataCloseToEntropy) {
  std::mt19937_64 rng(0xe7);
  for (int trial = 0; trial < 30; ++trial) {
    const int levels = RandomLevels(rng);
    const size_t count = std::uniform_int_distribution<size_t>(100000, 1000000)(rng);
    const auto dist = trial % 2 ? Distribution::kGeometric : Distribution::kGaussian;
    const auto seg = RandomSegment(rng, levels, count, dist);
    RansCodec codec(12);
    const auto bytes = EncodeOrDie(codec, seg);
    const double entropy_bytes = testing::EntropyBits(seg.symbols) / 8;
    // Table overhead: header, at most 2 varint bytes per level, states.
    const double overhead = 3 + 2.0 * levels + 4 * kRansLanes;
    EXPECT_LE(bytes.size(), entropy_bytes * 1.02 + overhead)
        << "levels " << levels << " count " << count << " entropy bytes " << entropy_bytes;
    std::vector<uint8_t> back(count);
    ASSERT_TRUE(codec.Decode(bytes, seg.levels, count, back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

TEST(RansTest, FallsBackToPackedForIncompressibleData) {
  std::mt19937_64 rng(0xfa11);
  for (int trial = 0; trial < 30; ++trial) {
    const int levels = 1 << std::uniform_int_distribution<int>(1, 8)(rng);
    const size_t count = RandomCount(rng, 100000);
    const auto seg = RandomSegment(rng, levels, count, Distribution::kUniform);
    RansCodec codec;
    const auto bytes = EncodeOrDie(codec, seg);
    const size_t packed = PackedSize(count, pipeline::BitsForLevels(levels));
    if (count == 0 || count > 1000) {
      ASSERT_EQ(bytes[0], static_cast<uint8_t>(RansMode::kPacked));
      ASSERT_EQ(bytes.size(), 1 + packed);
    }
    std::vector<uint8_t> back(count);
    ASSERT_TRUE(codec.Decode(bytes, seg.levels, count, back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

// Decoding mutated input must fail or produce `count` symbols < levels, and
// never touch memory outside out[0..count).
void ExpectSafeDecode(const RansCodec& codec, std::span<const uint8_t> in, uint16_t levels,
                      size_t count) {
  std::vector<uint8_t> back(count + 64, 0xCD);
  Status s = codec.Decode(in, levels, count, back.data() + 32);
  for (int k = 0; k < 32; ++k) {
    ASSERT_EQ(back[k], 0xCD);
    ASSERT_EQ(back[32 + count + k], 0xCD);
  }
  if (s.ok()) {
    for (size_t i = 0; i < count; ++i) ASSERT_LT(back[32 + i], levels);
  } else {
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  }
}

TEST(RansTest, RejectsTruncationsAndTrailingBytes) {
  std::mt19937_64 rng(0x7c);
  for (int trial = 0; trial < 40; ++trial) {
    const int levels = RandomLevels(rng);
    const auto dist = trial % 2 ? Distribution::kGeometric : Distribution::kSparse;
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 3000), dist);
    RansCodec codec;
    auto bytes = EncodeOrDie(codec, seg);
    std::vector<uint8_t> back(seg.symbols.size() + 1);
    for (size_t len = 0; len < bytes.size(); ++len) {
      ASSERT_FALSE(codec.Decode(std::span<const uint8_t>(bytes.data(), len), seg.levels,
                                seg.symbols.size(), back.data())
                       .ok())
          << "truncated to " << len << " of " << bytes.size();
    }
    bytes.push_back(static_cast<uint8_t>(rng()));
    ASSERT_FALSE(codec.Decode(bytes, seg.levels, seg.symbols.size(), back.data()).ok());
    bytes.push_back(static_cast<uint8_t>(rng()));
    ASSERT_FALSE(codec.Decode(bytes, seg.levels, seg.symbols.size(), back.data()).ok());
  }
}

TEST(RansTest, RejectsLevelsAndCountMismatch) {
  std::mt19937_64 rng(0x1e4);
  for (int trial = 0; trial < 100; ++trial) {
    const int levels = std::uniform_int_distribution<int>(2, 255)(rng);
    const size_t count = std::uniform_int_distribution<size_t>(2000, 20000)(rng);
    const auto seg = RandomSegment(rng, levels, count, Distribution::kGeometric);
    RansCodec codec;
    const auto bytes = EncodeOrDie(codec, seg);
    if (bytes[0] != static_cast<uint8_t>(RansMode::kRans)) continue;
    std::vector<uint8_t> back(count + 100);
    EXPECT_FALSE(codec.Decode(bytes, static_cast<uint16_t>(levels + 1), count, back.data()).ok());
    EXPECT_FALSE(codec.Decode(bytes, seg.levels, count + 1 + trial % 40, back.data()).ok());
    EXPECT_FALSE(codec.Decode(bytes, seg.levels, count - 1 - trial % 40, back.data()).ok());
  }
}

TEST(RansTest, RejectsBadFrequencyTables) {
  std::mt19937_64 rng(0x7ab1);
  for (int trial = 0; trial < 200; ++trial) {
    const int levels = std::uniform_int_distribution<int>(2, 16)(rng);
    const size_t count = 5000;
    const auto seg = RandomSegment(rng, levels, count, Distribution::kGeometric);
    RansCodec codec(12);
    auto bytes = EncodeOrDie(codec, seg);
    if (bytes[0] != static_cast<uint8_t>(RansMode::kRans)) continue;
    std::vector<uint8_t> back(count);
    // Bad table_bits.
    auto bad = bytes;
    bad[2] = static_cast<uint8_t>(trial % 2 ? 7 : 16 + trial % 200);
    EXPECT_EQ(codec.Decode(bad, seg.levels, count, back.data()).code(), StatusCode::kCorruption);
    // A table that no longer sums to 2^12: claim table_bits 13 or 11.
    bad = bytes;
    bad[2] = static_cast<uint8_t>(trial % 2 ? 13 : 11);
    EXPECT_EQ(codec.Decode(bad, seg.levels, count, back.data()).code(), StatusCode::kCorruption);
    // Unknown mode.
    bad = bytes;
    bad[0] = static_cast<uint8_t>(2 + rng() % 254);
    EXPECT_EQ(codec.Decode(bad, seg.levels, count, back.data()).code(), StatusCode::kCorruption);
  }
}

TEST(RansTest, SurvivesEveryBitFlipOfSmallEncodings) {
  std::mt19937_64 rng(0xb17);
  for (int trial = 0; trial < 30; ++trial) {
    const int levels = RandomLevels(rng);
    const auto dist = testing::kAllDistributions[trial % 5];
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 600), dist);
    RansCodec codec(8 + trial % 8);
    const auto bytes = EncodeOrDie(codec, seg);
    int detected = 0, flips = 0;
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      auto bad = bytes;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      ExpectSafeDecode(codec, bad, seg.levels, seg.symbols.size());
      std::vector<uint8_t> back(seg.symbols.size());
      ++flips;
      detected += !codec.Decode(bad, seg.levels, seg.symbols.size(), back.data()).ok();
    }
    if (bytes[0] == static_cast<uint8_t>(RansMode::kRans)) {
      // The final-state check catches nearly every flip of a rANS stream.
      EXPECT_GE(detected, flips * 9 / 10);
    }
  }
}

TEST(RansTest, SurvivesRandomFlipsOfLargeEncodings) {
  std::mt19937_64 rng(0xf11b);
  for (int trial = 0; trial < 10; ++trial) {
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, 200000, Distribution::kGaussian);
    RansCodec codec;
    const auto bytes = EncodeOrDie(codec, seg);
    for (int k = 0; k < 30; ++k) {
      auto bad = bytes;
      const int flips = std::uniform_int_distribution<int>(1, 8)(rng);
      for (int f = 0; f < flips; ++f) {
        bad[std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng)] ^=
            static_cast<uint8_t>(1u << (rng() % 8));
      }
      ExpectSafeDecode(codec, bad, seg.levels, seg.symbols.size());
    }
  }
}

}  // namespace
}  // namespace kvserve::codecs
