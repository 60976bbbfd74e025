// Copyright kvserve authors.
#include "profiler/acquisition.h"

#include <algorithm>
#include <cmath>

namespace kvserve::profiler {

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double FeasibilityProbability(double mean, double variance, double quality_min) {
  if (!(variance > 0.0)) return mean >= quality_min ? 1.0 : 0.0;
  return NormalCdf((mean - quality_min) / std::sqrt(variance));
}

double ExplorationWeight(ExplorationSchedule schedule, double lambda0, double decay, int t) {
  switch (schedule) {
    case ExplorationSchedule::kDecay:
      return lambda0 * std::pow(decay, std::max(t, 0));
    case ExplorationSchedule::kConstant:
      return lambda0;
    case ExplorationSchedule::kNone:
      return 0.0;
  }
  return 0.0;
}

std::vector<double> Acquisition(std::span<const double> mean, std::span<const double> variance,
                                std::span<const double> cr, double cr_max, double quality_min,
                                double lambda) {
  double sigma_max = 0.0;
  for (double v : variance) sigma_max = std::max(sigma_max, std::sqrt(std::max(v, 0.0)));
  std::vector<double> score(mean.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    const double exploit = cr[i] / cr_max * FeasibilityProbability(mean[i], variance[i], quality_min);
    const double explore =
        sigma_max > 0.0 ? lambda * std::sqrt(std::max(variance[i], 0.0)) / sigma_max : 0.0;
    score[i] = exploit + explore;
  }
  return score;
}

}  // namespace kvserve::profiler
