// Copyright kvserve authors. A token bucket for sender-side link emulation.
// Internal to src/transport (and its tests).
#ifndef KVSERVE_TRANSPORT_TOKEN_BUCKET_H_
#define KVSERVE_TRANSPORT_TOKEN_BUCKET_H_

#include <memory>

#include "kvserve/transport.h"

namespace kvserve::transport {

// Tokens (bytes) accrue at `rate` per second up to `burst`; sending n bytes
// takes n tokens, going into debt when short; the caller then waits
// debt/rate. Over any long run the average rate is at most `rate` and the
// excess above it at most `burst`. Starts full.
//
// Thread safety: thread-compatible (the Connection serialises sends).
class TokenBucket {
 public:
  // rate > 0 bytes/s, burst >= 1 bytes.
  TokenBucket(double rate_bytes_per_second, double burst_bytes);
  // Takes `bytes` tokens at time `now_seconds` (monotonic, non-decreasing)
  // and returns how long the caller must wait before sending them (>= 0).
  double Reserve(double bytes, double now_seconds);
  // From now on: tokens accrue at `rate` up to `burst` (the tokens held,
  // or the debt, carry over, capped at the new depth).
  void SetRate(double rate_bytes_per_second, double burst_bytes);
  double rate() const { return rate_; }
  double burst() const { return burst_; }

 private:
  double rate_, burst_, tokens_;
  double last_ = -1;
};

// Wraps `base` so every Write is paced by a token bucket of its own (a
// SharedLink no other stream holds; pieces of at most the burst size, 0 =
// SharedLink's default depth); `base` itself for a rate that is not
// positive. Read and Close pass through.
std::unique_ptr<Stream> NewShapedStream(std::unique_ptr<Stream> base, double rate_bytes_per_second,
                                        double burst_bytes);

// Wraps `base` so every Write is paced by `link`, which other streams may
// share (pieces of at most its depth). Read and Close pass through.
std::unique_ptr<Stream> NewSharedLinkStream(std::unique_ptr<Stream> base, std::shared_ptr<SharedLink> link);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_TOKEN_BUCKET_H_
