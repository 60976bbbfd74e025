// Copyright kvserve authors. The M decode workers one prefill worker sends KV
// to (N x M serving, docs/scale.md): a connection to each, dialled on first
// use; the choice per request; back-off after a failure. Internal to
// src/serve.
#ifndef KVSERVE_SERVE_DECODE_PEERS_H_
#define KVSERVE_SERVE_DECODE_PEERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/controller.h"
#include "kvserve/transport.h"

namespace kvserve::serve {

// A decode connection one request holds from its KV transfer to the decode
// worker's result: requests of one prefill worker overlap their wait for
// results (each on a connection of its own), while their prefills and
// transfers run one at a time.
struct DecodeLease {
  int peer = -1;  // index of the decode worker (kept after Release)
  std::unique_ptr<Connection> connection;
  uint64_t epoch = 0;  // DecodePeers' epoch when dialled or taken
};

// Each peer has its own bandwidth estimate (in the prefill worker's
// BandwidthEstimator, keyed by the peer's address: workers may share an id)
// and a smoothed generation time (its load as this prefill worker sees it).
// Thread safety: none (the prefill worker calls it under its lock).
class DecodePeers {
 public:
  // `transport` and `estimator` are not owned and must outlive this.
  DecodePeers(Transport* transport, std::vector<std::string> addresses,
              BandwidthEstimator* estimator);
  ~DecodePeers();

  // Picks the peer for a request moving `kv_bytes`: least kv_bytes /
  // bandwidth estimate + smoothed generation seconds among the peers not
  // backing off (a peer never measured counts as the harmonic mean of the
  // measured ones, the estimator's prior while none is); when every peer
  // backs off, the one free soonest.
  void Choose(double kv_bytes);
  // True when the current peer has fewer than `max_leased` connections
  // out on leases (a request may then Acquire one without waiting).
  bool CanAcquire(int max_leased) const;
  // Fills `lease` (when it holds no connection) with a connection to the
  // current peer: an idle one, else one dialled with `options` (goodput
  // samples go to the estimator under the peer's key). A failed dial makes
  // the peer back off and the next one current; the error names the address.
  Status Acquire(const ConnectionOptions& options, DecodeLease* lease);
  // Gives the lease's connection back for later requests (closed instead
  // when CloseAll ran since it was taken). No-op for an empty lease.
  void Release(DecodeLease* lease);
  // After a failure on the lease's connection: closes it, its peer backs
  // off, and if it is current the next peer becomes current (a retry goes
  // there). No-op for an empty lease.
  void Drop(DecodeLease* lease);
  // Closes every idle connection; leased ones are closed when given back
  // (e.g. after a link-rate change: later requests dial anew).
  void CloseAll();
  // Feeds peer `peer`'s generation time into its load estimate.
  void ObserveGeneration(int peer, double seconds);

  // The estimator key (address) of peer `peer`, and of the current peer.
  const std::string& key(int peer) const { return peers_[static_cast<size_t>(peer)].address; }
  const std::string& current_key() const { return peers_[current_].address; }
  int current() const { return static_cast<int>(current_); }
  size_t size() const { return peers_.size(); }
  // Idle connections kept per peer; more are closed when given back.
  static constexpr size_t kMaxIdle = 16;
  // How long a peer that failed is passed over.
  static constexpr double kBackoffSeconds = 2.0;

 private:
  struct Peer {
    std::string address;
    std::vector<std::unique_ptr<Connection>> idle;
    int leased = 0;                 // connections out on leases
    double generation_seconds = 0;  // EWMA, 0 before the first result
    double backoff_until = 0;
  };
  void Backoff(size_t peer);
  Transport* transport_;
  BandwidthEstimator* estimator_;
  std::vector<Peer> peers_;
  size_t current_ = 0;
  uint64_t epoch_ = 0;  // advanced by CloseAll
};

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_DECODE_PEERS_H_
