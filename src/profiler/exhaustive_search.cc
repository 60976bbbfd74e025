// Copyright kvserve authors. Exhaustive search: every candidate in order.
#include "kvserve/profiler.h"
#include "profiler/search_common.h"

namespace kvserve {
namespace {

class ExhaustiveSearcher final : public Searcher {
 public:
  std::string name() const override { return "exhaustive"; }
  Result<SearchTrace> Search(const SearchProblem& problem, Evaluator& evaluator,
                             const ProgressFn& progress) override {
    const int n = static_cast<int>(problem.candidates.size());
    if (n == 0) return Status::InvalidArgument("search: no candidates");
    profiler::TraceBuilder trace(problem, progress);
    for (int i = 0; i < n; ++i) {
      if (trace.evaluations() >= problem.budget) return trace.Finish("budget");
      auto q = evaluator.Evaluate(problem.candidates[i].profile);
      if (!q.ok()) return q.status();
      trace.Record(i, *q, n - i - 1);
    }
    return trace.Finish("space exhausted");
  }
};

}  // namespace

std::unique_ptr<Searcher> MakeExhaustiveSearcher() {
  return std::make_unique<ExhaustiveSearcher>();
}

}  // namespace kvserve
