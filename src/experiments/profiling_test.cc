// Copyright kvserve authors. Task-mode profiling runs with held-out scoring
// (experiments/profiling.h): a tiny random-weight model, a workload of its
// own greedy answers, a small strategy space.
#include "experiments/profiling.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "runtime/test_model_util.h"

namespace kvserve::lab {
namespace {

namespace fs = std::filesystem;

// Runs the search of `o` and reads its "stopped: ...; N evaluations (M from
// the database)" line into *evaluations and *stored (-1 when missing).
Result<ProfileRunResult> SearchCountingEvaluations(const ProfileRunOptions& o, int* evaluations,
                                                   int* stored) {
  std::string stopped;
  auto r = RunProfileSearch(o, [&](const std::string& line) {
    if (line.rfind("stopped:", 0) == 0) stopped = line;
  });
  *evaluations = *stored = -1;
  const size_t at = stopped.find("; ");
  if (at != std::string::npos &&
      std::sscanf(stopped.c_str() + at, "; %d evaluations (%d from the database)", evaluations,
                  stored) != 2)
    *evaluations = *stored = -1;
  return r;
}

class TaskProfilingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(kvserve::testing::TempDir("task_profiling"));
    RandomModelSpec spec;
    spec.seed = 41;
    ASSERT_TRUE(WriteRandomModel(*dir_ + "/model", spec).ok());
    auto model = Model::Load(*dir_ + "/model");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_TRUE(kvserve::testing::WriteGreedyWorkload(**model, *dir_ + "/tiny.jsonl", 16, 43));
    // Lossless and lossy rows: the floor below keeps some and drops others.
    std::ofstream(*dir_ + "/space.json")
        << R"({"transforms":{"identity":{}},"codecs":{"pack":{}},
              "quantizers":{"kivi":{"k":[1,2,8],"v":[1,8],"group":[32],"residual":[0]}},
              "include":["kivi-4"]})";
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  ProfileRunOptions Options(const std::string& db) const {
    ProfileRunOptions o;
    o.model = *dir_ + "/model";
    o.workload = *dir_ + "/tiny.jsonl";
    o.space = *dir_ + "/space.json";
    o.db = *dir_ + "/" + db;
    o.searcher = "exhaustive";
    o.budget = 20;
    o.quality_min = 0.5;
    o.samples = 8;
    o.holdout_samples = 8;
    o.cache_dir = "";
    o.codec_kv_tokens = 32;
    o.threads = 1;
    o.head_scores = "";
    return o;
  }

  static std::string* dir_;
};
std::string* TaskProfilingTest::dir_ = nullptr;

