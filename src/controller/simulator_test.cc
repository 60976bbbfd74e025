// Copyright kvserve authors.
#include <gtest/gtest.h>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

std::string Root() {
  const std::string f = __FILE__;
  return f.substr(0, f.rfind("/src/"));
}

SimulationOptions DropDrift(double duration, uint64_t seed) {
  SimulationOptions o;
  o.seed = seed;
  o.trace = Trace::RandomWalk(25.0, 12.0, 50.0, 0.04, 1.0, duration, seed)
                .WithBandwidthDrop(duration / 3.0, duration * 7.0 / 12.0, 5.0)
                .WithCodecSlowdown(duration / 2.0, 1.5);
  o.workloads = {{"chat", 0.4, 24 * 1048576.0, 0.6, 0.25, 0.99},
                 {"retrieval", 0.3, 160 * 1048576.0, 0.5, 1.5, 0.97},
                 {"code", 0.3, 64 * 1048576.0, 0.5, 0.6, 0.98}};
  return o;
}

// The acceptance scenario, shortened: bandwidth drop plus a 1.5x
// codec slowdown. Simulated latencies are deterministic given the seed.
TEST(SimulatorTest, FullControllerNearOracleAndBeatsAblations) {
  Result<ProfileTable> table = ProfileTable::Load(Root() + "/configs/profile_table.example.json");
  ASSERT_TRUE(table.ok());
  for (uint64_t seed : {1u, 2u, 3u}) {
    Result<SimulationReport> r = Simulate(*table, DropDrift(240.0, seed));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const PolicyResult* full = r->Find("full");
    const PolicyResult* oracle = r->Find("oracle");
    ASSERT_NE(full, nullptr);
    EXPECT_LE(full->mean_seconds, oracle->mean_seconds * 1.05) << "seed " << seed;
    EXPECT_LT(full->mean_seconds, r->Find("no-bandit")->mean_seconds);
    EXPECT_LT(full->mean_seconds, r->Find("no-controller")->mean_seconds);
    EXPECT_EQ(full->floor_violations, 0);
    EXPECT_EQ(r->Find("no-bandit")->floor_violations, 0);
    EXPECT_EQ(oracle->floor_violations, 0);
    EXPECT_LE(oracle->mean_seconds, r->Find("raw")->mean_seconds);
    EXPECT_EQ(r->Find("raw")->slower_than_raw, 0);
    EXPECT_EQ(oracle->slower_than_raw, 0);
    // The "no request slower than raw beyond noise": same request,
    // same instant, same noise draw, by more than one sigma of the latency
    // noise (raw_tolerance).
    EXPECT_EQ(full->slower_than_raw, 0) << "seed " << seed;
    EXPECT_EQ(full->slo_violations, 0) << "seed " << seed;
  }
}

TEST(SimulatorTest, DeterministicAndRendered) {
  Result<ProfileTable> table = ProfileTable::Load(Root() + "/configs/profile_table.example.json");
  ASSERT_TRUE(table.ok());
  Result<SimulationReport> a = Simulate(*table, DropDrift(30.0, 9));
  Result<SimulationReport> b = Simulate(*table, DropDrift(30.0, 9));
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->policies.size(); ++i) {
    EXPECT_EQ(a->policies[i].latency_seconds, b->policies[i].latency_seconds);
  }
  SimulationOptions bad = DropDrift(30.0, 9);
  bad.workloads[0].name = "unknown";
  EXPECT_EQ(Simulate(*table, bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
