// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kvserve/profiler.h"

namespace kvserve {
namespace {

const std::string kDefaultSpace = std::string(KVSERVE_SOURCE_DIR) + "/configs/strategy_space.json";

TEST(StrategySpace, DefaultSpaceIsLargeAndEveryConfigRoundTrips) {
  auto space = StrategySpace::Load(kDefaultSpace);
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  EXPECT_GE(space->size(), 4000);
  for (const Profile& p : space->profiles()) {
    ASSERT_TRUE(p.Validate().ok()) << p.ToString();
    auto parsed = Profile::Parse(p.ToString());
    ASSERT_TRUE(parsed.ok()) << p.ToString();
    EXPECT_TRUE(*parsed == p) << p.ToString();
  }
}

TEST(StrategySpace, DefaultSpaceCoversBaselinesAndRecompositions) {
  auto space = StrategySpace::Load(kDefaultSpace);
  ASSERT_TRUE(space.ok());
  for (const char* preset : {"kivi-2", "kivi-4", "cachegen", "duo", "mixhq", "kvserve-h2r",
                             "kvserve-hmix", "kvserve-a4z"}) {
    auto p = Profile::Parse(preset);
    ASSERT_TRUE(p.ok());
    EXPECT_GE(space->IndexOf(*p), 0) << preset;
  }
  // Cross-method recompositions: every transform with every lossy quantizer.
  std::set<std::pair<int, int>> pairs;
  for (const Profile& p : space->profiles()) {
    pairs.insert({static_cast<int>(p.transform()), static_cast<int>(p.quantizer())});
  }
  EXPECT_EQ(pairs.size(), 4u * 6u + 1u);  // raw only with identity
}

// A few hundred bytes of JSON can describe billions of candidates (ranges
// of up to 4097 values multiply): such a space is refused before any
// profile is built, and the default space is well inside the limit.
TEST(StrategySpace, HugeProductsAreRefusedBeforeEnumerating) {
  const std::string huge =
      R"({"transforms":{"identity":{}},"codecs":{"pack":{}},)"
      R"("quantizers":{"uniform":{"residual":{"min":0,"max":4096},"k":{"min":1,"max":8},)"
      R"("v":{"min":1,"max":8}}}})";
  ASSERT_LT(huge.size(), 200u);
  auto space = StrategySpace::FromJson(huge);
  EXPECT_EQ(space.status().code(), StatusCode::kInvalidArgument) << "4097 x 8 x 8 candidates";
  EXPECT_NE(space.status().message().find("candidate"), std::string::npos)
      << space.status().ToString();
  auto fine = StrategySpace::FromJson(
      R"({"transforms":{"identity":{}},"codecs":{"pack":{}},)"
      R"("quantizers":{"uniform":{"residual":{"min":0,"max":99},"k":[2,4]}}})");
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(fine->size(), 200);
  EXPECT_LT(StrategySpace::Load(kDefaultSpace)->size(), static_cast<int>(kMaxStrategySpaceCandidates));
}

TEST(StrategySpace, ProfilesAreDistinct) {
  auto space = StrategySpace::Load(kDefaultSpace);
  ASSERT_TRUE(space.ok());
  std::set<std::string> specs;
  for (const Profile& p : space->profiles()) specs.insert(p.ToString());
  EXPECT_EQ(specs.size(), space->profiles().size());
}

TEST(StrategySpace, RangesExpandWithinBounds) {
  auto space = StrategySpace::FromJson(R"({"transforms":{"identity":{}},"codecs":{"pack":{}},
      "quantizers":{"uniform":{"k":{"min":2,"max":8,"step":3},"group":{"min":16,"max":64,"pow2":true}}}})");
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  EXPECT_EQ(space->size(), 3 * 3);  // k in {2,5,8}, group in {16,32,64}
}

TEST(StrategySpace, RejectsOutOfBoundsUnknownAndMisplacedParameters) {
  const char* bad[] = {
      R"({"transforms":{"identity":{}},"codecs":{"pack":{}},"quantizers":{"kivi":{"k":[9]}}})",
      R"({"transforms":{"identity":{}},"codecs":{"pack":{}},"quantizers":{"kivi":{"bogus":[1]}}})",
      R"({"transforms":{"identity":{}},"codecs":{"pack":{}},"quantizers":{"kivi":{"first":[2]}}})",
      R"({"transforms":{"identity":{"seed":[1]}},"codecs":{"pack":{}},"quantizers":{"kivi":{}}})",
      R"({"transforms":{"warp":{}},"codecs":{"pack":{}},"quantizers":{"kivi":{}}})",
      R"({"transforms":{"identity":{}},"codecs":{"rans":{"table":[99]}},"quantizers":{"kivi":{}}})",
  };
  for (const char* json : bad) {
    auto space = StrategySpace::FromJson(json);
    EXPECT_FALSE(space.ok()) << json;
    if (!space.ok()) EXPECT_EQ(space.status().code(), StatusCode::kInvalidArgument) << json;
  }
}

TEST(StrategySpace, InvalidCombinationsAreDroppedNotErrors) {
  // raw needs the identity transform: hadamard+raw is rejected, counted.
  auto space = StrategySpace::FromJson(
      R"({"transforms":{"identity":{},"hadamard":{}},"codecs":{"pack":{}},"quantizers":{"raw":{}}})");
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(space->size(), 1);
  EXPECT_EQ(space->rejected(), 1);
}

}  // namespace
}  // namespace kvserve
