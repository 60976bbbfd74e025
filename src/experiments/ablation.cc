// Copyright kvserve authors. The ablation study of paper Fig. 16 (left) on
// recorded ground truth.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "experiments/ablation.h"

namespace kvserve {

std::vector<AblationVariant> StandardAblationVariants() {
  std::vector<AblationVariant> v;
  BayesOptions full;
  v.push_back({"full engine", full});
  BayesOptions no_encoding = full;
  no_encoding.encoding = false;
  v.push_back({"w/o encoding", no_encoding});
  BayesOptions no_decay = full;
  no_decay.exploration = ExplorationSchedule::kConstant;
  v.push_back({"w/o exploration decay (constant lambda)", no_decay});
  BayesOptions no_explore = full;
  no_explore.exploration = ExplorationSchedule::kNone;
  v.push_back({"w/o exploration (lambda = 0)", no_explore});
  BayesOptions no_prune = full;
  no_prune.pruning = false;
  v.push_back({"w/o pruning", no_prune});
  BayesOptions no_stop = full;
  no_stop.early_stopping = false;
  v.push_back({"w/o early stopping", no_stop});
  v.push_back({"random search", std::nullopt});
  return v;
}

Result<std::vector<AblationCell>> RunAblation(std::span<const GroundTruth> truths,
                                              std::span<const AblationVariant> variants,
                                              double quality_min, int budget, int seeds,
                                              double tolerance) {
  std::vector<AblationCell> cells;
  for (const GroundTruth& truth : truths) {
    auto candidates = truth.Candidates();
    if (!candidates.ok()) return candidates.status();
    const int best = truth.BestFeasible(quality_min);
    if (best < 0) {
      return Status::InvalidArgument("ground truth " + truth.workload +
                                     ": nothing is feasible at this quality floor");
    }
    const double optimum = truth.rows[best].codec.compression_ratio;
    for (const AblationVariant& variant : variants) {
      AblationCell cell;
      cell.variant = variant.name;
      cell.workload = truth.workload;
      cell.seeds = seeds;
      cell.optimum_cr = optimum;
      cell.min_best_cr = std::numeric_limits<double>::infinity();
      double to_reach_sum = 0.0;
      for (int seed = 1; seed <= seeds; ++seed) {
        SearchProblem problem;
        problem.candidates = *candidates;
        problem.quality_min = quality_min;
        problem.budget = budget;
        problem.seed = static_cast<uint64_t>(seed);
        auto searcher =
            variant.bayes ? MakeBayesSearcher(*variant.bayes) : MakeRandomSearcher();
        auto evaluator = truth.MakeEvaluator();
        auto trace = searcher->Search(problem, *evaluator);
        if (!trace.ok()) return trace.status().WithContext(variant.name);
        double best_cr = 0.0;
        int reached_at = -1;
        for (size_t i = 0; i < trace->observations.size(); ++i) {
          const SearchObservation& o = trace->observations[i];
          if (o.feasible) {
            best_cr = std::max(best_cr, problem.candidates[o.candidate].codec.compression_ratio);
          }
          if (reached_at < 0 && best_cr >= (1.0 - tolerance) * optimum) {
            reached_at = static_cast<int>(i) + 1;
          }
        }
        cell.mean_evaluations += static_cast<double>(trace->observations.size()) / seeds;
        cell.mean_best_cr += best_cr / seeds;
        cell.min_best_cr = std::min(cell.min_best_cr, best_cr);
        if (reached_at > 0) {
          ++cell.reached;
          to_reach_sum += reached_at;
        }
      }
      cell.mean_to_reach = cell.reached > 0 ? to_reach_sum / cell.reached : 0.0;
      cells.push_back(cell);
    }
  }
  return cells;
}

}  // namespace kvserve

namespace kvserve {

std::string AblationMarkdown(std::span<const AblationCell> cells, int budget, double tolerance) {
  char line[512];
  std::string out =
      "| workload | variant | reached optimum (within " + std::to_string(int(tolerance * 100 + 0.5)) +
      "% CR) | evaluations to reach (mean) | evaluations used (mean, budget " +
      std::to_string(budget) + ") | best CR mean / min | optimum CR |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const AblationCell& c : cells) {
    std::snprintf(line, sizeof(line), "| %s | %s | %d / %d | %s | %.1f | %.2f / %.2f | %.2f |\n",
                  c.workload.c_str(), c.variant.c_str(), c.reached, c.seeds,
                  c.reached > 0 ? std::to_string(c.mean_to_reach).substr(0, 5).c_str() : "-",
                  c.mean_evaluations, c.mean_best_cr, c.min_best_cr, c.optimum_cr);
    out += line;
  }
  return out;
}

}  // namespace kvserve
