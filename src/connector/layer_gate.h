// Copyright kvserve authors. The layers of a cache a producer fills in
// order, as the connector's encoders wait for them (host: kv_streamer.cc;
// device: src/cuda/device_connector.cc). Internal.
#ifndef KVSERVE_CONNECTOR_LAYER_GATE_H_
#define KVSERVE_CONNECTOR_LAYER_GATE_H_

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <vector>

#include "kvserve/transport.h"  // MonotonicSeconds

namespace kvserve::connector {

// The encoder waits for layer l to be ready (with what the producer handed
// over with it, `Payload`: a device layer's view and event), and for the
// producer's success before ending the frame; the producer marks layers
// ready, then itself done, or fails. Thread-safe.
template <typename Payload>
class LayerGate {
 public:
  explicit LayerGate(int layers = 0) : payloads_(layers) {}

  // True once `layer` is ready (`layers`: once the producer is done), with
  // its payload in `*payload` (when non-null and one was handed over);
  // false when the producer failed. Waiting time adds to wait_seconds().
  bool Wait(int layer, Payload* payload = nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    if (ready_ <= layer && !failed_) {
      const double wait_start = MonotonicSeconds();
      cv_.wait(lock, [&] { return ready_ > layer || failed_; });
      wait_seconds_ += MonotonicSeconds() - wait_start;
    }
    if (ready_ <= layer) return false;
    if (payload != nullptr && layer < static_cast<int>(payloads_.size())) *payload = payloads_[layer];
    return true;
  }
  // Layers [0, layers) are ready.
  void MarkReady(int layers) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = std::max(ready_, layers);
    cv_.notify_all();
  }
  // Layer `layer` (the next one) is ready with `payload`.
  void MarkReady(int layer, Payload payload) {
    std::lock_guard<std::mutex> lock(mu_);
    payloads_[layer] = std::move(payload);
    ready_ = std::max(ready_, layer + 1);
    cv_.notify_all();
  }
  // The producer returned successfully: every Wait, also Wait(layers) (the
  // "producer done" gate), returns true. `at_seconds` (MonotonicSeconds())
  // is when it finished, if the caller knows (done_at() then returns it).
  void MarkDone(double at_seconds = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_at_ = at_seconds;
    }
    MarkReady(std::numeric_limits<int>::max());
  }
  double done_at() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_at_;
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    cv_.notify_all();
  }
  double wait_seconds() {
    std::lock_guard<std::mutex> lock(mu_);
    return wait_seconds_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Payload> payloads_;
  int ready_ = 0;
  bool failed_ = false;
  double wait_seconds_ = 0;
  double done_at_ = 0;
};

}  // namespace kvserve::connector

#endif  // KVSERVE_CONNECTOR_LAYER_GATE_H_
