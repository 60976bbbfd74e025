// Copyright kvserve authors. Codec-speed drift learned from the codec time
// the transport reports per request, internal to the controller.
//
// Model: a request of V bytes served with profile p spends
//   codec_seconds = D * m_p * (t0_p + V/s_enc + V/s_dec)        (table values)
// in encode + decode compute, where D is a drift shared by every profile
// (GPU load, clocks, contention: it moves all codecs together) and m_p the
// profile's own offline-to-online mismatch. Both are kept in log space.
//   - The first observation of a profile sets m_p (its offset from D).
//   - Later ones: e = log(observed / expected); if |e| > change_log the
//     codecs changed speed together and D takes the whole step at once;
//     otherwise D moves by shared_alpha * e and m_p by profile_alpha times
//     what is left.
// Because D scales t0 and both codec throughputs alike, the latency of every
// profile under drift D is D * T_table(V, B * D) for the serial and the
// streamed model, so the controller can query its table envelope at B * D.
#ifndef KVSERVE_SRC_CONTROLLER_CODEC_DRIFT_H_
#define KVSERVE_SRC_CONTROLLER_CODEC_DRIFT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace kvserve::controller_internal {

struct CodecDriftOptions {
  double shared_alpha = 0.3;
  double profile_alpha = 0.1;
  double change_log = 0.15;  // a jump of more than 16% is a shared step
};

// Thread safety: thread-safe. Reads (Shared, Factor) are lock-free; updates
// are serialised by a mutex.
class CodecDrift {
 public:
  // `profiles` bounds the profile indices; index 0 (raw) has no codec.
  CodecDrift(int profiles, CodecDriftOptions options);

  // D: the shared drift factor (1 before any observation).
  double Shared() const;
  // D * m_p: the factor to apply to profile p's table codec time (1 for raw
  // and out-of-range indices).
  double Factor(int profile) const;
  // Number of observations of `profile`.
  int64_t Count(int profile) const;
  // Records one request: `expected_seconds` is the table's codec time
  // t0 + V/s_enc + V/s_dec, `observed_seconds` what the transport measured.
  // Ignored for raw, out-of-range profiles and non-positive times.
  void Observe(int profile, double expected_seconds, double observed_seconds);

 private:
  CodecDriftOptions options_;
  int profiles_;
  std::mutex mu_;
  std::atomic<double> log_shared_{0.0};
  std::unique_ptr<std::atomic<double>[]> log_profile_;
  std::unique_ptr<std::atomic<int64_t>[]> count_;
};

}  // namespace kvserve::controller_internal

#endif  // KVSERVE_SRC_CONTROLLER_CODEC_DRIFT_H_
