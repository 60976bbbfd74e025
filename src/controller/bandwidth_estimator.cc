// Copyright kvserve authors. Per-peer goodput estimation; see
// kvserve/controller.h.
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kvserve/controller.h"

namespace kvserve {

struct BandwidthEstimator::State {
  struct Peer {
    double seconds_per_byte = 0.0;  // EWMA of 1/B
    double last_seconds = 0.0;      // clock of the last accepted sample
    int64_t samples = 0;
    int jump_count = 0;       // consecutive samples beyond jump_ratio
    int jump_direction = 0;   // +1 slower, -1 faster than the estimate
    double jump_sum = 0.0;    // their sum (seconds per byte)
  };
  mutable std::mutex mu;
  std::unordered_map<std::string, Peer> peers;
};

BandwidthEstimator::BandwidthEstimator(BandwidthEstimatorOptions options)
    : options_(options), state_(std::make_unique<State>()) {}

BandwidthEstimator::~BandwidthEstimator() = default;

Status BandwidthEstimator::Observe(std::string_view peer, double wire_bytes,
                                   double wire_seconds, double now_seconds) {
  if (!(wire_bytes > 0.0) || !std::isfinite(wire_bytes) ||
      !(wire_seconds > 0.0) || !std::isfinite(wire_seconds) ||
      !std::isfinite(now_seconds)) {
    return Status::InvalidArgument("goodput sample needs finite bytes, seconds > 0");
  }
  if (wire_seconds < options_.min_sample_seconds) return Status::Ok();
  const double sample = wire_seconds / wire_bytes;
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Peer& p = state_->peers[std::string(peer)];
  if (p.samples == 0) {
    p.seconds_per_byte = sample;  // the first measurement replaces the prior
  } else {
    const double gap = std::max(0.0, now_seconds - p.last_seconds);
    double keep = 1.0 - options_.alpha;
    if (options_.idle_time_constant_seconds > 0.0) {
      keep *= std::exp(-gap / options_.idle_time_constant_seconds);
    }
    const double ratio = sample / p.seconds_per_byte;
    const int direction = options_.jump_ratio > 1.0
                              ? (ratio > options_.jump_ratio
                                     ? 1
                                     : (ratio < 1.0 / options_.jump_ratio ? -1 : 0))
                              : 0;
    if (direction != 0 && direction == p.jump_direction) {
      ++p.jump_count;
      p.jump_sum += sample;
    } else {
      p.jump_direction = direction;
      p.jump_count = direction != 0 ? 1 : 0;
      p.jump_sum = direction != 0 ? sample : 0.0;
    }
    if (direction != 0 && p.jump_count >= std::max(options_.jump_samples, 1)) {
      p.seconds_per_byte = p.jump_sum / p.jump_count;
      p.jump_count = 0;
      p.jump_direction = 0;
      p.jump_sum = 0.0;
    } else {
      p.seconds_per_byte = keep * p.seconds_per_byte + (1.0 - keep) * sample;
    }
  }
  p.last_seconds = now_seconds;
  ++p.samples;
  return Status::Ok();
}

double BandwidthEstimator::Estimate(std::string_view peer) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->peers.find(std::string(peer));
  if (it == state_->peers.end() || it->second.samples == 0) {
    return options_.prior_bytes_per_second;
  }
  return 1.0 / it->second.seconds_per_byte;
}

int64_t BandwidthEstimator::SampleCount(std::string_view peer) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->peers.find(std::string(peer));
  return it == state_->peers.end() ? 0 : it->second.samples;
}

}  // namespace kvserve
