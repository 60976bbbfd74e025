// Copyright kvserve authors.
#include "codecs/pack.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "codecs/codec_test_util.h"

namespace kvserve::codecs {
namespace {

using testing::Distribution;
using testing::RandomCount;
using testing::RandomLevels;
using testing::RandomSegment;

// Bit-at-a-time statement of the layout in pack.h.
std::vector<uint8_t> ReferencePack(const std::vector<uint8_t>& symbols, int bits) {
  std::vector<uint8_t> out(PackedSize(symbols.size(), bits), 0);
  for (size_t i = 0; i < symbols.size(); ++i) {
    for (int k = 0; k < bits; ++k) {
      const size_t bit = i * bits + k;
      out[bit / 8] |= static_cast<uint8_t>(((symbols[i] >> k) & 1) << (bit % 8));
    }
  }
  return out;
}

std::vector<PackImpl> Impls() {
  std::vector<PackImpl> impls = {PackImpl::kScalar};
  if (CpuHasAvx2()) impls.push_back(PackImpl::kAvx2);
  return impls;
}

TEST(PackTest, MatchesReferenceLayoutForEveryImplementation) {
  std::mt19937_64 rng(0x9ac1);
  for (int trial = 0; trial < 300; ++trial) {
    const int levels = RandomLevels(rng);
    const int bits = pipeline::BitsForLevels(levels);
    const size_t count = RandomCount(rng, trial < 250 ? 3000 : 200000);
    const auto dist = testing::kAllDistributions[trial % 5];
    const auto seg = RandomSegment(rng, levels, count, dist);
    const auto want = ReferencePack(seg.symbols, bits);
    for (PackImpl impl : Impls()) {
      SCOPED_TRACE(::testing::Message() << "impl " << int(impl) << " levels " << levels
                                        << " count " << count);
      std::vector<uint8_t> packed(want.size() + 1, 0xA5);  // guard byte at the end
      PackSymbols(seg.symbols.data(), count, bits, packed.data(), impl);
      ASSERT_EQ(packed.back(), 0xA5);
      packed.pop_back();
      ASSERT_EQ(packed, want);
      std::vector<uint8_t> back(count + 1, 0x5A);
      ASSERT_TRUE(UnpackSymbols(packed, bits, count, static_cast<uint16_t>(levels), back.data(),
                                impl)
                      .ok());
      ASSERT_EQ(back.back(), 0x5A);
      back.pop_back();
      ASSERT_EQ(back, seg.symbols);
    }
  }
}

TEST(PackTest, CodecRoundTripsAndIsDeterministic) {
  std::mt19937_64 rng(0x51);
  for (int trial = 0; trial < 100; ++trial) {
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 200000),
                                   testing::kAllDistributions[trial % 5]);
    PackCodec codec;
    std::vector<uint8_t> a = {7}, b;  // Encode appends
    ASSERT_TRUE(codec.Encode(seg, &a).ok());
    ASSERT_TRUE(codec.Encode(seg, &b).ok());
    ASSERT_EQ(a[0], 7);
    ASSERT_EQ(std::vector<uint8_t>(a.begin() + 1, a.end()), b);
    std::vector<uint8_t> back(seg.symbols.size());
    ASSERT_TRUE(codec.Decode(b, seg.levels, back.size(), back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

TEST(PackTest, RejectsNonzeroPaddingBits) {
  std::mt19937_64 rng(0x7ad);
  int checked = 0;
  while (checked < 200) {
    const int levels = RandomLevels(rng);
    const int bits = pipeline::BitsForLevels(levels);
    const size_t count = std::uniform_int_distribution<size_t>(1, 5000)(rng);
    const unsigned used = static_cast<unsigned>((count * bits) % 8);
    if (used == 0) continue;
    const auto seg = RandomSegment(rng, levels, count, Distribution::kUniform);
    std::vector<uint8_t> packed(PackedSize(count, bits));
    PackSymbols(seg.symbols.data(), count, bits, packed.data());
    packed.back() |= static_cast<uint8_t>(
        1u << std::uniform_int_distribution<unsigned>(used, 7)(rng));
    std::vector<uint8_t> back(count);
    for (PackImpl impl : Impls()) {
      EXPECT_EQ(UnpackSymbols(packed, bits, count, static_cast<uint16_t>(levels), back.data(),
                              impl)
                    .code(),
                StatusCode::kCorruption);
    }
    ++checked;
  }
}

TEST(PackTest, RejectsSymbolsAtOrAboveLevels) {
  std::mt19937_64 rng(0xbad5);
  for (int trial = 0; trial < 200; ++trial) {
    int levels;
    do levels = std::uniform_int_distribution<int>(3, 255)(rng);
    while ((levels & (levels - 1)) == 0);
    const int bits = pipeline::BitsForLevels(levels);
    const size_t count = std::uniform_int_distribution<size_t>(1, 5000)(rng);
    auto symbols = RandomSegment(rng, levels, count, Distribution::kUniform).symbols;
    symbols[std::uniform_int_distribution<size_t>(0, count - 1)(rng)] = static_cast<uint8_t>(
        std::uniform_int_distribution<int>(levels, (1 << bits) - 1)(rng));
    std::vector<uint8_t> packed(PackedSize(count, bits));
    PackSymbols(symbols.data(), count, bits, packed.data());
    std::vector<uint8_t> back(count);
    for (PackImpl impl : Impls()) {
      EXPECT_EQ(UnpackSymbols(packed, bits, count, static_cast<uint16_t>(levels), back.data(),
                              impl)
                    .code(),
                StatusCode::kCorruption);
    }
    // The encoder refuses such a segment outright.
    pipeline::CodeSegment seg{static_cast<uint16_t>(levels), symbols};
    std::vector<uint8_t> out = {1, 2};
    EXPECT_EQ(PackCodec().Encode(seg, &out).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(out.size(), 2u);
  }
}

TEST(PackTest, RejectsWrongLengthAndBadShape) {
  std::mt19937_64 rng(0x1e7);
  for (int trial = 0; trial < 200; ++trial) {
    const int levels = RandomLevels(rng);
    const int bits = pipeline::BitsForLevels(levels);
    const size_t count = RandomCount(rng, 5000);
    std::vector<uint8_t> bytes(PackedSize(count, bits) + 1 + trial % 3, 0);
    std::vector<uint8_t> back(count + 1);
    PackCodec codec;
    EXPECT_FALSE(codec.Decode(bytes, static_cast<uint16_t>(levels), count, back.data()).ok());
    if (!bytes.empty() && PackedSize(count, bits) > 0) {
      EXPECT_FALSE(codec
                       .Decode(std::span<const uint8_t>(bytes.data(), PackedSize(count, bits) - 1),
                               static_cast<uint16_t>(levels), count, back.data())
                       .ok());
    }
  }
  uint8_t dummy = 0;
  EXPECT_EQ(PackCodec().Decode({}, 1, 0, &dummy).code(), StatusCode::kCorruption);
  EXPECT_EQ(PackCodec().Decode({}, 257, 0, &dummy).code(), StatusCode::kCorruption);
  pipeline::CodeSegment bad{1, {0, 0}};
  std::vector<uint8_t> out;
  EXPECT_EQ(PackCodec().Encode(bad, &out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::codecs