TEST_F(TaskProfilingTest, TableQualitiesAreHeldOutLowerEndsAndEveryRowMeetsTheFloor) {
  const ProfileRunOptions o = Options("lower.db");
  auto r = RunProfileSearch(o, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto doc = nlohmann::json::parse(r->table_json);
  EXPECT_NE(doc["quality_kind"].get<std::string>().find("held-out"), std::string::npos);
  const std::string w = o.workload;
  ASSERT_FALSE(doc["profiles"].empty());
  for (const auto& row : doc["profiles"]) {
    SCOPED_TRACE(row["spec"].get<std::string>());
    const double q = row["quality"][w], low = row["quality_low"][w], high = row["quality_high"][w];
    const double point = row["quality_holdout"][w];
    EXPECT_EQ(q, low);  // the floor is checked against the interval's lower end
    EXPECT_LE(low, point);
    EXPECT_LE(point, high);
    EXPECT_GE(q, o.quality_min);
    EXPECT_TRUE(row.contains("quality_search"));
  }
  // The controller reads the held-out figure.
  for (int i = 1; i < r->table.size(); ++i) EXPECT_GE(r->table.Quality(i, 0), o.quality_min);
}

TEST_F(TaskProfilingTest, PointEstimateOptionAndTheHeldOutRowsComeBackFromTheDatabase) {
  ProfileRunOptions o = Options("point.db");
  o.floor_on = "point";
  auto first = RunProfileSearch(o, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const auto first_doc = nlohmann::json::parse(first->table_json);  // outlives the loop
  for (const auto& row : first_doc["profiles"])
    EXPECT_EQ(row["quality"][o.workload], row["quality_holdout"][o.workload]);
  // A rerun pays for no search evaluation ("N evaluations (N from the
  // database)") and writes the same table (its held-out rows come back too).
  int evaluations = -1, stored = -1;
  auto again = SearchCountingEvaluations(o, &evaluations, &stored);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(evaluations, 0);
  EXPECT_EQ(evaluations, stored);
  EXPECT_EQ(again->table_json.substr(again->table_json.find("\"workloads\"")),
            first->table_json.substr(first->table_json.find("\"workloads\"")));
}

// The held-out walk: rows in descending CR; the search's feasible rows that
// are not on its Pareto set are scored only above the first row that holds
// (each in turn gives way when it fails), and the table's best row is that
// first row. Across floors (either rule), at least one run has a Pareto row
// fail out of sample and a non-Pareto feasible row take its place.
TEST_F(TaskProfilingTest, FailingParetoRowsGiveWayToTheNextFeasibleRowsInCrOrder) {
  // A space with many nearly lossless rows of close CR.
  const std::string space = *dir_ + "/walk_space.json";
  std::ofstream(space) << R"({"transforms":{"identity":{},"hadamard":{"seed":[7]}},"codecs":{"pack":{}},
      "quantizers":{"kivi":{"k":[2,3,4,8],"v":[2,3,4,8],"group":[16,32],"residual":[0]}}})";
  int walked_past_pareto = 0;
  for (const std::string floor_on : {"lower", "point"})
  for (unsigned seed : {0u, 1u, 2u})
  for (double floor : {0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0}) {
    SCOPED_TRACE(floor_on + " seed " + std::to_string(seed) + " floor " + std::to_string(floor));
    ProfileRunOptions o = Options("walk.db");
    o.floor_on = floor_on;
    o.sample_seed = seed;
    o.space = space;
    o.budget = 100;
    o.quality_min = floor;
    struct Line {
      std::string spec;
      double cr;
      bool pareto, holds;
    };
    std::vector<Line> lines;
    auto r = RunProfileSearch(o, [&](const std::string& line) {
      if (line.rfind("held out", 0) != 0) return;
      const bool pareto = line.find("(feasible, not Pareto)") == std::string::npos;
      const size_t colon = line.find(": "), cr_at = line.find(" CR ");
      ASSERT_NE(colon, std::string::npos);
      ASSERT_NE(cr_at, std::string::npos);
      lines.push_back({line.substr(colon + 2, cr_at - colon - 2), std::stod(line.substr(cr_at + 4)),
                       pareto, line.find("below the floor") == std::string::npos});
    });
    for (size_t i = 1; i < lines.size(); ++i) EXPECT_GE(lines[i - 1].cr, lines[i].cr);
    const auto first = std::find_if(lines.begin(), lines.end(), [](const Line& l) { return l.holds; });
    if (first != lines.end()) {
      for (auto it = first + 1; it != lines.end(); ++it) EXPECT_TRUE(it->pareto) << it->spec;
    }
    if (first == lines.end()) {
      EXPECT_FALSE(r.ok());  // nothing held: NotFound, naming what was tried
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (std::any_of(lines.begin(), first, [](const Line& l) { return !l.pareto; }))
      ++walked_past_pareto;
    double best_cr = 0;
    std::string best;
    const auto doc = nlohmann::json::parse(r->table_json);
    for (const auto& row : doc["profiles"]) {
      if (row["spec"] == "none" || row["compression_ratio"].get<double>() <= best_cr) continue;
      best_cr = row["compression_ratio"].get<double>();
      best = row["spec"].get<std::string>();
    }
    EXPECT_EQ(best, first->spec);
  }
  EXPECT_GT(walked_past_pareto, 0);
}

// The max CR among a table's rows whose (held-out) quality meets `floor`.
double BestCrAt(const std::string& table_json, const std::string& workload, double floor) {
  double best = 0;
  const auto doc = nlohmann::json::parse(table_json);
  for (const auto& row : doc["profiles"])
    if (row["spec"] != "none" && row["quality"][workload].get<double>() >= floor)
      best = std::max(best, row["compression_ratio"].get<double>());
  return best;
}

// --more-floors: the table of one run searched at several floors serves each
// floor at least as well as a run searched at that floor alone (same seed,
// budget and database), and says which floors it searched.
TEST_F(TaskProfilingTest, StricterFloorsServeEachFloorAsWellAsTheirOwnSearch) {
  const std::string space = *dir_ + "/floors_space.json";
  std::ofstream(space) << R"({"transforms":{"identity":{},"hadamard":{"seed":[7]}},"codecs":{"pack":{}},
      "quantizers":{"kivi":{"k":[1,2,3,4,8],"v":[1,2,3,4,8],"group":[16,32],"residual":[0]}}})";
  int stricter_rows_added = 0;
  for (unsigned seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ProfileRunOptions o = Options("floors.db");
    o.space = space;
    o.searcher = "bayes";
    o.seed = seed;
    o.budget = 8;
    o.quality_min = 0.5;
    const std::vector<double> strict{0.8, 0.95};
    auto alone_low = RunProfileSearch(o, {});
    ASSERT_TRUE(alone_low.ok()) << alone_low.status().ToString();
    ProfileRunOptions multi = o;
    multi.more_floors = {0.95, 0.3, 0.8};  // unsorted; 0.3 < quality_min is ignored
    auto both = RunProfileSearch(multi, {});
    ASSERT_TRUE(both.ok()) << both.status().ToString();
    const std::string comment = nlohmann::json::parse(both->table_json)["comment"];
    EXPECT_NE(comment.find("then again at 0.8, 0.95"), std::string::npos) << comment;
    EXPECT_GE(BestCrAt(both->table_json, o.workload, o.quality_min),
              BestCrAt(alone_low->table_json, o.workload, o.quality_min));
    for (double f : strict) {
      ProfileRunOptions single = o;
      single.quality_min = f;
      auto alone = RunProfileSearch(single, {});
      if (!alone.ok()) continue;  // nothing holds at f
      EXPECT_GE(BestCrAt(both->table_json, o.workload, f), BestCrAt(alone->table_json, o.workload, f))
          << "floor " << f;
      if (BestCrAt(both->table_json, o.workload, f) > BestCrAt(alone_low->table_json, o.workload, f))
        ++stricter_rows_added;
    }
  }
  // The stricter searches added rows the quality_min search alone did not have.
  EXPECT_GT(stricter_rows_added, 0);
}

