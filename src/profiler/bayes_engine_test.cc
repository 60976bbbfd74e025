// Copyright kvserve authors.
#include "profiler/bayes_engine.h"

#include <gtest/gtest.h>

#include "profiler/test_util.h"

namespace kvserve::profiler {
namespace {

using testing::MakeSyntheticProblem;
using testing::TableEvaluator;

class BayesEngineTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(BayesEngineTest, SameSeedSameTrace) {
  auto synthetic = MakeSyntheticProblem(GetParam());
  SearchProblem problem{synthetic.candidates, 0.97, 30, GetParam()};
  TableEvaluator e1(&synthetic.candidates, &synthetic.quality);
  TableEvaluator e2(&synthetic.candidates, &synthetic.quality);
  auto a = MakeBayesSearcher()->Search(problem, e1);
  auto b = MakeBayesSearcher()->Search(problem, e2);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->observations.size(), b->observations.size());
  for (size_t i = 0; i < a->observations.size(); ++i) {
    EXPECT_EQ(a->observations[i].candidate, b->observations[i].candidate);
  }
  EXPECT_EQ(a->best_feasible, b->best_feasible);
}

TEST_P(BayesEngineTest, RespectsBudgetAndNeverRepeats) {
  auto synthetic = MakeSyntheticProblem(GetParam());
  BayesOptions options;
  options.early_stopping = false;
  options.pruning = false;
  SearchProblem problem{synthetic.candidates, 0.97, 25, GetParam()};
  TableEvaluator evaluator(&synthetic.candidates, &synthetic.quality);
  auto trace = MakeBayesSearcher(options)->Search(problem, evaluator);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->observations.size(), 25u);
  std::set<int> seen;
  for (const SearchObservation& o : trace->observations) EXPECT_TRUE(seen.insert(o.candidate).second);
}

TEST_P(BayesEngineTest, FindsTheBestFeasibleCandidate) {
  auto synthetic = MakeSyntheticProblem(GetParam());
  int best = -1;
  for (size_t i = 0; i < synthetic.quality.size(); ++i) {
    if (synthetic.quality[i] >= 0.97 &&
        (best < 0 || synthetic.candidates[i].codec.compression_ratio >
                         synthetic.candidates[best].codec.compression_ratio)) {
      best = static_cast<int>(i);
    }
  }
  ASSERT_GE(best, 0);
  SearchProblem problem{synthetic.candidates, 0.97, 80, GetParam()};
  TableEvaluator evaluator(&synthetic.candidates, &synthetic.quality);
  auto trace = MakeBayesSearcher()->Search(problem, evaluator);
  ASSERT_TRUE(trace.ok());
  ASSERT_GE(trace->best_feasible, 0);
  EXPECT_GE(synthetic.candidates[trace->best_feasible].codec.compression_ratio,
            0.98 * synthetic.candidates[best].codec.compression_ratio);
}

// Under the monotonicity assumption (quality never rises when a bit width
// falls, all else fixed), pruning removes only candidates that are
// infeasible or cannot beat the evaluated feasible one by more than epsilon.
TEST_P(BayesEngineTest, PruningNeverRemovesAFeasibleBetterCandidate) {
  auto synthetic = MakeSyntheticProblem(GetParam());
  const PruningIndex index = PruningIndex::Build(synthetic.candidates);
  const BayesOptions options;
  std::mt19937_64 rng(GetParam());
  for (double q_min : {0.9, 0.95, 0.97, 0.99}) {
    for (int trial = 0; trial < 50; ++trial) {
      const int n = static_cast<int>(synthetic.candidates.size());
      const int c = static_cast<int>(rng() % n);
      std::vector<char> alive(n, 1);
      Prune(index, c, synthetic.quality[c], q_min, options, &alive);
      for (int i = 0; i < n; ++i) {
        if (alive[i]) continue;
        const bool feasible = synthetic.quality[i] >= q_min;
        if (!feasible) continue;
        // A feasible candidate may go only if the evaluated one is feasible
        // and the pruned one is below its CR by more than epsilon.
        EXPECT_GE(synthetic.quality[c], q_min);
        EXPECT_LT(index.cr[i], index.cr[c] * (1.0 - options.prune_epsilon));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, BayesEngineTest, ::testing::Values(1u, 2u, 3u));

TEST(BayesEngine, EvaluatorErrorsPropagate) {
  auto synthetic = MakeSyntheticProblem(5);
  TableEvaluator evaluator(&synthetic.candidates, &synthetic.quality);
  evaluator.fail_after = 3;
  SearchProblem problem{synthetic.candidates, 0.97, 20, 5};
  auto trace = MakeBayesSearcher()->Search(problem, evaluator);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(MakeBayesSearcher()->Search(SearchProblem{}, evaluator).ok());
}

}  // namespace
}  // namespace kvserve::profiler
