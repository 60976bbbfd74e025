// Copyright kvserve authors. Subset choice and the paired bootstrap.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/quality.h"

namespace kvserve {

std::vector<int> ChooseSubset(int total, int n, uint64_t seed) {
  std::vector<int> idx(std::max(total, 0));
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= 0 || n >= total) return idx;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  // Partial Fisher-Yates with an explicit uniform draw (portable results).
  for (int i = 0; i < n; ++i) {
    const int j = i + static_cast<int>(rng() % static_cast<uint64_t>(total - i));
    std::swap(idx[i], idx[j]);
  }
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  return idx;
}

Interval BootstrapInterval(int n, const std::function<double(const std::vector<int>&)>& statistic,
                           int resamples, uint64_t seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (n <= 0 || resamples <= 0) return {nan, nan};
  std::mt19937_64 rng(seed ^ 0xb0075e7a11ULL);
  std::vector<double> values;
  values.reserve(resamples);
  std::vector<int> pick(n);
  for (int r = 0; r < resamples; ++r) {
    for (int& p : pick) p = static_cast<int>(rng() % static_cast<uint64_t>(n));
    const double v = statistic(pick);
    if (std::isfinite(v)) values.push_back(v);
  }
  if (values.empty()) return {nan, nan};
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    const double pos = q * (values.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (pos - lo) * (values[hi] - values[lo]);
  };
  return {at(0.025), at(0.975)};
}

}  // namespace kvserve
