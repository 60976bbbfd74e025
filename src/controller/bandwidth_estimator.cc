// Copyright kvserve authors. Per-peer goodput estimation with change
// detection; see kvserve/controller.h.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kvserve/controller.h"

namespace kvserve {

namespace {
// Samples a level must hold before a change to a new one restores the
// spread from before the step.
constexpr int64_t kSettledSamples = 4;
}  // namespace

struct BandwidthEstimator::State {
  struct Peer {
    double seconds_per_byte = 0.0;  // EWMA of 1/B
    double last_seconds = 0.0;      // clock of the last accepted sample
    int64_t samples = 0;
    double cusum_slower = 0.0;      // upward CUSUM of z (bandwidth fell)
    double cusum_faster = 0.0;      // downward CUSUM of z (bandwidth rose)
    double log_variance = 0.0;      // EWMA of clipped z^2
    double quiet_log_variance = 0.0;  // log_variance after the last sample within 3 sigma
    int64_t level_samples = 0;        // samples since the last detected change
    int64_t changes = 0;
    double last_change_seconds = -kInfinity;
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
  const double min_variance = options_.min_log_sigma * options_.min_log_sigma;
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Peer& p = state_->peers[std::string(peer)];
  // A transfer that began before the last detected change measured (mostly)
  // the old level: it arrives late, not new.
  if (now_seconds - wire_seconds < p.last_change_seconds) return Status::Ok();
  if (p.samples == 0) {
    p.seconds_per_byte = sample;  // the first measurement replaces the prior
    p.log_variance = options_.initial_log_sigma * options_.initial_log_sigma;
    p.quiet_log_variance = p.log_variance;
  } else {
    const double z = std::log(sample / p.seconds_per_byte);
    const double variance = std::max(p.log_variance, min_variance);
    bool changed = false;
    if (options_.change_threshold > 0.0) {
      const double standard = z / std::sqrt(variance);
      p.cusum_slower = std::max(0.0, p.cusum_slower + standard - options_.change_drift);
      p.cusum_faster = std::max(0.0, p.cusum_faster - standard - options_.change_drift);
      changed = p.cusum_slower > options_.change_threshold ||
                p.cusum_faster > options_.change_threshold;
    }
    p.log_variance = (1.0 - options_.spread_alpha) * variance +
                     options_.spread_alpha * std::min(z * z, 9.0 * variance);
    // The spread as of the last sample within 3 sigma: what it was before
    // the outliers that may be a step.
    if (z * z <= 9.0 * variance) p.quiet_log_variance = p.log_variance;
    if (changed) {
      // A new level: the newest sample is the only one that belongs to it.
      // The change happened at the latest when this transfer began. A level that held for a while ended in a step: the samples that
      // revealed the step are not noise, so the spread is what it was
      // before them. Changes in quick succession are noise after all and
      // keep the spread they grew.
      p.seconds_per_byte = sample;
      if (p.level_samples >= kSettledSamples) p.log_variance = p.quiet_log_variance;
      p.level_samples = 0;
      p.cusum_slower = p.cusum_faster = 0.0;
      ++p.changes;
      p.last_change_seconds = now_seconds - wire_seconds;
    } else {
      const double gap = std::max(0.0, now_seconds - p.last_seconds);
      double keep = 1.0 - options_.alpha;
      if (options_.idle_time_constant_seconds > 0.0) {
        keep *= std::exp(-gap / options_.idle_time_constant_seconds);
      }
      p.seconds_per_byte = keep * p.seconds_per_byte + (1.0 - keep) * sample;
    }
  }
  p.last_seconds = std::max(p.last_seconds, now_seconds);
  ++p.samples;
  ++p.level_samples;
  return Status::Ok();
}

double BandwidthEstimator::Estimate(std::string_view peer) const {
  return Query(peer).bytes_per_second;
}

BandwidthEstimate BandwidthEstimator::Query(std::string_view peer) const {
  BandwidthEstimate e;
  e.bytes_per_second = options_.prior_bytes_per_second;
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->peers.find(std::string(peer));
  if (it == state_->peers.end() || it->second.samples == 0) return e;
  const State::Peer& p = it->second;
  e.bytes_per_second = 1.0 / p.seconds_per_byte;
  e.log_sigma = std::sqrt(std::max(p.log_variance, options_.min_log_sigma * options_.min_log_sigma));
  e.samples = p.samples;
  e.changes = p.changes;
  e.last_change_seconds = p.last_change_seconds;
  return e;
}

int64_t BandwidthEstimator::SampleCount(std::string_view peer) const {
  return Query(peer).samples;
}

}  // namespace kvserve
