// The Redis Cluster backend against a real cluster (3 masters + 3 replicas
// started by scripts/start_redis_cluster.sh on free loopback ports): keys map
// to Redis' own slots; a random sequence of operations (frames split into
// pieces included) gives exactly the single-node Redis backend's results;
// an entry's keys share a slot while entries spread over the masters;
// pipelined GetMany equals Get; with a master killed mid-load its replica is
// promoted and every request completes, none answered with wrong bytes;
// with persistence the contents survive a restart of the whole cluster.
// Skipped when redis-server / redis-cli are not installed.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "kvserve/pool.h"
#include "pool/redis_cluster_slots.h"
#include "pool/redis_cluster_test_util.h"

namespace kvserve {
namespace {

using pooltest::RedisCli;
using pooltest::RedisCluster;

std::vector<uint8_t> ValueFor(const PoolKey& key, size_t max_bytes = 20000) {
  std::mt19937_64 rng(key.prefix_hash * 31 + key.profile.size() + key.model_id.size());
  std::vector<uint8_t> v(1 + rng() % max_bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  v[0] = 0;  // binary-safe
  return v;
}

TEST(RedisClusterSlotsTest, SlotsAreRedisClusterSlots) {
  // The reference values of the cluster specification.
  EXPECT_EQ(pool::Crc16Xmodem("123456789"), 0x31C3);
  EXPECT_EQ(pool::KeySlot("foo"), 12182);
  EXPECT_EQ(pool::KeySlot("bar"), 5061);
  EXPECT_EQ(pool::KeySlot("{user1000}.following"), pool::KeySlot("{user1000}.followers"));
  EXPECT_EQ(pool::KeySlot("{user1000}.following"), pool::KeySlot("user1000"));
  EXPECT_EQ(pool::KeySlot("foo{}{bar}"), pool::Crc16Xmodem("foo{}{bar}") & 16383);
  EXPECT_EQ(pool::KeySlot("foo{{bar}}zap"), pool::KeySlot("{bar"));
  EXPECT_EQ(pool::KeySlot("foo{bar}{zap}"), pool::KeySlot("bar"));
  if (!RedisCluster::Available()) GTEST_SKIP() << "redis-server not installed";
  // And what a real node computes (CLUSTER KEYSLOT), for random keys.
  RedisCluster cluster;
  ASSERT_TRUE(cluster.Start());
  redisContext* c = redisConnect("127.0.0.1", cluster.port(0));
  ASSERT_TRUE(c != nullptr && c->err == 0);
  std::mt19937_64 rng(71);
  for (int i = 0; i < 200; ++i) {
    std::string key;
    for (int n = 1 + static_cast<int>(rng() % 20); n > 0; --n) key += "ab{}xyz019:\x01"[rng() % 12];
    auto* r = static_cast<redisReply*>(redisCommand(c, "CLUSTER KEYSLOT %b", key.data(), key.size()));
    ASSERT_TRUE(r != nullptr && r->type == REDIS_REPLY_INTEGER);
    EXPECT_EQ(pool::KeySlot(key), r->integer) << key;
    freeReplyObject(r);
  }
  redisFree(c);
}

class RedisClusterPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisCluster::Available()) GTEST_SKIP() << "redis-server / redis-cli not installed";
  }
};

// One redis-server for the single-node backend, via scripts/start_redis.sh.
struct SingleRedis {
  std::string dir;
  int port = 0;
  SingleRedis() {
    char tmpl[] = "/tmp/kvserve-single-XXXXXX";
    dir = ::mkdtemp(tmpl);
    for (int p = 30000 + static_cast<int>(::getpid() % 5000); p < 40000 && port == 0; ++p)
      if (pooltest::PortFree(p)) port = p;
    const std::string cmd = std::string(KVSERVE_SOURCE_DIR) + "/scripts/start_redis.sh --port " +
                            std::to_string(port) + " --dir " + dir + " >/dev/null";
    if (std::system(cmd.c_str()) != 0) port = 0;
  }
  ~SingleRedis() {
    (void)std::system((std::string(KVSERVE_SOURCE_DIR) + "/scripts/start_redis.sh --dir " + dir +
                       " --stop >/dev/null")
                          .c_str());
    std::filesystem::remove_all(dir);
  }
};

std::string Describe(const Status& s) { return std::string(StatusCodeName(s.code())); }

