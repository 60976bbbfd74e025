// Copyright kvserve authors. The profiler's ablation (paper Fig. 16 left):
// the search variants against task ground truths, and their Markdown table.
// Report code of the lab (`kvserve profile --report`), not of the installed
// library.
#ifndef KVSERVE_EXPERIMENTS_ABLATION_H_
#define KVSERVE_EXPERIMENTS_ABLATION_H_

#include <span>
#include <string>
#include <vector>

#include "kvserve/profiler.h"

namespace kvserve {

struct AblationVariant {
  std::string name;        // "full", "w/o encoding", ..., "random search"
  std::optional<BayesOptions> bayes;  // nullopt: random search
};
// The standard variants: full, w/o encoding, w/o exploration decay
// (constant lambda), w/o exploration (lambda 0), w/o pruning, w/o early
// stopping, random search.
std::vector<AblationVariant> StandardAblationVariants();

struct AblationCell {
  std::string variant;
  std::string workload;
  int seeds = 0;
  int reached = 0;               // seeds whose best CR >= (1 - tolerance) optimum
  double mean_evaluations = 0;   // evaluations used (until stop)
  double mean_to_reach = 0;      // evaluations until reached (over reached seeds)
  double mean_best_cr = 0;
  double min_best_cr = 0;
  double optimum_cr = 0;
};

// Runs every variant on every ground truth for seeds 1..seeds.
Result<std::vector<AblationCell>> RunAblation(std::span<const GroundTruth> truths,
                                              std::span<const AblationVariant> variants,
                                              double quality_min, int budget, int seeds,
                                              double tolerance = 0.02);

// A Markdown table of `cells` (one row per variant and workload).
std::string AblationMarkdown(std::span<const AblationCell> cells, int budget,
                             double tolerance = 0.02);

}  // namespace kvserve

#endif  // KVSERVE_EXPERIMENTS_ABLATION_H_
