// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "profiler/test_util.h"

namespace kvserve::profiler {
namespace {

using testing::MakeSyntheticProblem;
using testing::TableEvaluator;

std::string TempPath(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvserve_profiler_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path.string();
}

TEST(ResultsDb, PutGetRoundTripKeepsBothHalves) {
  auto db = ResultsDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  std::mt19937_64 rng(4);
  for (int i = 0; i < 50; ++i) {
    EvaluationKey key{"m", "w" + std::to_string(i % 3), "spec" + std::to_string(i), "s", "e"};
    const QualityEstimate q{static_cast<double>(rng() % 1000) / 1000, 0.01, 100};
    const CodecMetrics c{1.0 + rng() % 10, 1e9 + rng() % 1000, 2e9, 1e-3};
    ASSERT_TRUE((*db)->PutCodec(key, c).ok());
    ASSERT_TRUE((*db)->PutQuality(key, q).ok());
    auto r = (*db)->Get(key);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->quality && r->codec);
    EXPECT_EQ(r->quality->quality, q.quality);
    EXPECT_EQ(r->quality->samples, 100);
    EXPECT_EQ(r->codec->compression_ratio, c.compression_ratio);
    EXPECT_EQ(r->codec->encode_bytes_per_second, c.encode_bytes_per_second);
  }
  auto listed = (*db)->List({"m", "w1", "", "s", "e"});
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 17u);
  EvaluationKey other{"m", "w1", "spec1", "s", "another-evaluator"};
  EXPECT_EQ((*db)->Get(other).status().code(), StatusCode::kNotFound);
}

// A search interrupted by an evaluator failure and rerun with the same seed
// reproduces the uninterrupted trace and evaluates nothing twice.
TEST(ResultsDb, InterruptedSearchResumesWithoutPayingTwice) {
  for (uint64_t seed : {1u, 2u}) {
    auto s = MakeSyntheticProblem(seed);
    SearchProblem problem{s.candidates, 0.97, 40, seed};
    TableEvaluator reference(&s.candidates, &s.quality);
    auto expected = MakeBayesSearcher()->Search(problem, reference);
    ASSERT_TRUE(expected.ok());

    const std::string path = TempPath("resume_" + std::to_string(seed) + ".db");
    TableEvaluator inner(&s.candidates, &s.quality);
    inner.fail_after = 12;
    {
      auto db = ResultsDb::Open(path);
      ASSERT_TRUE(db.ok());
      auto cached = MakeCachingEvaluator(&inner, db->get(), {"m", "w", "", "s", ""});
      auto first = MakeBayesSearcher()->Search(problem, *cached);
      ASSERT_FALSE(first.ok());  // interrupted
    }
    const int paid_first = 12;
    inner.fail_after = -1;
    inner.calls = 0;
    int reused = 0;
    auto db = ResultsDb::Open(path);
    ASSERT_TRUE(db.ok());
    auto cached = MakeCachingEvaluator(&inner, db->get(), {"m", "w", "", "s", ""}, &reused);
    auto second = MakeBayesSearcher()->Search(problem, *cached);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(reused, paid_first);
    EXPECT_EQ(inner.calls + reused, static_cast<int>(second->observations.size()));
    ASSERT_EQ(second->observations.size(), expected->observations.size());
    for (size_t i = 0; i < expected->observations.size(); ++i) {
      EXPECT_EQ(second->observations[i].candidate, expected->observations[i].candidate);
    }
  }
}

TEST(ResultsDb, RejectsAForeignDatabase) {
  const std::string path = TempPath("foreign.db");
  {
    std::ofstream out(path);
    out << "this is not sqlite";
  }
  EXPECT_FALSE(ResultsDb::Open(path).ok());
}

}  // namespace
}  // namespace kvserve::profiler
