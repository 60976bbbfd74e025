// Copyright kvserve authors. The Profile -> quantizer mapping.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvserve/profile.h"
#include "core/stages.h"

namespace kvserve::pipeline {
namespace {

TEST(QuantizerFactoryTest, EveryPresetBuildsAndRoundTripsState) {
  const KvShape shape{4, 2, 300, 64};
  HeadScores scores{4, 2, {0.1f, 0.9f, 0.5f, 0.5f, 0.2f, 0.7f, 0.3f, 0.0f}};
  for (const Preset& preset : Presets()) {
    auto profile = Profile::Parse(preset.spec);
    ASSERT_TRUE(profile.ok()) << preset.name;
    auto enc = CreateQuantizerForEncode(*profile, shape, &scores);
    ASSERT_TRUE(enc.ok()) << preset.name << ": " << enc.status().ToString();
    std::vector<uint8_t> state;
    ByteWriter w(&state);
    (*enc)->SerializeState(w);
    auto dec = CreateQuantizerForDecode(*profile, shape, state);
    ASSERT_TRUE(dec.ok()) << preset.name << ": " << dec.status().ToString();
    EXPECT_EQ((*enc)->CodedTokens(shape.tokens), (*dec)->CodedTokens(shape.tokens));
  }
}

TEST(QuantizerFactoryTest, KiviProfileKeepsResidualRaw) {
  auto profile = Profile::Parse("identity+kivi(k=2,v=2,group=32,residual=128)+pack");
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto q = CreateQuantizerForEncode(*profile, KvShape{1, 1, 1000, 64}, nullptr);
  ASSERT_TRUE(q.ok());
  std::mt19937_64 rng(21);
  for (int i = 0; i < 200; ++i) {
    const int total = std::uniform_int_distribution<int>(0, 5000)(rng);
    const int coded = (*q)->CodedTokens(total);
    EXPECT_EQ(coded % 32, 0);
    EXPECT_GE(total - coded, std::min(total, 128));
    EXPECT_LT(total - coded, 128 + 32);
  }
}

TEST(QuantizerFactoryTest, MixHQWithoutScoresNamesTheFlag) {
  auto profile = Profile::Parse("identity+mixhq+pack");
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto q = CreateQuantizerForEncode(*profile, KvShape{2, 2, 100, 64}, nullptr);
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("head-scores"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::pipeline
