// Copyright kvserve authors. Latency models and benefit thresholds.
//
// Serial (paper Eq. 1 with a fixed overhead):
//   T_p = t0_p + V/s_enc + V/s_dec + V/(B cr_p)
// Streamed: the KV moves layer by layer through three stages (encode, send,
// decode). With L equal layers the stage times are e = V/(L s_enc),
// n = V/(L B cr), d = V/(L s_dec); a permutation flow shop of L identical
// jobs finishes at e + n + d + (L-1) max(e, n, d): the first layer fills the
// pipe, then the bottleneck stage paces the remaining L-1 layers.
// With a source that produces one layer every s seconds in front (a prefill
// hook hands each layer off), the four-stage shop ends at L s + t0 + e + n +
// d + (L-1)(max(s, e, n, d) - s): the streamed model returns the part after
// the source's end.
#include <algorithm>
#include <cmath>

#include "kvserve/controller.h"

namespace kvserve {

double SerialSeconds(const ProfileCost& p, double kv_bytes, double bandwidth) {
  return p.overhead_seconds + kv_bytes * p.CodecSecondsPerByte() +
         kv_bytes / (bandwidth * p.compression_ratio);
}

double StreamedSeconds(const ProfileCost& p, double kv_bytes, double bandwidth,
                       int layers, double source_seconds) {
  const double l = static_cast<double>(std::max(layers, 1));
  const double per_layer = kv_bytes / l;
  const double s = std::max(source_seconds, 0.0) / l;
  const double e = per_layer / p.encode_bytes_per_second;
  const double n = per_layer / (bandwidth * p.compression_ratio);
  const double d = per_layer / p.decode_bytes_per_second;
  if (!p.streamed) {
    return p.overhead_seconds + e + (l - 1.0) * (std::max(s, e) - s) + l * (n + d);
  }
  return p.overhead_seconds + e + n + d + (l - 1.0) * (std::max({s, e, n, d}) - s);
}

double PredictSeconds(const LatencyModel& model, const ProfileCost& p,
                      double kv_bytes, double bandwidth, double source_seconds) {
  if (model.kind == LatencyModelKind::kStreamed) {
    return StreamedSeconds(p, kv_bytes, bandwidth, model.layers, source_seconds);
  }
  return SerialSeconds(p, kv_bytes, bandwidth);
}

double BenefitThreshold(const ProfileCost& p) {
  if (!(p.compression_ratio > 1.0)) return 0.0;
  const double g = p.CodecSecondsPerByte();
  const double gain = 1.0 - 1.0 / p.compression_ratio;
  if (g <= 0.0) return kInfinity;
  return gain / g;
}

// Works in x = 1/B (seconds per byte of raw transfer). f(x) = T_p(x)/V - x is
// convex, piecewise linear and strictly decreasing when cr > 1, so it has
// one root x*; compression pays iff x > x*, i.e. B < 1/x*.
double BenefitThresholdForSize(const LatencyModel& model, const ProfileCost& p,
                               double kv_bytes) {
  if (!(p.compression_ratio > 1.0)) return 0.0;
  const double b = 1.0 / p.compression_ratio;
  const double t0_per_byte =
      std::isinf(kv_bytes) ? 0.0 : p.overhead_seconds / kv_bytes;
  const double e = 1.0 / p.encode_bytes_per_second;
  const double d = 1.0 / p.decode_bytes_per_second;
  double root;
  if (model.kind == LatencyModelKind::kSerial || model.layers <= 1 || !p.streamed) {
    root = (t0_per_byte + e + d) / (1.0 - b);
  } else {
    const double l = static_cast<double>(model.layers);
    const double m = std::max(e, d);
    // Codec-bound piece (b x <= m): slope b/L - 1.
    const double codec_bound =
        (t0_per_byte + (e + d) / l + (l - 1.0) * m / l) / (1.0 - b / l);
    if (b * codec_bound <= m) {
      root = codec_bound;
    } else {
      // Network-bound piece (b x >= m): slope b - 1.
      root = (t0_per_byte + (e + d) / l) / (1.0 - b);
    }
  }
  if (root <= 0.0) return kInfinity;
  return 1.0 / root;
}

}  // namespace kvserve
