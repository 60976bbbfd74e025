// A prefix hit's chunks move from the pool record by record, relayed by the
// prefill worker or fetched by a decode worker that has the pool itself
// (POOL_FETCH): a chunk the pool no longer has ends the hit with the chunks
// before it (or, the first one, makes the request recompute); a stored
// chunk the decode worker refuses makes the request recompute, with the
// whole prompt; every answer is what a single process generates.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "kvserve/pool.h"
#include "pool/forwarding_pool_test_util.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

using servetest::Reference;
using servetest::SmallModel;

// The memory pool, except that Get of the listed prefix hashes finds
// nothing (evicted since the worker's lookup) or gives the stored frame
// with its last byte flipped (a record that fails its checksum at the
// decode worker).
class LossyPool final : public pooltest::ForwardingPool {
 public:
  using ForwardingPool::ForwardingPool;
  std::set<uint64_t> evicted, garbled;
  bool frames = true;  // false: lookups only (Get finds nothing)

  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    if (!frames || evicted.count(key.prefix_hash)) return Status::NotFound("evicted");
    KVSERVE_RETURN_IF_ERROR(ForwardingPool::Get(key, frame));
    if (garbled.count(key.prefix_hash) && !frame->empty()) frame->back() ^= 0x5A;
    return Status::Ok();
  }
};

std::vector<uint64_t> ChunkHashes(const ServeRequest& r, int chunk_tokens) {
  return PrefixChunkHashes(std::span<const int32_t>(r.prompt).first(r.prompt.size() - 1),
                           chunk_tokens);
}

// `direct`: the decode worker has the pool too and fetches the chunks.
struct RelayCluster {
  std::unique_ptr<KvPool> base = NewMemoryPool();
  LossyPool pool{base.get()};
  servetest::ClusterOptions options;
  std::unique_ptr<servetest::Cluster> cluster;
  explicit RelayCluster(bool direct) {
    options.pool = &pool;
    options.decode_pool = direct ? &pool : nullptr;
    options.pool_store_profiles = {"none"};
    options.max_attempts = 2;
    cluster = servetest::StartCluster(options);
  }
  // A stored prompt of `chunks` full prefix chunks and a few more tokens.
  ServeRequest Stored(uint64_t id, int chunks, std::mt19937_64& rng) {
    const int c = options.pool_chunk_tokens;
    ServeRequest r =
        servetest::PoolRequest(id, servetest::RandomPrompt(rng, chunks * c + 1, chunks * c + 9), rng);
    auto first = cluster->client->Submit(r);
    EXPECT_TRUE(first.ok() && first->status.ok()) << first->status.ToString();
    return r;
  }
};

class ServePoolRelayTest : public ::testing::TestWithParam<bool> {};

TEST_P(ServePoolRelayTest, AChunkGoneSinceTheLookupEndsTheHitThere) {
  RelayCluster c(GetParam());
  ASSERT_TRUE(c.cluster);
  std::mt19937_64 rng(32);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    ServeRequest r = c.Stored(300 + i, 3 + static_cast<int>(rng() % 3), rng);
    const std::vector<uint64_t> hashes = ChunkHashes(r, c.options.pool_chunk_tokens);
    const size_t lost = i == 0 ? 0 : 1 + rng() % (hashes.size() - 1);
    c.pool.evicted = {hashes[lost]};
    auto hit = c.cluster->client->Submit(r);
    ASSERT_TRUE(hit.ok() && hit->status.ok()) << hit->status.ToString();
    EXPECT_EQ(hit->timings.prefix_hit, lost > 0);
    EXPECT_EQ(hit->timings.recomputed, lost == 0);
    EXPECT_EQ(hit->timings.prefix_chunks, static_cast<int>(lost));
    EXPECT_EQ(hit->tokens, Reference(SmallModel(), r));
    c.pool.evicted.clear();
  }
}

TEST_P(ServePoolRelayTest, AChunkTheDecodeWorkerRefusesMakesTheRequestRecompute) {
  RelayCluster c(GetParam());
  ASSERT_TRUE(c.cluster);
  std::mt19937_64 rng(33);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    ServeRequest r = c.Stored(400 + i, 3 + static_cast<int>(rng() % 2), rng);
    const std::vector<uint64_t> hashes = ChunkHashes(r, c.options.pool_chunk_tokens);
    c.pool.garbled = {hashes[rng() % hashes.size()]};
    auto again = c.cluster->client->Submit(r);
    ASSERT_TRUE(again.ok() && again->status.ok()) << again->status.ToString();
    EXPECT_FALSE(again->timings.prefix_hit);
    EXPECT_TRUE(again->timings.recomputed);
    EXPECT_NE(again->timings.hit_error, "") << "the hit's failure is reported";
    EXPECT_EQ(again->tokens, Reference(SmallModel(), r));
    c.pool.garbled.clear();
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ServePoolRelayTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "DecodeFetches" : "PrefillRelays"; });

// The decode worker's pool holds the frames, the prefill worker's pool only
// answers lookups: every hit's chunks came the decode worker's way.
TEST(ServePoolDirectTest, TheDecodeWorkerFetchesTheChunksItself) {
  std::unique_ptr<KvPool> base = NewMemoryPool();
  LossyPool lookups(base.get());
  servetest::ClusterOptions options;
  options.pool = &lookups;
  options.decode_pool = base.get();
  options.pool_store_profiles = {"none"};
  auto cluster = servetest::StartCluster(options);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(34);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    const int c = options.pool_chunk_tokens;
    const int chunks = 2 + static_cast<int>(rng() % 3);
    ServeRequest r = servetest::PoolRequest(600 + i, servetest::RandomPrompt(rng, chunks * c + 1, chunks * c + 9), rng);
    auto first = cluster->client->Submit(r);
    ASSERT_TRUE(first.ok() && first->status.ok()) << first->status.ToString();
    lookups.frames = false;
    auto hit = cluster->client->Submit(r);
    lookups.frames = true;
    ASSERT_TRUE(hit.ok() && hit->status.ok()) << hit->status.ToString();
    EXPECT_TRUE(hit->timings.prefix_hit);
    EXPECT_EQ(hit->timings.prefix_chunks, chunks);
    EXPECT_GT(hit->timings.pool_fetch_seconds, 0);
    EXPECT_EQ(hit->tokens, Reference(SmallModel(), r));
  }
}

}  // namespace
}  // namespace kvserve
