// Copyright kvserve authors. Codec-speed drift; see codec_drift.h.
#include "controller/codec_drift.h"

#include <cmath>

namespace kvserve::controller_internal {

CodecDrift::CodecDrift(int profiles, CodecDriftOptions options)
    : options_(options),
      profiles_(profiles > 0 ? profiles : 0),
      log_profile_(new std::atomic<double>[static_cast<size_t>(profiles_ > 0 ? profiles_ : 1)]),
      count_(new std::atomic<int64_t>[static_cast<size_t>(profiles_ > 0 ? profiles_ : 1)]) {
  for (int p = 0; p < profiles_; ++p) {
    log_profile_[p].store(0.0, std::memory_order_relaxed);
    count_[p].store(0, std::memory_order_relaxed);
  }
}

double CodecDrift::Shared() const {
  return std::exp(log_shared_.load(std::memory_order_relaxed));
}

double CodecDrift::Factor(int profile) const {
  if (profile <= 0 || profile >= profiles_) return 1.0;
  return std::exp(log_shared_.load(std::memory_order_relaxed) +
                  log_profile_[profile].load(std::memory_order_relaxed));
}

int64_t CodecDrift::Count(int profile) const {
  if (profile < 0 || profile >= profiles_) return 0;
  return count_[profile].load(std::memory_order_relaxed);
}

void CodecDrift::Observe(int profile, double expected_seconds, double observed_seconds) {
  if (profile <= 0 || profile >= profiles_ || !(expected_seconds > 0.0) ||
      !(observed_seconds > 0.0) || !std::isfinite(expected_seconds) ||
      !std::isfinite(observed_seconds)) {
    return;
  }
  const double r = std::log(observed_seconds / expected_seconds);
  std::lock_guard<std::mutex> lock(mu_);
  double shared = log_shared_.load(std::memory_order_relaxed);
  double own = log_profile_[profile].load(std::memory_order_relaxed);
  if (count_[profile].load(std::memory_order_relaxed) == 0) {
    own = r - shared;  // first sighting: the offset is the profile's own
  } else {
    const double e = r - shared - own;
    shared += std::fabs(e) > options_.change_log ? e : options_.shared_alpha * e;
    own += options_.profile_alpha * (r - shared - own);
  }
  log_shared_.store(shared, std::memory_order_relaxed);
  log_profile_[profile].store(own, std::memory_order_relaxed);
  count_[profile].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kvserve::controller_internal
