// The embedded pool against a reference model: random operations keep the
// stored bytes within the budget, evict least-recently-used entries first,
// return exactly what was stored, and index every profile of a prefix.
// Prefix hashes chain correctly; concurrent use is safe.
#include <gtest/gtest.h>

#include <list>
#include <map>
#include <random>
#include <thread>

#include "kvserve/pool.h"

namespace kvserve {
namespace {

std::vector<uint8_t> ValueFor(const PoolKey& key, size_t size) {
  std::vector<uint8_t> v(size);
  std::mt19937_64 rng(key.prefix_hash ^ std::hash<std::string>()(key.profile));
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(PrefixHashTest, ChunkHashesEqualHashesOfPrefixes) {
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(1000);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 150000) - 10;
  for (int chunk : {1, 7, 256}) {
    auto hashes = PrefixChunkHashes(tokens, chunk);
    ASSERT_EQ(hashes.size(), tokens.size() / chunk);
    for (size_t k = 0; k < hashes.size(); k += std::max<size_t>(1, hashes.size() / 9))
      EXPECT_EQ(hashes[k], PrefixHash(std::span<const int32_t>(tokens).first((k + 1) * chunk)));
  }
  EXPECT_TRUE(PrefixChunkHashes(tokens, 0).empty());
  std::vector<int32_t> other = tokens;
  other[5] += 1;
  EXPECT_NE(PrefixHash(tokens), PrefixHash(other));
}

TEST(MemoryPoolTest, MatchesAnLruReferenceModel) {
  std::mt19937 rng(2);
  const uint64_t budget = 200000;
  auto pool = NewMemoryPool({.budget_bytes = budget});
  std::list<PoolKey> lru;                 // front = most recent
  std::map<std::string, size_t> sizes;    // by key string
  auto name = [](const PoolKey& k) { return k.model_id + "|" + std::to_string(k.prefix_hash) + "|" + k.profile; };
  auto touch = [&](const PoolKey& k) {
    lru.remove(k);
    lru.push_front(k);
  };
  const char* profiles[] = {"none", "kivi-2", "cachegen", "kivi(k=4,v=4)"};
  uint64_t evictions = 0;
  for (int op = 0; op < 3000; ++op) {
    PoolKey key{rng() % 2 ? "qwen-tiny" : "llama:3", rng() % 12, profiles[rng() % 4]};
    int what = rng() % 10;
    if (what < 5) {
      size_t size = std::uniform_int_distribution<size_t>(1, 30000)(rng);
      ASSERT_TRUE(pool->Put(key, ValueFor(key, size)).ok());
      if (sizes.count(name(key))) lru.remove(key);
      sizes[name(key)] = size;
      lru.push_front(key);
      uint64_t total = 0;
      for (auto& [n, s] : sizes) total += s;
      while (total > budget) {
        total -= sizes[name(lru.back())];
        sizes.erase(name(lru.back()));
        lru.pop_back();
        ++evictions;
      }
    } else if (what < 8) {
      std::vector<uint8_t> got;
      Status s = pool->Get(key, &got);
      if (sizes.count(name(key))) {
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(got, ValueFor(key, sizes[name(key)]));
        touch(key);
      } else {
        EXPECT_EQ(s.code(), StatusCode::kNotFound);
      }
    } else if (what < 9) {
      Status s = pool->Delete(key);
      EXPECT_EQ(s.ok(), sizes.count(name(key)) == 1);
      if (s.ok()) {
        sizes.erase(name(key));
        lru.remove(key);
      }
    } else {
      auto entries = pool->Lookup(key.model_id, key.prefix_hash);
      ASSERT_TRUE(entries.ok());
      std::map<std::string, size_t> expected;
      for (auto& k : lru)
        if (k.model_id == key.model_id && k.prefix_hash == key.prefix_hash)
          expected[k.profile] = sizes[name(k)];
      ASSERT_EQ(entries->size(), expected.size());
      size_t i = 0;
      for (auto& [profile, size] : expected) {
        EXPECT_EQ((*entries)[i].profile, profile);
        EXPECT_EQ((*entries)[i].bytes, size);
        ++i;
      }
    }
    auto stats = pool->Stats();
    ASSERT_TRUE(stats.ok());
    ASSERT_LE(stats->bytes, budget);
    ASSERT_EQ(stats->entries, sizes.size());
  }
  EXPECT_EQ(pool->Stats()->evictions, evictions);
  EXPECT_GT(evictions, 0u);
}

TEST(MemoryPoolTest, RejectsBadKeysAndOversizedValues) {
  auto pool = NewMemoryPool({.budget_bytes = 100});
  std::vector<uint8_t> v(101);
  EXPECT_EQ(pool->Put({"m", 1, "none"}, v).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->Put({"", 1, "none"}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Put({"m", 1, ""}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Put({std::string(256, 'm'), 1, "x"}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Delete({"m", 1, "none"}).code(), StatusCode::kNotFound);
}

TEST(MemoryPoolTest, ConcurrentUseKeepsValuesIntact) {
  auto pool = NewMemoryPool({.budget_bytes = 1 << 20});
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 500; ++i) {
        PoolKey key{"m", rng() % 40, (rng() % 2) ? "a" : "b"};
        std::vector<uint8_t> got;
        if (rng() % 2) {
          (void)pool->Put(key, ValueFor(key, 1000 + key.prefix_hash * 500));
        } else if (pool->Get(key, &got).ok() && got != ValueFor(key, 1000 + key.prefix_hash * 500)) {
          bad.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(pool->Stats()->bytes, uint64_t{1} << 20);
}

}  // namespace
}  // namespace kvserve
