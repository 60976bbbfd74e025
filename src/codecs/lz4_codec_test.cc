// Copyright kvserve authors. lz4-specific checks; the shared codec
// properties are in codec_properties_test.cc.
#include "codecs/lz4_codec.h"

#include <gtest/gtest.h>
#include <lz4.h>

#include <random>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

TEST(Lz4CodecTest, PayloadIsOneBlockOfThePackedBytes) {
  std::mt19937_64 rng(0x124);
  for (int trial = 0; trial < 40; ++trial) {
    const int levels = testing::RandomLevels(rng);
    const auto seg = testing::RandomSegment(rng, levels, testing::RandomCount(rng, 100000),
                                            testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> bytes, packed;
    ASSERT_TRUE(Lz4Codec(1 + trial).Encode(seg, &bytes).ok());
    ASSERT_TRUE(PackCodec().Encode(seg, &packed).ok());
    std::vector<uint8_t> plain(packed.size() + 16);
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(bytes.data()),
                                        reinterpret_cast<char*>(plain.data()),
                                        static_cast<int>(bytes.size()),
                                        static_cast<int>(plain.size()));
    ASSERT_EQ(got, static_cast<int>(packed.size()));
    plain.resize(packed.size());
    ASSERT_EQ(plain, packed);
  }
}

TEST(Lz4CodecTest, HighlyRepetitiveSegmentsStillDecode) {
  // Single-symbol segments compress near LZ4's maximum ratio; the decoder's
  // expansion bound must not reject them.
  std::mt19937_64 rng(0x125);
  for (int trial = 0; trial < 10; ++trial) {
    const size_t count = std::uniform_int_distribution<size_t>(100000, 3000000)(rng);
    const auto seg =
        testing::RandomSegment(rng, 256, count, testing::Distribution::kSingle);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(Lz4Codec(1 + trial * 7).Encode(seg, &bytes).ok());
    std::vector<uint8_t> back(count);
    ASSERT_TRUE(Lz4Codec().Decode(bytes, seg.levels, count, back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

TEST(Lz4CodecTest, RejectsBlocksOfTheWrongSize) {
  std::mt19937_64 rng(0x126);
  for (int trial = 0; trial < 40; ++trial) {
    const int levels = testing::RandomLevels(rng);
    const size_t count = std::uniform_int_distribution<size_t>(2, 50000)(rng);
    const auto seg = testing::RandomSegment(rng, levels, count, testing::Distribution::kGeometric);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(Lz4Codec().Encode(seg, &bytes).ok());
    std::vector<uint8_t> back(count + 64);
    const size_t other = trial % 2 ? count + 64 : count / 2;
    if (PackedSize(other, pipeline::BitsForLevels(levels)) !=
        PackedSize(count, pipeline::BitsForLevels(levels))) {
      EXPECT_EQ(Lz4Codec().Decode(bytes, seg.levels, other, back.data()).code(),
                StatusCode::kCorruption);
    }
  }
}

}  // namespace
}  // namespace kvserve::codecs