TEST_F(TaskProfilingTest, HoldOutNeedsSamplesTheSearchDidNotUse) {
  ProfileRunOptions o = Options("bad.db");
  o.samples = 0;  // every sample in the search
  auto r = RunProfileSearch(o, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--holdout-samples 0"), std::string::npos);
  o.holdout_samples = 0;  // the search's own qualities, as before
  auto plain = RunProfileSearch(o, {});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(plain->table_json)["quality_kind"].get<std::string>().find("held-out"),
            std::string::npos);
  o = Options("bad.db");
  o.floor_on = "median";
  EXPECT_EQ(RunProfileSearch(o, {}).status().code(), StatusCode::kInvalidArgument);
  // Stricter floors are a task-mode option: the proxy says so instead of ignoring them.
  ProfileRunOptions proxy;
  proxy.workload = "synth-smooth";
  proxy.db = *dir_ + "/proxy.db";
  proxy.more_floors = {0.99};
  auto refused = RunProfileSearch(proxy, {});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--more-floors"), std::string::npos);
}

// The task-mode ground truth scores every configuration of the space with
// the task evaluator through the results database: a search on the same
// samples afterwards pays for nothing and finds the same qualities.
TEST_F(TaskProfilingTest, TaskGroundTruthScoresEveryConfigurationOnceForTheSearchesToo) {
  ProfileRunOptions o = Options("truth.db");
  int scored = 0;
  auto truth = GenerateGroundTruthRun(o, [&](const std::string& line) {
    if (line.find(" / ") != std::string::npos && line.find("q=") != std::string::npos) ++scored;
  });
  ASSERT_TRUE(truth.ok()) << truth.status().ToString();
  auto space = StrategySpace::Load(o.space);
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  ASSERT_EQ(truth->rows.size(), space->size());
  EXPECT_EQ(scored, static_cast<int>(space->size()));
  EXPECT_EQ(truth->quality_kind.rfind("task:", 0), 0u) << truth->quality_kind;
  EXPECT_EQ(truth->workload, o.workload);
  std::set<std::string> specs;
  for (const GroundTruthRow& row : truth->rows) {
    EXPECT_TRUE(specs.insert(row.spec).second) << row.spec;
    EXPECT_GT(row.codec.compression_ratio, 0.0) << row.spec;
    EXPECT_GE(row.quality, 0.0) << row.spec;
  }
  auto reloaded = GroundTruth::FromJson(truth->ToJson());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().ToString();
  ASSERT_EQ(reloaded->rows.size(), truth->rows.size());

  // The search's evaluations all come from the database the ground truth
  // filled, and its table's rows carry the ground truth's qualities.
  o.holdout_samples = 0;
  o.budget = static_cast<int>(space->size());
  int evaluations = -1, stored = -1;
  auto search = SearchCountingEvaluations(o, &evaluations, &stored);
  ASSERT_TRUE(search.ok()) << search.status().ToString();
  EXPECT_GT(evaluations, 0);
  EXPECT_EQ(evaluations, stored);
  const auto search_doc = nlohmann::json::parse(search->table_json);  // outlives the loop
  for (const auto& row : search_doc["profiles"]) {
    const std::string spec = row["spec"];
    if (spec == "none") continue;
    auto it = std::find_if(truth->rows.begin(), truth->rows.end(),
                           [&](const GroundTruthRow& r) { return r.spec == spec; });
    ASSERT_NE(it, truth->rows.end()) << spec;
    EXPECT_DOUBLE_EQ(row["quality"][o.workload].get<double>(), it->quality) << spec;
  }

  o.workload = "unified";
  EXPECT_EQ(GenerateGroundTruthRun(o, {}).status().code(), StatusCode::kInvalidArgument);
}

