// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/lz4_codec.h"
#include "codecs/pack.h"
#include "codecs/rans.h"
#include "codecs/zstd_codec.h"
#include "core/stages.h"

namespace kvserve::codecs {
namespace {

// The factory's codec must produce the same bytes as the class constructed
// directly with the profile's parameter, and decode them.
TEST(CodecFactoryTest, BuildsTheCodecTheProfileNamesWithItsParameters) {
  std::mt19937_64 rng(0xfac7);
  for (int trial = 0; trial < 80; ++trial) {
    Profile profile;
    std::unique_ptr<pipeline::Codec> direct;
    switch (trial % 4) {
      case 0:
        profile.set_codec(CodecType::kPack);
        direct = std::make_unique<PackCodec>();
        break;
      case 1: {
        profile.set_codec(CodecType::kRans);
        const int bits = std::uniform_int_distribution<int>(8, 15)(rng);
        if (trial % 8 != 1) {  // else: the default table_bits
          ASSERT_TRUE(profile.Set(ParamId::kTableBits, bits).ok());
        }
        direct = std::make_unique<RansCodec>(trial % 8 != 1 ? bits : kRansDefaultTableBits);
        break;
      }
      case 2: {
        profile.set_codec(CodecType::kZstd);
        const int level = std::uniform_int_distribution<int>(1, 19)(rng);
        ASSERT_TRUE(profile.Set(ParamId::kZstdLevel, level).ok());
        direct = std::make_unique<ZstdCodec>(level);
        break;
      }
      default: {
        profile.set_codec(CodecType::kLz4);
        const int accel = std::uniform_int_distribution<int>(1, 64)(rng);
        ASSERT_TRUE(profile.Set(ParamId::kLz4Accel, accel).ok());
        direct = std::make_unique<Lz4Codec>(accel);
        break;
      }
    }
    auto made = pipeline::CreateCodec(profile);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    const auto seg = testing::RandomSegment(rng, testing::RandomLevels(rng),
                                            testing::RandomCount(rng, 50000),
                                            testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> a, b;
    ASSERT_TRUE((*made)->Encode(seg, &a).ok());
    ASSERT_TRUE(direct->Encode(seg, &b).ok());
    ASSERT_EQ(a, b);
    std::vector<uint8_t> back(seg.symbols.size());
    ASSERT_TRUE((*made)->Decode(a, seg.levels, back.size(), back.data()).ok());
    ASSERT_EQ(back, seg.symbols);
  }
}

}  // namespace
}  // namespace kvserve::codecs