TEST_F(RedisClusterPoolTest, SameResultsAsTheSingleNodeBackend) {
  RedisCluster cluster;
  ASSERT_TRUE(cluster.Start());
  SingleRedis single;
  ASSERT_NE(single.port, 0);
  RedisClusterPoolOptions co = cluster.PoolOptions();
  co.max_piece_bytes = 16 * 1024;  // most frames below are split
  auto clustered = NewRedisClusterPool(co);
  ASSERT_TRUE(clustered.ok()) << clustered.status().ToString();
  RedisPoolOptions so;
  so.port = single.port;
  so.key_prefix = "kvtest";
  auto one = NewRedisPool(so);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  std::mt19937_64 rng(72);
  const std::vector<std::string> models = {"qwen:tiny {x}", "m", "llama%3"};
  const std::vector<std::string> profiles = {"none", "kivi-2", "kivi(k=2,v=2,group=32)"};
  std::vector<PoolKey> used;
  for (int op = 0; op < 400; ++op) {
    PoolKey key{models[rng() % models.size()], rng() % 12, profiles[rng() % profiles.size()]};
    used.push_back(key);
    const int what = static_cast<int>(rng() % 10);
    SCOPED_TRACE("op " + std::to_string(op));
    if (what < 4) {
      // Sizes around the piece limit, and overwrites that shrink.
      std::vector<uint8_t> value = ValueFor(key, 70000);
      value.resize(1 + rng() % value.size());
      ASSERT_TRUE((*clustered)->Put(key, value).ok());
      ASSERT_TRUE((*one)->Put(key, value).ok());
    } else if (what < 7) {
      std::vector<uint8_t> a, b;
      Status sa = (*clustered)->Get(key, &a), sb = (*one)->Get(key, &b);
      ASSERT_EQ(Describe(sa), Describe(sb)) << sa.ToString() << " vs " << sb.ToString();
      EXPECT_EQ(a, b);
    } else if (what < 8) {
      EXPECT_EQ(Describe((*clustered)->Delete(key)), Describe((*one)->Delete(key)));
    } else if (what < 9) {
      auto a = (*clustered)->Lookup(key.model_id, key.prefix_hash);
      auto b = (*one)->Lookup(key.model_id, key.prefix_hash);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->size(), b->size());
      for (size_t i = 0; i < a->size(); ++i) {
        EXPECT_EQ((*a)[i].profile, (*b)[i].profile);
        EXPECT_EQ((*a)[i].bytes, (*b)[i].bytes);
      }
    } else {
      std::vector<PoolKey> batch;
      for (int i = 0; i < 12; ++i) batch.push_back(used[rng() % used.size()]);
      std::vector<std::vector<uint8_t>> a, b;
      auto sa = (*clustered)->GetMany(batch, &a);
      auto sb = (*one)->GetMany(batch, &b);
      for (size_t i = 0; i < batch.size(); ++i) {
        EXPECT_EQ(Describe(sa[i]), Describe(sb[i])) << sa[i].ToString();
        EXPECT_EQ(a[i], b[i]);
      }
    }
  }
  auto sa = (*clustered)->Stats();
  auto sb = (*one)->Stats();
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(sa->entries, sb->entries);
  EXPECT_EQ(sa->bytes, sb->bytes);
  EXPECT_GT(sa->entries, 0u);
}

TEST_F(RedisClusterPoolTest, AnEntrysKeysShareASlotAndEntriesSpreadOverTheMasters) {
  RedisCluster cluster;
  ASSERT_TRUE(cluster.Start());
  RedisClusterPoolOptions o = cluster.PoolOptions();
  o.max_piece_bytes = 4096;
  auto pool = NewRedisClusterPool(o);
  ASSERT_TRUE(pool.ok());
  for (uint64_t h = 0; h < 30; ++h) {
    PoolKey key{"model", h * 7919, "kivi-2"};
    ASSERT_TRUE((*pool)->Put(key, ValueFor(key)).ok());  // several pieces each
  }
  std::set<int> masters_with_keys;
  std::map<std::string, std::set<int>> slots_of_entry;
  for (int port : cluster.Masters(cluster.port(0))) {
    std::istringstream keys(RedisCli(port, "--scan --pattern 'kvtest:*'"));
    std::string k;
    while (std::getline(keys, k)) {
      masters_with_keys.insert(port);
      const std::string tag = k.substr(k.find('{'), k.find('}') - k.find('{') + 1);
      slots_of_entry[tag].insert(pool::KeySlot(k));
    }
  }
  EXPECT_EQ(slots_of_entry.size(), 30u);
  for (const auto& [tag, slots] : slots_of_entry) EXPECT_EQ(slots.size(), 1u) << tag;
  EXPECT_GE(masters_with_keys.size(), 2u);
}

