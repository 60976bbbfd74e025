// Copyright kvserve authors. Random and exhaustive search.
#include <gtest/gtest.h>

#include <set>

#include "profiler/test_util.h"

namespace kvserve::profiler {
namespace {

using testing::MakeSyntheticProblem;
using testing::TableEvaluator;

TEST(RandomSearch, SeededDistinctAndWithinBudget) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto s = MakeSyntheticProblem(seed);
    SearchProblem problem{s.candidates, 0.97, 40, seed};
    TableEvaluator e1(&s.candidates, &s.quality), e2(&s.candidates, &s.quality);
    auto a = MakeRandomSearcher()->Search(problem, e1);
    auto b = MakeRandomSearcher()->Search(problem, e2);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->observations.size(), 40u);
    std::set<int> seen;
    for (size_t i = 0; i < 40; ++i) {
      EXPECT_EQ(a->observations[i].candidate, b->observations[i].candidate);
      EXPECT_TRUE(seen.insert(a->observations[i].candidate).second);
    }
  }
}

TEST(ExhaustiveSearch, FindsTheTrueOptimum) {
  auto s = MakeSyntheticProblem(9);
  SearchProblem problem{s.candidates, 0.97, 1 << 20, 1};
  TableEvaluator evaluator(&s.candidates, &s.quality);
  auto trace = MakeExhaustiveSearcher()->Search(problem, evaluator);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->observations.size(), s.candidates.size());
  EXPECT_EQ(trace->stop_reason, "space exhausted");
  double best = 0;
  for (size_t i = 0; i < s.quality.size(); ++i) {
    if (s.quality[i] >= 0.97) best = std::max(best, s.candidates[i].codec.compression_ratio);
  }
  ASSERT_GE(trace->best_feasible, 0);
  EXPECT_EQ(s.candidates[trace->best_feasible].codec.compression_ratio, best);
  EXPECT_EQ(trace->Feasible().size(),
            static_cast<size_t>(std::count_if(s.quality.begin(), s.quality.end(),
                                              [](double q) { return q >= 0.97; })));
}

}  // namespace
}  // namespace kvserve::profiler
