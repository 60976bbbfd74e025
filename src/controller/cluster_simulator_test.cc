// The N x M serving simulation: deterministic for a seed; every policy
// serves every request; the floor-respecting policies never serve below a
// floor; adaptive compression beats raw where links are slow and stays
// within a few percent of raw where they are far faster than any codec;
// adaptive picks raw on fast links and compresses on slow ones.
#include <gtest/gtest.h>

#include "controller/test_util.h"
#include "kvserve/cluster_sim.h"

namespace kvserve {
namespace {

ProfileTable Table() {
  std::vector<ProfileCost> rows;
  auto row = [&](const char* spec, double cr, double gbs, double q) {
    ProfileCost p;
    p.spec = spec;
    p.compression_ratio = cr;
    p.encode_bytes_per_second = gbs * 1e9;
    p.decode_bytes_per_second = gbs * 1.5e9;
    p.overhead_seconds = 2e-4;
    p.quality = {{"w0", q}};
    rows.push_back(p);
  };
  row("fast-4x", 4, 8, 0.995);
  row("small-10x", 10, 2, 0.98);
  return ProfileTable::FromRowsAndWorkloads(std::move(rows), {"w0"}).value();
}

ClusterSimOptions Small(double min_gbps, double max_gbps, uint64_t seed) {
  ClusterSimOptions o;
  o.prefill_workers = 6;
  o.decode_workers = 5;
  o.duration_seconds = 30;
  o.link_gbps_min = min_gbps;
  o.link_gbps_max = max_gbps;
  o.seed = seed;
  SimulatedWorkload w;
  w.name = "w0";
  w.kv_bytes_median = 64e6;
  w.kv_bytes_sigma = 0.4;
  w.slo_seconds = 1.0;
  w.quality_min = 0.97;
  o.workloads = {w};
  return o;
}

TEST(ClusterSimulatorTest, DeterministicAndEveryPolicyServesEveryRequest) {
  const ProfileTable table = Table();
  auto a = SimulateCluster(table, Small(1, 20, 3));
  auto b = SimulateCluster(table, Small(1, 20, 3));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_GT(a->requests, 100);
  ASSERT_EQ(a->policies.size(), b->policies.size());
  for (size_t i = 0; i < a->policies.size(); ++i) {
    EXPECT_EQ(a->policies[i].requests, a->requests) << a->policies[i].name;
    EXPECT_EQ(a->policies[i].jct_mean_seconds, b->policies[i].jct_mean_seconds);
    EXPECT_GE(a->policies[i].jct_p99_seconds, a->policies[i].jct_p50_seconds);
  }
  for (const char* name : {"adaptive", "raw", "static-best"})
    EXPECT_EQ(a->Find(name)->floor_violations, 0) << name;
  auto other = SimulateCluster(table, Small(1, 20, 4));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->Find("adaptive")->jct_mean_seconds, a->Find("adaptive")->jct_mean_seconds);
}

TEST(ClusterSimulatorTest, AdaptiveCompressesOnSlowLinksAndSendsRawOnFastOnes) {
  const ProfileTable table = Table();
  for (uint64_t seed : {11, 12, 13}) {
    auto slow = SimulateCluster(table, Small(0.5, 4, seed));
    ASSERT_TRUE(slow.ok());
    EXPECT_LT(slow->Find("adaptive")->jct_mean_seconds, 0.8 * slow->Find("raw")->jct_mean_seconds);
    EXPECT_LT(slow->Find("adaptive")->raw_link_share, 0.2);
    // 400-800 Gbps: far beyond every codec's benefit threshold.
    auto fast = SimulateCluster(table, Small(400, 800, seed));
    ASSERT_TRUE(fast.ok());
    EXPECT_LT(fast->Find("adaptive")->jct_mean_seconds, 1.05 * fast->Find("raw")->jct_mean_seconds);
    EXPECT_GT(fast->Find("adaptive")->raw_link_share, 0.8);
  }
}

TEST(ClusterSimulatorTest, BadOptionsAreRefused) {
  const ProfileTable table = Table();
  ClusterSimOptions o = Small(1, 10, 1);
  o.prefill_workers = 0;
  EXPECT_EQ(SimulateCluster(table, o).status().code(), StatusCode::kInvalidArgument);
  o = Small(1, 10, 1);
  o.workloads[0].name = "nope";
  EXPECT_EQ(SimulateCluster(table, o).status().code(), StatusCode::kInvalidArgument);
  o = Small(1, 10, 1);
  o.workloads.clear();
  EXPECT_EQ(SimulateCluster(table, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