TEST_F(RedisClusterPoolTest, MasterKilledMidLoadEveryRequestCompletesWithRightBytes) {
  RedisCluster cluster(/*persist=*/false, /*node_timeout_ms=*/1000);
  ASSERT_TRUE(cluster.Start());
  const std::vector<int> masters_before = cluster.Masters(cluster.port(0));
  ASSERT_EQ(masters_before.size(), 3u);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, missed{0}, wrong{0}, failed{0};
  auto worker = [&](int seed) {
    auto pool = NewRedisClusterPool(cluster.PoolOptions());
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    std::mt19937_64 rng(seed);
    while (!stop.load()) {
      PoolKey key{"m", rng() % 64, "none"};
      std::vector<uint8_t> got;
      Status s = (rng() % 3 == 0) ? (*pool)->Put(key, ValueFor(key)) : (*pool)->Get(key, &got);
      if (s.ok()) {
        ++ok;
        if (!got.empty() && got != ValueFor(key)) ++wrong;
      } else if (s.code() == StatusCode::kNotFound) {
        ++missed;  // the caller recomputes
      } else {
        ++failed;
        ADD_FAILURE() << s.ToString();
      }
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int victim = masters_before[1];
  cluster.Kill(victim);
  // Wait (bounded) until a replica serves the victim's slots.
  bool promoted = false;
  for (int i = 0; i < 150 && !promoted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = cluster.Masters(cluster.port(victim == cluster.port(0) ? 1 : 0));
    promoted = now.size() == 3 && std::find(now.begin(), now.end(), victim) == now.end();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // load on the new master
  stop = true;
  a.join();
  b.join();
  EXPECT_TRUE(promoted) << "no replica took over the killed master's slots";
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(ok.load(), 0);
  RecordProperty("ok", ok.load());
  RecordProperty("missed", missed.load());
  // Every slot is writable and readable again.
  auto pool = NewRedisClusterPool(cluster.PoolOptions());
  ASSERT_TRUE(pool.ok());
  for (uint64_t h = 100; h < 140; ++h) {
    PoolKey key{"after", h, "none"};
    ASSERT_TRUE((*pool)->Put(key, ValueFor(key)).ok());
    std::vector<uint8_t> got;
    ASSERT_TRUE((*pool)->Get(key, &got).ok());
    EXPECT_EQ(got, ValueFor(key));
  }
}

TEST_F(RedisClusterPoolTest, PersistentContentsSurviveAClusterRestart) {
  RedisCluster cluster(/*persist=*/true);
  ASSERT_TRUE(cluster.Start());
  RedisClusterPoolOptions o = cluster.PoolOptions();
  o.max_piece_bytes = 8192;
  std::vector<PoolKey> keys;
  {
    auto pool = NewRedisClusterPool(o);
    ASSERT_TRUE(pool.ok());
    for (uint64_t h = 0; h < 24; ++h) {
      keys.push_back({"model", h * 104729, h % 2 ? "kivi-2" : "none"});
      ASSERT_TRUE((*pool)->Put(keys.back(), ValueFor(keys.back())).ok());
    }
  }
  cluster.Stop();
  ASSERT_TRUE(cluster.Start());  // same directories: nodes.conf and the AOFs
  auto pool = NewRedisClusterPool(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  std::vector<std::vector<uint8_t>> frames;
  auto statuses = (*pool)->GetMany(keys, &frames);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].ToString();
    EXPECT_EQ(frames[i], ValueFor(keys[i]));
  }
  auto entries = (*pool)->Lookup("model", keys[3].prefix_hash);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].bytes, ValueFor(keys[3]).size());
  EXPECT_EQ((*pool)->Stats()->entries, keys.size());
}

TEST_F(RedisClusterPoolTest, NoReachableSeedFailsClearly) {
  RedisClusterPoolOptions o;
  o.seeds = {"127.0.0.1:1"};
  o.retry_attempts = 0;
  auto pool = NewRedisClusterPool(o);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pool.status().message().find("redis cluster"), std::string::npos);
}

}  // namespace
}  // namespace kvserve
