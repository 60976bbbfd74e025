// Copyright kvserve authors. Internals of the Bayesian engine exposed for
// tests: the pruning rule of Alg. 1 lines 9-13.
#ifndef KVSERVE_PROFILER_BAYES_ENGINE_H_
#define KVSERVE_PROFILER_BAYES_ENGINE_H_

#include <array>
#include <span>
#include <vector>

#include "kvserve/profiler.h"

namespace kvserve::profiler {

// Candidates grouped into families (same components and non-bit
// parameters) with their bit widths, for the infeasible-side pruning.
struct PruningIndex {
  std::vector<int> family;                    // per candidate
  std::vector<std::array<int64_t, 8>> bits;   // per candidate: k, v, levels_k, levels_v, high, low, first, last
  std::vector<double> cr;
  static PruningIndex Build(std::span<const Candidate> candidates);
};

// Applies the pruning rule after evaluating `evaluated` with `quality`:
// clears alive[i] for the candidates BayesOptions::pruning describes.
// Returns how many were pruned.
int Prune(const PruningIndex& index, int evaluated, double quality, double quality_min,
          const BayesOptions& options, std::vector<char>* alive);

}  // namespace kvserve::profiler

#endif  // KVSERVE_PROFILER_BAYES_ENGINE_H_