// The report from task ground truths is the ground truth and the ablation
// (with random search beside the engine), labelled with the task metric,
// and writes no tables; task and proxy ground truths do not mix.
TEST_F(TaskProfilingTest, ReportFromATaskGroundTruthIsTheAblationOnTaskQuality) {
  ProfileRunOptions o = Options("report.db");
  auto truth = GenerateGroundTruthRun(o, {});
  ASSERT_TRUE(truth.ok()) << truth.status().ToString();
  const std::string task_file = *dir_ + "/task-truth.json";
  std::ofstream(task_file) << truth->ToJson();
  ProfileRunOptions r;
  r.ground_truth = {task_file};
  r.quality_min = o.quality_min;
  r.budget = 4;
  r.seeds = 2;
  auto report = RunProfilingReport(r, {});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->tables.empty());
  const std::string& md = report->markdown;
  EXPECT_NE(md.find("**task:"), std::string::npos) << md;
  EXPECT_EQ(md.find("synthetic KV"), std::string::npos) << md;
  EXPECT_NE(md.find("### Ablation"), std::string::npos) << md;
  EXPECT_NE(md.find("| random search |"), std::string::npos) << md;
  EXPECT_NE(md.find("| full engine |"), std::string::npos) << md;
  EXPECT_NE(md.find(truth->source), std::string::npos) << md;

  GroundTruth proxy = *truth;
  proxy.workload = "proxy-copy";
  proxy.quality_kind = "proxy: reconstruction SNR, not task accuracy";
  const std::string proxy_file = *dir_ + "/proxy-truth.json";
  std::ofstream(proxy_file) << proxy.ToJson();
  r.ground_truth = {task_file, proxy_file};
  EXPECT_EQ(RunProfilingReport(r, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::lab
