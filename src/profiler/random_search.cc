// Copyright kvserve authors. Random search: the baseline of the ablation.
#include <numeric>
#include <random>

#include "kvserve/profiler.h"
#include "profiler/search_common.h"

namespace kvserve {
namespace {

class RandomSearcher final : public Searcher {
 public:
  std::string name() const override { return "random"; }
  Result<SearchTrace> Search(const SearchProblem& problem, Evaluator& evaluator,
                             const ProgressFn& progress) override {
    const int n = static_cast<int>(problem.candidates.size());
    if (n == 0) return Status::InvalidArgument("search: no candidates");
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(problem.seed);
    for (int i = n - 1; i > 0; --i) std::swap(order[i], order[profiler::UniformIndex(rng, i + 1)]);
    profiler::TraceBuilder trace(problem, progress);
    for (int i = 0; i < n; ++i) {
      if (trace.evaluations() >= problem.budget) return trace.Finish("budget");
      auto q = evaluator.Evaluate(problem.candidates[order[i]].profile);
      if (!q.ok()) return q.status();
      trace.Record(order[i], *q, n - i - 1);
    }
    return trace.Finish("space exhausted");
  }
};

}  // namespace

std::unique_ptr<Searcher> MakeRandomSearcher() { return std::make_unique<RandomSearcher>(); }

std::vector<int> SearchTrace::Feasible() const {
  std::vector<int> out;
  for (const SearchObservation& o : observations) {
    if (o.feasible) out.push_back(o.candidate);
  }
  return out;
}

}  // namespace kvserve
