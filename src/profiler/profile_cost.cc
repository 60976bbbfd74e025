// Copyright kvserve authors. MeasureProfileCost: the one timed encode/decode
// (kvserve/profiler.h, timed by kvserve/timing.h's FastestSeconds), shared by
// the profiler, the e2e calibration and the lab's benches and eval.
#include <algorithm>
#include <string>

#include "kvserve/profiler.h"
#include "kvserve/timing.h"

namespace kvserve {
namespace {

// Best-of-`repeats` encode and decode seconds of `kv`, the frame in `*frame`
// and the output in `*out` (both reused across runs).
Status TimeRoundTrip(EncoderContext& encoder, DecoderContext& decoder, const KvView& kv,
                     int repeats, const std::function<void(const std::string&)>& progress,
                     std::vector<uint8_t>* frame, KvCache* out, std::vector<uint8_t>* keep_mask,
                     double* encode_seconds, double* decode_seconds) {
  auto announce = [&](const char* phase, int r) {
    if (progress)
      progress(std::string(phase) + " " + std::to_string(r + 1) + "/" + std::to_string(repeats));
  };
  KVSERVE_ASSIGN_OR_RETURN(*encode_seconds,
                           FastestSeconds(
                               repeats,
                               [&](int) {
                                 VectorSink sink(frame);
                                 return encoder.Encode(kv, sink);
                               },
                               [&](int r) {
                                 announce("encode", r);
                                 frame->clear();
                               }));
  const MutableKvView target = out->mutable_view();
  KVSERVE_ASSIGN_OR_RETURN(
      *decode_seconds,
      FastestSeconds(
          repeats, [&](int) { return decoder.Decode(*frame, target, keep_mask); },
          [&](int r) { announce("decode", r); }));
  return Status::Ok();
}

}  // namespace

Result<ProfileCostMeasurement> MeasureProfileCost(const Profile& profile, const KvView& kv,
                                                  const ProfileCostOptions& options) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  if (options.repeats < 1) return Status::InvalidArgument("repeats must be >= 1");
  KVSERVE_ASSIGN_OR_RETURN(
      auto encoder, EncoderContext::Create(
                        profile, {.threads = options.threads, .head_scores = options.head_scores}));
  KVSERVE_ASSIGN_OR_RETURN(auto decoder, DecoderContext::Create({.threads = options.threads}));
  ProfileCostMeasurement m;
  m.input_bytes = static_cast<uint64_t>(kv.LogicalBytes());
  m.frame.reserve(m.input_bytes + (1 << 20));
  m.decoded = KvCache(kv.dtype, kv.shape);
  KVSERVE_RETURN_IF_ERROR(TimeRoundTrip(
      *encoder, *decoder, kv, options.repeats, options.progress, &m.frame, &m.decoded,
      options.keep_output ? &m.keep_mask : nullptr, &m.encode_seconds, &m.decode_seconds));
  m.stats = encoder->stats();
  m.frame_bytes = m.frame.size();
  const double v = static_cast<double>(m.input_bytes);
  m.codec.compression_ratio = v / static_cast<double>(m.frame_bytes);
  m.codec.encode_bytes_per_second = v / std::max(m.encode_seconds, 1e-9);
  m.codec.decode_bytes_per_second = v / std::max(m.decode_seconds, 1e-9);
  if (options.measure_overhead) {
    // t0: what a 16-token request costs beyond its share of the throughput.
    KvView small = kv;
    small.shape.tokens = std::min<int32_t>(kv.shape.tokens, 16);
    std::vector<uint8_t> small_frame;
    KvCache small_out(small.dtype, small.shape);
    double small_encode = 0, small_decode = 0;
    KVSERVE_RETURN_IF_ERROR(TimeRoundTrip(*encoder, *decoder, small, options.repeats, nullptr,
                                          &small_frame, &small_out, nullptr, &small_encode,
                                          &small_decode));
    const double small_v = static_cast<double>(small.LogicalBytes());
    m.codec.overhead_seconds =
        std::max(0.0, small_encode + small_decode - small_v / m.codec.encode_bytes_per_second -
                          small_v / m.codec.decode_bytes_per_second);
  }
  if (!options.keep_output) {
    m.frame = {};
    m.decoded = KvCache();
  }
  return m;
}

}  // namespace kvserve
