// Copyright kvserve authors. The M decode workers one prefill worker sends KV
// to (N x M serving, docs/scale.md): a connection to each, dialled on first
// use; the choice per request; back-off after a failure. Internal to
// src/serve.
#ifndef KVSERVE_SERVE_DECODE_PEERS_H_
#define KVSERVE_SERVE_DECODE_PEERS_H_

#include <memory>
#include <string>
#include <vector>

#include "kvserve/controller.h"
#include "kvserve/transport.h"

namespace kvserve::serve {

// Each peer has its own bandwidth estimate (in the prefill worker's
// BandwidthEstimator, keyed by the peer's address: workers may share an id)
// and a smoothed generation time (its load as this prefill worker sees it).
// Thread safety: none (the prefill worker serves one request at a time).
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
  // The current peer's connection, dialled with `options` (goodput samples
  // go to the estimator under the peer's key) if there is none. A failed
  // dial makes the peer back off and the next one current; the error names
  // the address.
  Result<Connection*> Current(const ConnectionOptions& options);
  // After a failure on the current connection: closes it, the peer backs
  // off, the next peer becomes current (a retry goes there).
  void DropCurrent();
  // Closes every connection (e.g. after a link-rate change).
  void CloseAll();
  // Feeds the current peer's generation time into its load estimate.
  void ObserveGeneration(double seconds);

  // The estimator key (address) of the current peer.
  const std::string& current_key() const;
  size_t size() const { return peers_.size(); }
  // How long a peer that failed is passed over.
  static constexpr double kBackoffSeconds = 2.0;

 private:
  struct Peer {
    std::string address;
    std::unique_ptr<Connection> connection;
    double generation_seconds = 0;  // EWMA, 0 before the first result
    double backoff_until = 0;
  };
  void Fail(Peer& peer);
  Transport* transport_;
  BandwidthEstimator* estimator_;
  std::vector<Peer> peers_;
  size_t current_ = 0;
};

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_DECODE_PEERS_H_
