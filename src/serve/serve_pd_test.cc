// Disaggregated serving over real TCP: a request served by a prefill worker
// and a decode worker with the lossless profile generates exactly the
// tokens of a single-process prefill + decode (greedy and seeded sampling);
// every request records its stage timings; adaptive requests never use a
// profile below their quality floor (per the profile table); prefix hits
// from the pool generate what recomputing does.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kvserve/pool.h"
#include "kvserve/serve.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

class ServePdTest : public servetest::OverTransports {};
class ServePoolTest : public servetest::OverTransports {};

using servetest::Reference;
using servetest::SmallModel;

TEST_P(ServePdTest, LosslessOverTcpMatchesOneProcess) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(101);
  std::set<int32_t> distinct;
  for (int i = 0; i < 6; ++i) {
    ServeRequest r;
    r.id = 1000 + i;
    r.prompt = servetest::RandomPrompt(rng, 8, 160);
    r.max_new_tokens = 12;
    r.method = "none";
    r.sampling.temperature = (i % 2 == 0) ? 0.0f : 0.8f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = rng();
    SCOPED_TRACE("request " + std::to_string(r.id) + ", " + std::to_string(r.prompt.size()) + " tokens");
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    const auto expected = Reference(SmallModel(), r);
    EXPECT_EQ(response->tokens, expected);
    distinct.insert(expected.begin(), expected.end());
    const RequestTimings& t = response->timings;
    EXPECT_EQ(response->id, r.id);
    EXPECT_EQ(t.profile, "none");
    EXPECT_EQ(t.attempts, 1);
    EXPECT_GT(t.prefill_seconds, 0);
    EXPECT_GT(t.kv_seconds, 0);
    EXPECT_GT(t.generation_seconds, 0);
    EXPECT_GE(t.jct_seconds, t.kv_seconds);
    EXPECT_EQ(t.kv_bytes, uint64_t{4} * 4 * 2 * 4 * 16 * r.prompt.size());
    EXPECT_GT(t.frame_bytes, t.kv_bytes);  // raw: the KV plus headers
  }
  EXPECT_GT(distinct.size(), 1u);  // not a degenerate model
  EXPECT_EQ(cluster->decode->completed(), 6);
}

TEST_P(ServePdTest, AdaptiveRequestsMeetTheirQualityFloor) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  const ProfileTable table = servetest::TestTable();
  std::mt19937_64 rng(202);
  std::uniform_real_distribution<double> floor(0.9, 1.0);
  std::set<std::string> used;
  for (int i = 0; i < 8; ++i) {
    ServeRequest r;
    r.id = i;
    r.prompt = servetest::RandomPrompt(rng, 40, 200);
    r.max_new_tokens = 4;
    r.workload = (i % 2) ? "chat" : "code";
    r.quality_min = floor(rng);
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    EXPECT_EQ(response->tokens.size(), 4u);
    const std::string& spec = response->timings.profile;
    used.insert(spec);
    double quality = 1.0;
    for (int p = 1; p < table.size(); ++p)
      if (table.profile(p).spec == spec) quality = table.Quality(p, *table.WorkloadIndex(r.workload));
    EXPECT_GE(quality, r.quality_min) << spec << " for floor " << r.quality_min;
  }
  EXPECT_FALSE(used.empty());
}

TEST_P(ServePdTest, LossyProfilesServeEveryRequest) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(303);
  for (const char* method : {"kivi-2", "cachegen", "kivi-4"}) {
    ServeRequest r;
    r.id = rng() % 100000;
    r.prompt = servetest::RandomPrompt(rng, 400, 600);  // beyond the 128 raw residual tokens
    r.max_new_tokens = 5;
    r.method = method;
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << method << ": " << response->status.ToString();
    EXPECT_EQ(response->tokens.size(), 5u);
    EXPECT_LT(response->timings.frame_bytes, response->timings.kv_bytes) << method;
    EXPECT_GT(response->timings.encode_seconds, 0) << method;
    EXPECT_GT(response->timings.decode_kv_seconds, 0) << method;
  }
}

TEST_P(ServePdTest, BadRequestsFailClearly) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  ServeRequest r;
  r.id = 7;
  r.prompt = {1, 2, 100000};
  auto response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(response->status.message().find("vocabulary"), std::string::npos);
  r.prompt = {1, 2, 3};
  r.workload = "no-such-workload";
  response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status.code(), StatusCode::kNotFound) << response->status.ToString();
  r.method = "no-such-profile";
  response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_FALSE(response->status.ok());
}

TEST_P(ServePoolTest, PrefixHitsGenerateWhatRecomputingDoes) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.pool = pool.get();
  o.pool_store_profiles = {"none", "kivi-4"};
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(404);
  for (int i = 0; i < 3; ++i) {
    ServeRequest r;
    r.id = 50 + i;
    r.prompt = servetest::RandomPrompt(rng, 20, 120);
    r.max_new_tokens = 6;
    r.method = "none";
    r.use_pool = true;
    auto answers = servetest::SubmitMissThenHit(*cluster->client, r);
    ASSERT_TRUE(answers);
    const ServeResponse* first = &answers->miss;
    const ServeResponse* second = &answers->hit;
    EXPECT_EQ(second->timings.profile, "none");
    EXPECT_EQ(second->timings.prefill_seconds, 0);
    EXPECT_EQ(second->tokens.size(), first->tokens.size());
    EXPECT_EQ(second->tokens, first->tokens);
    const auto chunks = PrefixChunkHashes(
        std::span<const int32_t>(r.prompt).first(r.prompt.size() - 1), o.pool_chunk_tokens);
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(second->timings.prefix_chunks, static_cast<int>(chunks.size()));
    for (uint64_t hash : chunks) {
      auto entries = pool->Lookup("model", hash);
      ASSERT_TRUE(entries.ok());
      EXPECT_EQ(entries->size(), 2u);  // stored under both profiles
    }
  }
}

KVSERVE_SERVE_OVER_TRANSPORTS(ServePdTest);
KVSERVE_SERVE_OVER_TRANSPORTS(ServePoolTest);

}  // namespace
}  // namespace kvserve
