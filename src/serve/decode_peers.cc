// Copyright kvserve authors. Choosing among a prefill worker's decode
// workers.
#include "serve/decode_peers.h"

#include <limits>

namespace kvserve::serve {

DecodePeers::DecodePeers(Transport* transport, std::vector<std::string> addresses,
                         BandwidthEstimator* estimator)
    : transport_(transport), estimator_(estimator) {
  for (auto& a : addresses) peers_.push_back(Peer{std::move(a), nullptr, 0, 0});
}

DecodePeers::~DecodePeers() { CloseAll(); }

void DecodePeers::Choose(double kv_bytes) {
  if (peers_.size() < 2) return;
  const double now = MonotonicSeconds();
  size_t best = current_;
  double best_seconds = std::numeric_limits<double>::infinity();
  size_t soonest = current_;
  double soonest_at = std::numeric_limits<double>::infinity();
  // A peer never measured is taken to be like the measured ones (their
  // harmonic mean), not like the estimator's prior: with many peers the
  // prior's optimism would send request after request to unknown links.
  double inverse_sum = 0;
  int known = 0;
  for (const Peer& p : peers_)
    if (estimator_->SampleCount(p.address) > 0) {
      inverse_sum += 1 / estimator_->Estimate(p.address);
      ++known;
    }
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    if (p.backoff_until > now) {
      if (p.backoff_until < soonest_at) {
        soonest_at = p.backoff_until;
        soonest = i;
      }
      continue;
    }
    const double bandwidth = estimator_->SampleCount(p.address) > 0 || known == 0
                                 ? estimator_->Estimate(p.address)
                                 : known / inverse_sum;
    const double seconds = kv_bytes / bandwidth + p.generation_seconds;
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = i;
    }
  }
  current_ = best_seconds < std::numeric_limits<double>::infinity() ? best : soonest;
}

Result<Connection*> DecodePeers::Current(const ConnectionOptions& options) {
  Peer& p = peers_[current_];
  if (p.connection) return p.connection.get();
  ConnectionOptions o = options;
  o.goodput = [estimator = estimator_, key = p.address](std::string_view, double bytes,
                                                       double seconds) {
    (void)estimator->Observe(key, bytes, seconds, MonotonicSeconds());
  };
  auto c = Connection::Dial(*transport_, p.address, o);
  if (!c.ok()) {
    const std::string address = p.address;
    Fail(p);
    return c.status().WithContext("decode worker " + address);
  }
  p.connection = std::move(*c);
  return p.connection.get();
}

void DecodePeers::DropCurrent() { Fail(peers_[current_]); }

void DecodePeers::Fail(Peer& p) {
  if (p.connection) p.connection->Close();
  p.connection.reset();
  if (peers_.size() > 1) p.backoff_until = MonotonicSeconds() + kBackoffSeconds;
  current_ = (current_ + 1) % peers_.size();
}

void DecodePeers::CloseAll() {
  for (Peer& p : peers_) {
    if (p.connection) p.connection->Close();
    p.connection.reset();
  }
}

void DecodePeers::ObserveGeneration(double seconds) {
  Peer& p = peers_[current_];
  p.generation_seconds =
      p.generation_seconds == 0 ? seconds : 0.7 * p.generation_seconds + 0.3 * seconds;
}

const std::string& DecodePeers::current_key() const { return peers_[current_].address; }

}  // namespace kvserve::serve
