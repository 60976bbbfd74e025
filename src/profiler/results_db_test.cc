// Copyright kvserve authors.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/temp_dir.h"
#include "profiler/test_util.h"

namespace kvserve::profiler {
namespace {

using testing::MakeSyntheticProblem;
using testing::TableEvaluator;

std::string TempPath(const std::string& name) {
  static const std::string dir = kvserve::testing::TempDir("profiler");
  const auto path = std::filesystem::path(dir) / name;
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

TEST(ResultsDb, IntervalEndsRoundTripAndUnknownOnesStayUnknown) {
  auto db = ResultsDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  std::mt19937_64 rng(5);
  for (int i = 0; i < 30; ++i) {
    const EvaluationKey key{"m", "w", "spec" + std::to_string(i), "s", "e"};
    QualityEstimate q;
    q.quality = static_cast<double>(rng() % 1000) / 1000;
    q.ci_half_width = 0.02;
    q.samples = 100;
    if (i % 3 != 0) {  // an asymmetric interval
      q.low = q.quality - 0.03;
      q.high = q.quality + 0.01;
    }
    ASSERT_TRUE((*db)->PutQuality(key, q).ok());
    auto r = (*db)->Get(key);
    ASSERT_TRUE(r.ok() && r->quality);
    if (i % 3 != 0) {
      EXPECT_EQ(r->quality->low, q.low);
      EXPECT_EQ(r->quality->high, q.high);
      EXPECT_EQ(r->quality->LowerBound(), q.low);
    } else {
      EXPECT_TRUE(std::isnan(r->quality->low) && std::isnan(r->quality->high));
      EXPECT_DOUBLE_EQ(r->quality->LowerBound(), q.quality - 0.02);
    }
  }
}

TEST(ResultsDb, ADatabaseWithoutIntervalColumnsGainsThemAndKeepsItsRows) {
  const std::string path = TempPath("old-schema.db");
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    const char* old_schema =
        "CREATE TABLE evaluations (model TEXT NOT NULL, workload TEXT NOT NULL, spec TEXT NOT NULL,"
        " sample_set TEXT NOT NULL, evaluator TEXT NOT NULL, quality REAL, quality_ci REAL,"
        " samples INTEGER, compression_ratio REAL, encode_bytes_per_second REAL,"
        " decode_bytes_per_second REAL, overhead_seconds REAL, seq INTEGER NOT NULL,"
        " recorded_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,"
        " PRIMARY KEY (model, workload, spec, sample_set, evaluator));"
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO meta VALUES ('format', 'kvserve-results-db-1');"
        "INSERT INTO evaluations (model, workload, spec, sample_set, evaluator, quality, quality_ci,"
        " samples, seq) VALUES ('m', 'w', 'kivi-2', 's', 'e', 0.9, 0.05, 50, 1);";
    ASSERT_EQ(sqlite3_exec(raw, old_schema, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = ResultsDb::Open(path);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto old_row = (*db)->Get({"m", "w", "kivi-2", "s", "e"});
  ASSERT_TRUE(old_row.ok() && old_row->quality);
  EXPECT_EQ(old_row->quality->quality, 0.9);
  EXPECT_TRUE(std::isnan(old_row->quality->low));
  QualityEstimate q = *old_row->quality;
  q.low = 0.8;
  q.high = 0.95;
  ASSERT_TRUE((*db)->PutQuality({"m", "w", "kivi-4", "s", "e"}, q).ok());
  db->reset();
  auto reopened = ResultsDb::Open(path);  // a second open finds the columns there
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto row = (*reopened)->Get({"m", "w", "kivi-4", "s", "e"});
  ASSERT_TRUE(row.ok() && row->quality);
  EXPECT_EQ(row->quality->low, 0.8);
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
