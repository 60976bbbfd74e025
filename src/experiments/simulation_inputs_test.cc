// Copyright kvserve authors. The simulation inputs: --mix items become
// workloads in order with their units converted, bad items are named, and
// the built-in scenarios have the shape their contract states.
#include "experiments/simulation_inputs.h"

#include <gtest/gtest.h>

namespace kvserve::lab {
namespace {

TEST(SimulationInputsTest, MixParsesInOrderWithUnits) {
  auto mix = ParseMix("a:0.5:2:0.3:250:0.99;;b:1:0.5:0.1:1000:0.9");
  ASSERT_TRUE(mix.ok()) << mix.status().ToString();
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].name, "a");
  EXPECT_DOUBLE_EQ((*mix)[0].kv_bytes_median, 2 * 1048576.0);
  EXPECT_DOUBLE_EQ((*mix)[0].slo_seconds, 0.25);
  EXPECT_DOUBLE_EQ((*mix)[1].quality_min, 0.9);
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 1);
  auto defaults = ParseMix(kDefaultMix);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->size(), 3u);
  for (const char* bad : {"a:1:2:3:4", "a:1:x:3:4:5"}) {
    auto r = ParseMix(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().ToString().find(bad), std::string::npos) << r.status().ToString();
  }
}

TEST(SimulationInputsTest, ScenariosFollowTheirContract) {
  for (uint64_t seed : {1u, 2u}) {
    auto drop = MakeScenario("drop-drift", 600, seed);
    ASSERT_TRUE(drop.ok()) << drop.status().ToString();
    EXPECT_NEAR(drop->duration_seconds(), 600, 1);
    auto steps = MakeScenario("steps", 100, seed);
    ASSERT_TRUE(steps.ok());
    auto walk = MakeScenario("random-walk", 100, seed);
    ASSERT_TRUE(walk.ok());
  }
  // The drop: 5 Gbps from 200 to 350 s; the codecs 1.5x slower from 300 s.
  auto drop = MakeScenario("drop-drift", 600, 3);
  ASSERT_TRUE(drop.ok());
  EXPECT_NEAR(BytesPerSecondToGbps(drop->BandwidthAt(250)), 5.0, 1e-9);
  EXPECT_GT(BytesPerSecondToGbps(drop->BandwidthAt(100)), 5.0);
  EXPECT_GT(BytesPerSecondToGbps(drop->BandwidthAt(400)), 5.0);
  EXPECT_DOUBLE_EQ(drop->SlowdownAt(100), 1.0);
  EXPECT_DOUBLE_EQ(drop->SlowdownAt(500), 1.5);
  auto steps = MakeScenario("steps", 100, 1);
  ASSERT_TRUE(steps.ok());
  EXPECT_NEAR(BytesPerSecondToGbps(steps->BandwidthAt(5)), 40.0, 1e-9);
  EXPECT_NEAR(BytesPerSecondToGbps(steps->BandwidthAt(15)), 10.0, 1e-9);
  EXPECT_EQ(MakeScenario("flat", 10, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::lab
