// Copyright kvserve authors. Seeded random profile tables for the
// controller's property tests.
#ifndef KVSERVE_SRC_CONTROLLER_TEST_UTIL_H_
#define KVSERVE_SRC_CONTROLLER_TEST_UTIL_H_

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve::controller_test {

inline double LogUniform(std::mt19937_64& rng, double lo, double hi) {
  return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
}

// n random profiles over workloads "w0".."w{workloads-1}": CR 0.8-16,
// codec throughput 0.5-100 GB/s, t0 0-5 ms, quality on a coarse grid (so
// ties between qualities happen), sometimes missing for a workload.
inline ProfileTable RandomTable(std::mt19937_64& rng, int n, int workloads) {
  std::vector<ProfileCost> rows;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    ProfileCost p;
    p.spec = "p" + std::to_string(i);
    p.compression_ratio = unit(rng) < 0.1 ? LogUniform(rng, 0.8, 1.0) : LogUniform(rng, 1.0, 16.0);
    p.encode_bytes_per_second = LogUniform(rng, 5e8, 1e11);
    p.decode_bytes_per_second = LogUniform(rng, 5e8, 1e11);
    p.overhead_seconds = unit(rng) < 0.2 ? 0.0 : LogUniform(rng, 1e-5, 5e-3);
    for (int w = 0; w < workloads; ++w) {
      if (unit(rng) < 0.1) continue;
      p.quality["w" + std::to_string(w)] = std::round((0.85 + 0.15 * unit(rng)) * 100.0) / 100.0;
    }
    rows.push_back(p);
  }
  std::vector<std::string> names;
  for (int w = 0; w < workloads; ++w) names.push_back("w" + std::to_string(w));
  return ProfileTable::FromRowsAndWorkloads(std::move(rows), names).value();
}

// The exact optimum by brute force: minimal predicted time over raw and every
// profile with quality >= q_min (with a source of `source_seconds` in front).
// Returns the minimal time.
inline double BruteForceMin(const ProfileTable& t, const LatencyModel& m, int w, double q_min,
                            double v, double b, int* argmin, double source_seconds = 0.0) {
  double best = PredictSeconds(m, t.profile(0), v, b, source_seconds);
  *argmin = 0;
  for (int p = 1; p < t.size(); ++p) {
    if (!(t.Quality(p, w) >= q_min)) continue;
    const double time = PredictSeconds(m, t.profile(p), v, b, source_seconds);
    if (time < best) {
      best = time;
      *argmin = p;
    }
  }
  return best;
}

}  // namespace kvserve::controller_test

#endif  // KVSERVE_SRC_CONTROLLER_TEST_UTIL_H_
