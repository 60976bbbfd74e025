// Copyright kvserve authors. The lab's shared pieces and renderers: the data
// directory is found the documented way and refused clearly; the simulation
// report's table and plot series follow the simulation; the e2e results JSON
// carries every point, switch and sample of the report.
#include "experiments/lab.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "experiments/e2e.h"
#include "experiments/simulation_report.h"

namespace kvserve::lab {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed at the end; `with_marker` makes it a data dir.
struct TempDir {
  explicit TempDir(bool with_marker) {
    path = fs::temp_directory_path() /
           ("kvserve-lab-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path / "configs");
    if (with_marker) std::ofstream(path / kDataMarker) << "{}";
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
  static inline int counter = 0;
};

TEST(LabTest, DataDirectoryComesFromTheFlagTheEnvironmentOrTheTree) {
  TempDir good(true), bad(false);
  ::unsetenv("KVSERVE_DATA_DIR");
  EXPECT_EQ(*FindDataDirectory(good.path.string()), good.path.string());
  EXPECT_EQ(FindDataDirectory(bad.path.string()).status().code(), StatusCode::kNotFound);
  ::setenv("KVSERVE_DATA_DIR", good.path.c_str(), 1);
  EXPECT_EQ(*FindDataDirectory(""), good.path.string());
  ::setenv("KVSERVE_DATA_DIR", bad.path.c_str(), 1);
  auto refused = FindDataDirectory("");
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("KVSERVE_DATA_DIR"), std::string::npos);
  ::unsetenv("KVSERVE_DATA_DIR");
  // From a directory that is none, the source tree this test was built in.
  const fs::path cwd = fs::current_path();
  fs::current_path(bad.path);
  auto found = FindDataDirectory("");
  fs::current_path(cwd);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_TRUE(fs::exists(fs::path(*found) / kDataMarker));
  EXPECT_EQ(DataPath("/data", "configs/x.json"), "/data/configs/x.json");
  EXPECT_EQ(DataPath("/data", "/abs/x.json"), "/abs/x.json");
  EXPECT_EQ(DataPath(".", "configs/x.json"), "configs/x.json");
}

TEST(LabTest, TextFilesRoundTripAndMissingOnesAreNotFound) {
  TempDir dir(false);
  const std::string path = (dir.path / "a.txt").string();
  ASSERT_TRUE(WriteTextFile(path, "line 1\nline 2\n").ok());
  EXPECT_EQ(*ReadTextFile(path), "line 1\nline 2\n");
  EXPECT_EQ(ReadTextFile((dir.path / "missing").string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(WriteTextFile((dir.path / "no" / "such" / "dir").string(), "x").code(),
            StatusCode::kIOError);
}

TEST(LabTest, StatisticsHelpers) {
  EXPECT_EQ(Percentile({5, 1, 4, 2, 3}, 0.5), 3);
  EXPECT_EQ(Percentile({5, 1, 4, 2, 3}, 1.0), 5);
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(Mean({1, 2, 6}), 3);
  EXPECT_EQ(HumanBytes(17), "17 B");
  EXPECT_EQ(HumanBytes(3 << 20), "3.00 MiB");
  EXPECT_EQ(SplitWords("qa, math,,code"), (std::vector<std::string>{"qa", "math", "code"}));
  EXPECT_EQ(SplitList("a:1,,b:2"), (std::vector<std::string>{"a:1", "b:2"}));
}

TEST(LabTest, SimulationReportTableAndPlotSeries) {
  auto table = ProfileTable::Load(std::string(KVSERVE_TEST_SOURCE_DIR) +
                                  "/configs/profile_table.example.json");
  ASSERT_TRUE(table.ok());
  SimulationOptions o;
  o.trace = Trace::RandomWalk(20.0, 2.0, 60.0, 0.2, 1.0, 60.0, 7);
  o.workloads = {SimulatedWorkload{"chat", 1.0, 24e6, 0.5, 0.25, 0.99}};
  o.seed = 3;
  auto report = Simulate(*table, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string md = SimulationMarkdown(*report);
  for (const PolicyResult& p : report->policies)
    EXPECT_NE(md.find("| " + p.name + " |"), std::string::npos) << p.name;
  const auto j = SimulationPlotJson(*report);
  const size_t n = j["time_seconds"].size();
  EXPECT_GT(n, 10u);
  EXPECT_LE(n, 2001u);
  EXPECT_EQ(j["bandwidth_gbps"].size(), n);
  for (const char* name : {"raw", "full", "oracle"}) {
    ASSERT_TRUE(j["latency_rolling_mean_ms"].contains(name)) << name;
    EXPECT_EQ(j["latency_rolling_mean_ms"][name].size(), n);
  }
  // The oracle's mean latency is the smallest.
  double full = 0, oracle = 0;
  for (size_t i = 0; i < n; ++i) {
    full += j["latency_rolling_mean_ms"]["full"][i].get<double>();
    oracle += j["latency_rolling_mean_ms"]["oracle"][i].get<double>();
  }
  EXPECT_LE(oracle, full * 1.0001);
}

TEST(LabTest, E2eResultsJsonHoldsEveryPointSwitchAndSample) {
  E2eReport r;
  r.prompt_tokens = 64;
  r.methods = {{"raw", "none", "none", 1.0}, {"kvserve", kMethodAdaptive, "chosen", -1}};
  for (double gbps : {0.5, 2.0}) {
    E2ePoint p;
    p.gbps = gbps;
    p.samples.resize(2);
    p.failures = {0, 1};
    for (int i = 0; i < 3; ++i) {
      RequestTimings t;
      t.jct_seconds = 0.1 * (i + 1) / gbps;
      t.profile = "none";
      p.samples[0].push_back(t);
    }
    r.points.push_back(p);
  }
  r.switches = {{0, 2.0, 1.8, "kivi-2", 0.2, 0.05}, {1, 0.5, 0.7, "none", 0.4, 0.2}};
  const auto j = E2eResultsJson(r);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_NEAR(j["points"][0]["mean_jct_seconds"][0].get<double>(), MeanJct(r.points[0], 0), 1e-12);
  EXPECT_TRUE(j["points"][0]["mean_jct_seconds"][1].is_null());  // no sample: no mean
  EXPECT_EQ(j["points"][1]["failures"][1], 1);
  EXPECT_EQ(j["switches"].size(), 2u);
  EXPECT_EQ(j["switches"][0]["profile"], "kivi-2");
  EXPECT_EQ(j["samples"].size(), 6u);
  EXPECT_TRUE(j["methods"][1]["adaptive"].get<bool>());
}

// The presets' qualities in kvserve e2e follow the tables' rule: the lower
// end of the held-out interval, the point estimate only without one.
TEST(LabTest, ReportedQualitiesAreTheIntervalsLowerEnds) {
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::uniform_real_distribution<double> u(0.5, 1.0);
  const double low = u(rng), point = low + 0.5 * (1 - low) * u(rng), bare = u(rng);
  nlohmann::json j = nlohmann::json::array();
  j.push_back({{"profile", "kivi-2"}, {"relative", point}, {"relative_ci95", {low, 1.0}}});
  j.push_back({{"profile", "cachegen"}, {"relative", bare}});
  j.push_back({{"profile", "broken"}, {"relative", "n/a"}});
  j.push_back({{"relative", 1.0}});
  auto got = ReportedQualities(j.dump());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].first, "kivi-2");
  EXPECT_DOUBLE_EQ((*got)[0].second, low);
  EXPECT_EQ((*got)[1].first, "cachegen");
  EXPECT_DOUBLE_EQ((*got)[1].second, bare);
  EXPECT_EQ(ReportedQualities("{\"profile\": \"kivi-2\"}").status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kvserve::lab
