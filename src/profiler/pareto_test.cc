// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>

#include "kvserve/profiler.h"

namespace kvserve {
namespace {

class ParetoTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(ParetoTest, EqualsBruteForceNonDominatedSet) {
  std::mt19937_64 rng(GetParam());
  for (int round = 0; round < 20; ++round) {
    const int n = 1 + static_cast<int>(rng() % 200);
    std::vector<ParetoPoint> points(n);
    for (auto& p : points) {
      // Coarse values so ties and duplicates occur.
      p.quality = 0.9 + static_cast<double>(rng() % 10) * 0.01;
      p.compression_ratio = 1.0 + static_cast<double>(rng() % 12);
      p.codec_seconds_per_byte = static_cast<double>(rng() % 8 + 1) * 1e-10;
    }
    std::vector<int> brute;
    for (int i = 0; i < n; ++i) {
      bool dominated = false;
      for (int j = 0; j < n; ++j) dominated = dominated || Dominates(points[j], points[i]);
      if (!dominated) brute.push_back(i);
    }
    EXPECT_EQ(NonDominated(points), brute);
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, ParetoTest, ::testing::Values(1u, 2u, 3u, 4u, 5u));

TEST(Pareto, TableHoldsOnlyFeasibleNonDominatedRowsAndRoundTrips) {
  std::mt19937_64 rng(11);
  std::vector<TableEntry> entries;
  for (int i = 0; i < 60; ++i) {
    TableEntry e;
    auto p = Profile::Parse("identity+uniform(k=" + std::to_string(1 + i % 8) +
                            ",group=" + std::to_string(32 << (i / 8 % 3)) + ")+" +
                            (i / 24 == 0 ? "pack" : i / 24 == 1 ? "rans" : "zstd"));
    ASSERT_TRUE(p.ok()) << i;
    e.profile = *p;
    e.codec = {1.0 + static_cast<double>(rng() % 100) / 10, 1e9 * (1 + rng() % 5),
               1e9 * (1 + rng() % 5), 1e-4};
    e.quality["w"] = 0.9 + static_cast<double>(rng() % 100) / 1000;
    e.quality["other"] = 0.5;
    entries.push_back(e);
  }
  auto table = BuildParetoTable(entries, "w", 0.95);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_GT(table->size(), 1);
  for (int i = 1; i < table->size(); ++i) {
    const ProfileCost& row = table->profile(i);
    EXPECT_GE(row.quality.at("w"), 0.95);
    EXPECT_GT(row.compression_ratio, 1.0);
    for (const TableEntry& e : entries) {
      if (e.quality.at("w") < 0.95) continue;
      EXPECT_FALSE(Dominates({e.quality.at("w"), e.codec.compression_ratio,
                              e.codec.CodecSecondsPerByte()},
                             {row.quality.at("w"), row.compression_ratio,
                              row.CodecSecondsPerByte()}));
    }
  }
  auto reparsed = ProfileTable::FromJson(table->ToJson());
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(reparsed->size(), table->size());
  EXPECT_FALSE(BuildParetoTable(entries, "w", 1.5).ok());
}

}  // namespace
}  // namespace kvserve
