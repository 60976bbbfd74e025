// Copyright kvserve authors. The acquisition function of paper Eq. 4:
//   alpha(c) = CR(c)/CR_max * P(q(c) >= q_min) + lambda_t * sigma(c)/sigma_max
// P from the GP posterior (normal, latent standard deviation sigma). CR is
// divided by the largest CR of the space so that both terms live in [0, 1]
// and lambda is scale-free (the paper's raw CR only rescales lambda).
#ifndef KVSERVE_PROFILER_ACQUISITION_H_
#define KVSERVE_PROFILER_ACQUISITION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/profiler.h"

namespace kvserve::profiler {

// Standard normal CDF.
double NormalCdf(double z);

// P(q >= quality_min) for q ~ N(mean, variance); a step when variance == 0.
double FeasibilityProbability(double mean, double variance, double quality_min);

// Exploration weight at BO step t >= 0 under `schedule`.
double ExplorationWeight(ExplorationSchedule schedule, double lambda0, double decay, int t);

// Scores alpha for each candidate; `mean`, `variance`, `cr` are parallel.
// `cr_max` > 0 normalises CR; sigma is normalised by the largest sigma among
// these candidates (no exploration term when all sigmas are 0).
std::vector<double> Acquisition(std::span<const double> mean, std::span<const double> variance,
                                std::span<const double> cr, double cr_max, double quality_min,
                                double lambda);

}  // namespace kvserve::profiler

#endif  // KVSERVE_PROFILER_ACQUISITION_H_
