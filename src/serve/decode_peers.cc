// Copyright kvserve authors. Choosing among a prefill worker's decode
// workers.
#include "serve/decode_peers.h"

#include <limits>

namespace kvserve::serve {

DecodePeers::DecodePeers(Transport* transport, std::vector<std::string> addresses,
                         BandwidthEstimator* estimator)
    : transport_(transport), estimator_(estimator) {
  for (auto& a : addresses) {
    Peer p;
    p.address = std::move(a);
    peers_.push_back(std::move(p));
  }
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

bool DecodePeers::CanAcquire(int max_leased) const { return peers_[current_].leased < max_leased; }

Status DecodePeers::Acquire(const ConnectionOptions& options, DecodeLease* lease) {
  if (lease->connection) return Status::Ok();
  Peer& p = peers_[current_];
  lease->peer = static_cast<int>(current_);
  lease->epoch = epoch_;
  if (!p.idle.empty()) {
    lease->connection = std::move(p.idle.back());
    p.idle.pop_back();
    ++p.leased;
    return Status::Ok();
  }
  ConnectionOptions o = options;
  o.goodput = [estimator = estimator_, key = p.address](std::string_view, double bytes,
                                                       double seconds) {
    (void)estimator->Observe(key, bytes, seconds, MonotonicSeconds());
  };
  auto c = Connection::Dial(*transport_, p.address, o);
  if (!c.ok()) {
    const std::string address = p.address;
    Backoff(current_);
    return c.status().WithContext("decode worker " + address);
  }
  lease->connection = std::move(*c);
  ++p.leased;
  return Status::Ok();
}

void DecodePeers::Release(DecodeLease* lease) {
  if (!lease->connection) return;
  Peer& p = peers_[static_cast<size_t>(lease->peer)];
  --p.leased;
  if (lease->epoch == epoch_ && p.idle.size() < kMaxIdle) {
    p.idle.push_back(std::move(lease->connection));
  } else {
    lease->connection->Close();
    lease->connection.reset();
  }
}

void DecodePeers::Drop(DecodeLease* lease) {
  if (!lease->connection) return;
  lease->connection->Close();
  lease->connection.reset();
  const auto peer = static_cast<size_t>(lease->peer);
  --peers_[peer].leased;
  // Its idle connections go to the same peer, which just failed.
  for (auto& c : peers_[peer].idle) c->Close();
  peers_[peer].idle.clear();
  Backoff(peer);
}

void DecodePeers::Backoff(size_t peer) {
  if (peers_.size() > 1) peers_[peer].backoff_until = MonotonicSeconds() + kBackoffSeconds;
  if (peer == current_) current_ = (current_ + 1) % peers_.size();
}

void DecodePeers::CloseAll() {
  ++epoch_;
  for (Peer& p : peers_) {
    for (auto& c : p.idle) c->Close();
    p.idle.clear();
  }
}

void DecodePeers::ObserveGeneration(int peer, double seconds) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.generation_seconds =
      p.generation_seconds == 0 ? seconds : 0.7 * p.generation_seconds + 0.3 * seconds;
}

}  // namespace kvserve::serve
