// Serving with a Redis Cluster prefix pool while one of its masters is
// killed: the replica is promoted, and every request completes, from the
// pool (fetch) or by prefilling again (recompute), with exactly the tokens
// of a single-process run (lossless profile) -- none answered from wrong
// bytes. Skipped without redis-server / redis-cli.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "kvserve/pool.h"
#include "kvserve/serve.h"
#include "pool/redis_cluster_test_util.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

using servetest::Reference;
using servetest::SmallModel;
using transporttest::Kind;

class ServeClusterPoolTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ServeClusterPoolTest, MasterKilledUnderLoadEveryRequestCompletesCorrectly) {
  if (!pooltest::RedisCluster::Available()) GTEST_SKIP() << "redis-server / redis-cli not installed";
  pooltest::RedisCluster redis(/*persist=*/false, /*node_timeout_ms=*/1000);
  ASSERT_TRUE(redis.Start());
  auto pool = NewRedisClusterPool(redis.PoolOptions());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.pool = pool->get();
  o.pool_store_profiles = {"none"};
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(1601);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(servetest::RandomPrompt(rng, 40, 90));
  std::atomic<int> served{0};
  int hits = 0, hits_after = 0;
  std::thread killer([&] {
    while (served.load() < 8) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto masters = redis.Masters(redis.port(0));
    if (!masters.empty()) redis.Kill(masters.back());
  });
  for (int i = 0; i < 40; ++i) {
    ServeRequest r;
    r.id = 2000 + i;
    r.prompt = prompts[i % prompts.size()];
    r.max_new_tokens = 4;
    r.method = "none";
    r.use_pool = true;
    SCOPED_TRACE("request " + std::to_string(r.id));
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    EXPECT_EQ(response->tokens, Reference(SmallModel(), r)) << "answered from wrong KV";
    hits += response->timings.prefix_hit;
    if (i >= 30) hits_after += response->timings.prefix_hit;
    served.fetch_add(1);
  }
  killer.join();
  EXPECT_GT(hits, 0);
  EXPECT_GT(hits_after, 0) << "the pool never served again after the failover";
  RecordProperty("prefix_hits", hits);
}

INSTANTIATE_TEST_SUITE_P(Transports, ServeClusterPoolTest,
                         ::testing::Values(Kind::kTcp, Kind::kUcxTcp), transporttest::KindName);

}  // namespace
}  // namespace kvserve
