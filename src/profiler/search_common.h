// Copyright kvserve authors. Bookkeeping shared by the searchers: the trace,
// the best feasible candidate and the progress callback.
#ifndef KVSERVE_PROFILER_SEARCH_COMMON_H_
#define KVSERVE_PROFILER_SEARCH_COMMON_H_

#include <cstdint>
#include <random>

#include "kvserve/profiler.h"

namespace kvserve::profiler {

class TraceBuilder {
 public:
  TraceBuilder(const SearchProblem& problem, const ProgressFn& progress)
      : problem_(problem), progress_(progress) {}

  // Records an evaluation; returns true when it raised the best feasible CR.
  bool Record(int candidate, const QualityEstimate& quality, int remaining) {
    SearchObservation o;
    o.candidate = candidate;
    o.quality = quality;
    o.feasible = quality.quality >= problem_.quality_min;
    trace_.observations.push_back(o);
    bool improved = false;
    const double cr = problem_.candidates[candidate].codec.compression_ratio;
    if (o.feasible && cr > best_cr_) {
      best_cr_ = cr;
      trace_.best_feasible = candidate;
      improved = true;
    }
    if (progress_) {
      SearchProgress p;
      p.iteration = static_cast<int>(trace_.observations.size());
      p.candidate = candidate;
      p.quality = quality.quality;
      p.feasible = o.feasible;
      p.best_feasible_cr = best_cr_;
      p.remaining = remaining;
      progress_(p);
    }
    return improved;
  }
  int evaluations() const { return static_cast<int>(trace_.observations.size()); }
  double best_cr() const { return best_cr_; }
  SearchTrace Finish(std::string reason) {
    trace_.stop_reason = std::move(reason);
    return std::move(trace_);
  }

 private:
  const SearchProblem& problem_;
  const ProgressFn& progress_;
  SearchTrace trace_;
  double best_cr_ = 0.0;
};

// Uniform index in [0, n) from a standard-specified engine (std::
// distributions are not portable across standard libraries).
inline int UniformIndex(std::mt19937_64& rng, int n) {
  return static_cast<int>(rng() % static_cast<uint64_t>(n));
}

}  // namespace kvserve::profiler

#endif  // KVSERVE_PROFILER_SEARCH_COMMON_H_
