// Copyright kvserve authors. zstd-specific checks; the shared codec
// properties are in codec_properties_test.cc.
#include "codecs/zstd_codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <random>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

TEST(ZstdCodecTest, PayloadIsOneFrameOfThePackedBytes) {
  std::mt19937_64 rng(0x25d);
  for (int trial = 0; trial < 40; ++trial) {
    const int levels = testing::RandomLevels(rng);
    const auto seg = testing::RandomSegment(rng, levels, testing::RandomCount(rng, 100000),
                                            testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> bytes, packed;
    ASSERT_TRUE(ZstdCodec(1 + trial % 19).Encode(seg, &bytes).ok());
    ASSERT_TRUE(PackCodec().Encode(seg, &packed).ok());
    ASSERT_EQ(ZSTD_getFrameContentSize(bytes.data(), bytes.size()), packed.size());
    std::vector<uint8_t> plain(packed.size() + 1);
    ASSERT_EQ(ZSTD_decompress(plain.data(), plain.size(), bytes.data(), bytes.size()),
              packed.size());
    plain.pop_back();
    ASSERT_EQ(plain, packed);
  }
}

TEST(ZstdCodecTest, RejectsFramesOfTheWrongSizeOrShape) {
  std::mt19937_64 rng(0x25e);
  for (int trial = 0; trial < 40; ++trial) {
    const int levels = testing::RandomLevels(rng);
    const size_t count = std::uniform_int_distribution<size_t>(1, 50000)(rng);
    const auto seg = testing::RandomSegment(rng, levels, count, testing::Distribution::kGaussian);
    std::vector<uint8_t> packed;
    ASSERT_TRUE(PackCodec().Encode(seg, &packed).ok());
    // A valid frame of one byte more / less than the packed size.
    for (int delta : {-1, 1}) {
      std::vector<uint8_t> content = packed;
      if (delta < 0) content.pop_back(); else content.push_back(0);
      std::vector<uint8_t> frame(ZSTD_compressBound(content.size()));
      frame.resize(ZSTD_compress(frame.data(), frame.size(), content.data(), content.size(), 3));
      std::vector<uint8_t> back(count);
      EXPECT_EQ(ZstdCodec().Decode(frame, seg.levels, count, back.data()).code(),
                StatusCode::kCorruption);
    }
    // Two concatenated frames.
    std::vector<uint8_t> one;
    ASSERT_TRUE(ZstdCodec().Encode(seg, &one).ok());
    std::vector<uint8_t> two = one;
    two.insert(two.end(), one.begin(), one.end());
    std::vector<uint8_t> back(count);
    EXPECT_EQ(ZstdCodec().Decode(two, seg.levels, count, back.data()).code(),
              StatusCode::kCorruption);
    // Huge declared size is rejected before allocation.
    EXPECT_EQ(ZstdCodec().Decode(one, seg.levels, size_t{1} << 39, back.data()).code(),
              StatusCode::kCorruption);
  }
}

}  // namespace
}  // namespace kvserve::codecs
