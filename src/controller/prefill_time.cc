// Copyright kvserve authors. PrefillTimePredictor (kvserve/controller.h):
// a worker's prefill times by prompt length.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve {

PrefillTimePredictor::PrefillTimePredictor(double prior_seconds_per_token, int keep)
    : prior_(prior_seconds_per_token), keep_(std::max(1, keep)) {}

void PrefillTimePredictor::Observe(int tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  std::vector<double>& times = seen_[tokens];
  times.push_back(seconds);
  if (static_cast<int>(times.size()) > keep_) times.erase(times.begin());
}

double PrefillTimePredictor::Predict(int tokens) const { return PredictScaled(tokens, true); }

double PrefillTimePredictor::PredictNoLessThanNearest(int tokens) const { return PredictScaled(tokens, false); }

double PrefillTimePredictor::PredictScaled(int tokens, bool scale_down) const {
  if (tokens <= 0) return 0.0;
  if (seen_.empty()) return prior_ * tokens;
  // The nearest seen length in log(tokens); the shorter one on a tie.
  auto nearest = seen_.end();
  double best = 0;
  for (auto it = seen_.begin(); it != seen_.end(); ++it) {
    const double d = std::abs(std::log(static_cast<double>(it->first) / tokens));
    if (nearest == seen_.end() || d < best) {
      nearest = it;
      best = d;
    }
  }
  std::vector<double> times = nearest->second;
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  const double median = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  const double ratio = static_cast<double>(tokens) / nearest->first;
  return median * (scale_down ? ratio : std::max(1.0, ratio));
}

}  // namespace kvserve
