// Copyright kvserve authors. The service-aware online controller (paper §3,
// §6): for each request it picks the compression profile that minimises the
// KV-movement completion time under the request's latency SLO and quality
// floor, at the bandwidth measured right now, and picks no compression when
// that is faster.
//
// Parts, each in its own file under src/controller/:
//   ProfileTable        profile rows (CR, codec throughputs, fixed overhead,
//                       quality per workload) loaded from JSON.
//   latency model       serial (paper Eq. 1 plus t0) and streamed (layer-wise
//                       encode/send/decode pipeline) completion times, and
//                       benefit thresholds B* (Theorem 6.1).
//   envelope            the exact lower envelope (Theorem 6.2) per
//                       (workload, quality floor), queried in O(log n).
//   bandit              residual-corrected epsilon-greedy selection among 2-3
//                       envelope neighbours with SLO guardrail and cool-down.
//   codec drift         codec-speed drift learned from reported codec times.
//   BandwidthEstimator  per-peer goodput EWMA with change detection and a
//                       spread estimate, fed by the transport.
//   Controller          ties them together; one Decide() per request.
//   Simulate            trace-driven comparison of policies (paper Fig. 16).
//
// Units: bytes, seconds and bytes per second everywhere in this API. Gbps
// appears only in CLI output (1 Gbps = 1e9 bit/s = 1.25e8 bytes/s); use
// GbpsToBytesPerSecond / BytesPerSecondToGbps at the edges.
//
// docs/controller.md describes the design, the JSON format and the measured
// numbers.
#ifndef KVSERVE_CONTROLLER_H_
#define KVSERVE_CONTROLLER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"

namespace kvserve {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// 1 Gbps = 1e9 bit/s = 1.25e8 bytes/s.
constexpr double GbpsToBytesPerSecond(double gbps) { return gbps * 1.25e8; }
constexpr double BytesPerSecondToGbps(double bytes_per_second) {
  return bytes_per_second / 1.25e8;
}

// ---------------------------------------------------------------------------
// Profile table.

// One selectable profile as the offline profiler measured it.
struct ProfileCost {
  // Canonical profile spec string (kvserve/profile.h) or preset name; the
  // controller treats it as an opaque name.
  std::string spec;
  // cr = V / V_p, counting every byte on the wire. > 0; profiles with
  // cr <= 1 never beat raw and are never selected.
  double compression_ratio = 1.0;
  // Throughput over uncompressed bytes, bytes/s, > 0 (may be +inf).
  double encode_bytes_per_second = kInfinity;
  double decode_bytes_per_second = kInfinity;
  // Fixed per-request overhead t0_p (kernel launches, metadata), seconds, >= 0.
  double overhead_seconds = 0.0;
  // Whether each layer's records can leave as soon as that layer is encoded
  // (the streamed model's assumption). False for a codec whose frame exists
  // only once every layer is encoded (a GPU rANS frame: its size is known at
  // the end): the streamed model then overlaps its encode alone with the
  // source, and sends and decodes the whole frame after it. The serial model
  // ignores it. JSON key "streamed" (written only when false).
  bool streamed = true;
  // Quality q_p(w) per workload name, relative to uncompressed (raw = 1).
  // A workload absent from the map makes the profile ineligible for it.
  std::map<std::string, double, std::less<>> quality;

  // 1/s_p = 1/s_enc + 1/s_dec: round-trip codec seconds per byte. (The
  // paper calls s_p a harmonic mean; it is half of one.)
  double CodecSecondsPerByte() const {
    return 1.0 / encode_bytes_per_second + 1.0 / decode_bytes_per_second;
  }
};

// An immutable set of profiles. Index 0 is always raw (no compression: spec
// "none", cr 1, infinite codec throughput, t0 0, quality 1 for every
// workload); rows of the JSON file follow at indices 1..n in file order.
//
// JSON format (docs/controller.md §Profile table), all units SI:
//   {"format": "kvserve-profile-table", "version": 1,
//    "workloads": ["chat", ...],                       (optional)
//    "profiles": [{"spec": "...", "compression_ratio": 6.1,
//                  "encode_bytes_per_second": 6e9,
//                  "decode_bytes_per_second": 1e10,
//                  "overhead_seconds": 0.0008,
//                  "quality": {"chat": 0.97, ...}}, ...]}
//
// Thread safety: immutable after construction; safe to share.
class ProfileTable {
 public:
  static constexpr int kRaw = 0;

  // Builds a table from rows (raw is prepended). InvalidArgument when a row
  // has a non-positive CR or throughput, a negative or non-finite overhead,
  // a non-finite quality, an empty or duplicate spec, or the spec "none".
  static Result<ProfileTable> FromRows(std::vector<ProfileCost> rows);
  // As FromRows, with an explicit workload list (empty: derive it). Rows may
  // name any workloads; qualities for unlisted ones are kept in the rows
  // but never consulted.
  static Result<ProfileTable> FromRowsAndWorkloads(
      std::vector<ProfileCost> rows, std::vector<std::string> workloads);
  // Parses the JSON format above. Corruption for malformed JSON or missing
  // or mistyped fields; InvalidArgument as for FromRows.
  static Result<ProfileTable> FromJson(std::string_view json);
  // Reads and parses a file. IOError when it cannot be read.
  static Result<ProfileTable> Load(const std::string& path);
  // Serialises to the JSON format (raw is not written). Round-trips.
  std::string ToJson() const;

  // All profiles, raw first.
  const std::vector<ProfileCost>& profiles() const { return profiles_; }
  int size() const { return static_cast<int>(profiles_.size()); }
  const ProfileCost& profile(int index) const { return profiles_[index]; }
  // Workload names: the file's "workloads" list, else the union of quality
  // keys, sorted.
  const std::vector<std::string>& workloads() const { return workloads_; }
  // Index of a workload name; NotFound if unknown.
  Result<int> WorkloadIndex(std::string_view name) const;
  // q_p(w) of profile `index` for workload `workload` (an index into
  // workloads()); -inf when the profile has no measurement for it; 1 for raw.
  double Quality(int index, int workload) const;

 private:
  std::vector<ProfileCost> profiles_;
  std::vector<std::string> workloads_;
  std::vector<double> quality_;  // [profile * workloads + workload]
};

// ---------------------------------------------------------------------------
// Latency model. All functions return the KV-movement time only, i.e. T_p
// minus the profile-independent T_model(w). `kv_bytes` V > 0 is the
// uncompressed KV size, `bandwidth` B > 0 the effective goodput in bytes/s.

enum class LatencyModelKind : uint8_t {
  // Paper Eq. 1 plus t0: encode all, then send all, then decode all.
  kSerial = 0,
  // Layer-wise pipeline: L equal layers flow through encode -> send ->
  // decode, the three stages overlapping across layers.
  kStreamed = 1,
};

struct LatencyModel {
  LatencyModelKind kind = LatencyModelKind::kSerial;
  int layers = 32;  // L >= 1, used by kStreamed only
};

// T = t0 + V/s_enc + V/s_dec + V/(B cr). Raw (index 0): V/B.
double SerialSeconds(const ProfileCost& p, double kv_bytes, double bandwidth);
// Flow shop of L identical jobs with stage times e = V/(L s_enc),
// n = V/(L B cr), d = V/(L s_dec):  T = t0 + e + n + d + (L-1) max(e, n, d).
// Equals SerialSeconds when L = 1; raw is V/B for every L.
//
// `source_seconds` S >= 0 is the time the source takes to produce the L
// layers (a prefill's forward pass, one layer every s = S/L): a fourth stage
// in front of the three. The result is then the time from the source's end
// to the last layer decoded, the part of the movement the source does not
// hide: t0 + e + n + d + (L-1) (max(s, e, n, d) - s). S = 0 gives the formula
// above; when the source is the slowest stage only one layer's worth is left.
// A profile with `streamed` false overlaps only its encode with the source:
// t0 + e + (L-1) (max(s, e) - s) + L (n + d).
double StreamedSeconds(const ProfileCost& p, double kv_bytes, double bandwidth,
                       int layers, double source_seconds = 0.0);
// Dispatches on `model.kind`; the serial model overlaps nothing with the
// source and ignores `source_seconds`.
double PredictSeconds(const LatencyModel& model, const ProfileCost& p,
                      double kv_bytes, double bandwidth, double source_seconds = 0.0);

// How long a prefill of n tokens takes, from the prefills a worker ran: the
// source time the streamed model overlaps the movement with, and the
// recompute time the pool path weighs a prefix hit against. The median of
// the last `keep` prefills of exactly n tokens; for a length not seen yet,
// the nearest seen length's median (nearest in log(n)) scaled by the token
// ratio (a prefill is at least linear in its tokens); before any, `prior`
// seconds per token. Thread safety: not thread-safe.
class PrefillTimePredictor {
 public:
  explicit PrefillTimePredictor(double prior_seconds_per_token = 0.0, int keep = 5);
  // Records one prefill of `tokens` tokens that took `seconds` (ignored
  // unless both are positive and finite).
  void Observe(int tokens, double seconds);
  // Seconds a prefill of `tokens` tokens is expected to take (0 for
  // tokens <= 0).
  double Predict(int tokens) const;
  // As Predict, except that a length shorter than the nearest seen one is
  // predicted that length's time rather than a share of it (the prior
  // still scales): for times with a part that does not shrink with the
  // tokens, such as a decode worker's first token after a prefix hit,
  // which waits for the worker's GPU before the rest of the prompt runs.
  double PredictNoLessThanNearest(int tokens) const;
  bool empty() const { return seen_.empty(); }

 private:
  double prior_;
  int keep_;
  std::map<int, std::vector<double>> seen_;  // tokens -> last `keep` times, oldest first
  double PredictScaled(int tokens, bool scale_down) const;
};

// Theorem 6.1: B*_p = (1 - 1/cr_p) s_p with s_p = 1/(1/s_enc + 1/s_dec),
// ignoring t0. Compression with p is faster than raw (serial model, t0 = 0)
// iff B < B*_p. 0 when cr <= 1; +inf when both codec speeds are infinite
// and cr > 1.
double BenefitThreshold(const ProfileCost& p);
// The exact threshold for request size V under `model`, including t0, with
// nothing overlapping a source (source_seconds 0):
// PredictSeconds(p, V, B) < V/B iff B < the returned value (0 if never).
// For the serial model (1 - 1/cr) / (t0/V + 1/s_p) <= BenefitThreshold(p).
double BenefitThresholdForSize(const LatencyModel& model, const ProfileCost& p,
                               double kv_bytes);

// ---------------------------------------------------------------------------
// Piecewise policy (Theorem 6.2), for inspection and the `kvserve policy` CLI.

struct PolicyInterval {
  // Bandwidth range [min, max) in bytes/s; max may be +inf.
  double min_bandwidth = 0.0;
  double max_bandwidth = kInfinity;
  int profile = ProfileTable::kRaw;
};

// The optimal profile as a function of bandwidth for one workload, quality
// floor and request size, ordered by increasing bandwidth. Only profiles with
// q_p(w) >= quality_min are considered; raw always is. kv_bytes = +inf means
// "t0 negligible" (the paper's size-independent policy). Adjacent intervals
// have different profiles. InvalidArgument for a bad workload index or size.
[[nodiscard]] Result<std::vector<PolicyInterval>> PiecewisePolicy(
    const ProfileTable& table, const LatencyModel& model, int workload,
    double quality_min, double kv_bytes);

// ---------------------------------------------------------------------------
// Bandwidth estimator.

struct BandwidthEstimatorOptions {
  // Estimate before any sample, bytes/s.
  double prior_bytes_per_second = GbpsToBytesPerSecond(10.0);
  // EWMA weight of a new sample when samples arrive back to back.
  double alpha = 0.3;
  // After an idle gap g, the old estimate's weight is further multiplied by
  // exp(-g / idle_time_constant_seconds): a sample after a long silence
  // mostly replaces the stale estimate.
  double idle_time_constant_seconds = 2.0;
  // Transfers shorter than this (seconds) are ignored: their goodput is
  // dominated by latency, not bandwidth.
  double min_sample_seconds = 1e-4;
  // Spread: the standard deviation sigma of log goodput around the
  // estimate (sample noise plus drift between samples), an EWMA of z^2 with
  // weight spread_alpha, where z = log(sample / estimate) in seconds per
  // byte and z^2 is clipped at (3 sigma)^2 so one outlier or step cannot
  // blow it up. It starts at initial_log_sigma with the first sample and is
  // never taken below min_log_sigma. A detected change of a level that held
  // for 4 samples or more takes the spread back to what it was after the
  // last sample within 3 sigma: the samples that revealed the step measured
  // the step, not noise (changes in quick succession keep what they grew).
  double initial_log_sigma = 0.1;
  double min_log_sigma = 0.01;
  double spread_alpha = 0.1;
  // Change detection: a two-sided CUSUM on z / sigma. Each sample adds
  // z/sigma - change_drift to the "slower" sum and -z/sigma - change_drift
  // to the "faster" one (both floored at 0); when one exceeds
  // change_threshold the link has changed level: the estimate is replaced by
  // the newest sample and both sums restart. With the defaults a step of
  // 8 sigma or more (2x at 5% noise) is tracked after one sample, 5 sigma
  // after two; noise alone almost never triggers it (drift 1.5 sigma).
  // change_threshold <= 0 disables detection (plain EWMA).
  double change_drift = 1.5;
  double change_threshold = 6.0;
};

// What a BandwidthEstimator knows about one peer.
struct BandwidthEstimate {
  double bytes_per_second = 0.0;  // point estimate (1 / EWMA of 1/B)
  // Spread sigma of log goodput samples around the estimate (noise plus
  // drift between samples; see BandwidthEstimatorOptions); +inf before the
  // first sample.
  double log_sigma = kInfinity;
  int64_t samples = 0;
  int64_t changes = 0;  // level changes detected so far
  // Start of the transfer that revealed the last change (-inf: none yet).
  double last_change_seconds = -kInfinity;
};

// Per-peer effective bandwidth from observed transfers (goodput = wire bytes
// / wire seconds). The EWMA runs over seconds-per-byte (1/B), not over B:
// latency is linear in 1/B, so averaging 1/B keeps the latency prediction
// unbiased. The first sample of a peer replaces the prior; a detected level
// change replaces the estimate (see change_threshold).
//
// Thread safety: thread-safe (internally locked).
class BandwidthEstimator {
 public:
  explicit BandwidthEstimator(BandwidthEstimatorOptions options = {});
  ~BandwidthEstimator();
  BandwidthEstimator(const BandwidthEstimator&) = delete;
  BandwidthEstimator& operator=(const BandwidthEstimator&) = delete;

  // Records a transfer of `wire_bytes` taking `wire_seconds`, finishing at
  // `now_seconds` (any monotonic clock; samples may arrive out of order).
  // InvalidArgument for non-positive or non-finite bytes or seconds. Short
  // transfers are accepted but ignored, and so are transfers that began
  // (now - wire_seconds) before the last detected change: they measured the
  // old level and only arrive late.
  [[nodiscard]] Status Observe(std::string_view peer, double wire_bytes,
                               double wire_seconds, double now_seconds);
  // Current estimate for `peer` in bytes/s; the prior for unknown peers.
  double Estimate(std::string_view peer) const;
  // The estimate with its uncertainty and change history. For a peer without
  // samples: the prior with log_sigma = +inf (nothing is known).
  BandwidthEstimate Query(std::string_view peer) const;
  // Number of samples that updated `peer`.
  int64_t SampleCount(std::string_view peer) const;

 private:
  struct State;
  BandwidthEstimatorOptions options_;
  std::unique_ptr<State> state_;
};

// ---------------------------------------------------------------------------
// Controller.

// What to do when no profile is predicted to meet the SLO.
enum class FallbackPolicy : uint8_t {
  kRaw = 0,               // send uncompressed
  kMostConservative = 1,  // the floor-feasible profile with the highest quality
  kRecompute = 2,         // KV-pool path: do not fetch, recompute prefill
  // The decision as if the SLO were met: the floor-feasible profile with the
  // least predicted time (through the bandit, the risk guard and raw as
  // ever), so the request misses its target by as little as the table
  // allows instead of going raw on a link too slow for any profile. Its
  // observations never count as SLO violations (the miss was foreseen).
  kFastest = 3,
};

struct ControllerOptions {
  LatencyModel model;
  FallbackPolicy fallback = FallbackPolicy::kRaw;
  // Residual-corrected bandit (paper §6.2). When false, Decide returns the
  // analytical optimum (the "no bandit" ablation).
  bool bandit = true;
  // Each decision that passes a bandit candidate over moves its residual
  // ratio (log scale) towards 1, the table's own prediction, by this
  // fraction divided by its use count: a profile shut out by one bad sample
  // (a hiccup, a transfer decided on a stale bandwidth) is tried again after
  // about 10 decisions, one with n consistently slow samples after about
  // 10 n. 0: residuals of unused candidates never change.
  double residual_relax = 0.2;
  double epsilon = 0.05;         // exploration probability
  // Exploration only tries candidates whose corrected latency is within this
  // fraction of the greedy choice's (bounds the cost of one exploration).
  double exploration_margin = 0.10;
  double residual_alpha = 0.25;  // EWMA weight of the newest residual
  int candidates = 3;            // 1..3: model optimum + envelope neighbours
  int cooldown_violations = 3;   // K
  int cooldown_window = 10;      // M, 1..64
  double cooldown_seconds = 10.0;
  uint64_t seed = 0x6b76736572766531ull;
  // Risk guard: a compressed profile is a candidate only if it also beats
  // raw at the pessimistic bandwidth B * exp(risk_sigmas * sigma_B), sigma_B
  // = ControllerRequest::bandwidth_log_sigma (high bandwidth is the
  // pessimistic side for compression: its gain shrinks). With sigma_B = +inf
  // (no measurement yet) only raw passes. 0 disables the guard.
  double risk_sigmas = 2.0;
  // With the bandit on, learn codec-speed drift from the codec time reported
  // in Observation::codec_seconds (a shared factor for all codecs plus a
  // per-profile mismatch) and predict with it. Off in the no-bandit
  // ablation, which uses the table as profiled.
  bool learn_codec_drift = true;
};

// One request's service context c = (w, B, T_SLO, q_min), plus V.
struct ControllerRequest {
  int workload = 0;                  // index into ProfileTable::workloads()
  double kv_bytes = 0.0;             // V > 0
  double bandwidth = 0.0;            // B > 0, bytes/s (from the estimator)
  double slo_seconds = kInfinity;    // T_SLO for T_model + KV movement
  double model_seconds = 0.0;        // T_model(w)
  double quality_min = 0.0;          // q_min
  double now_seconds = 0.0;          // monotonic clock (cool-down)
  // Uncertainty of `bandwidth`: standard deviation of log goodput
  // (BandwidthEstimate::log_sigma), >= 0, +inf when nothing was measured.
  // 0 (the default) trusts `bandwidth` exactly.
  double bandwidth_log_sigma = 0.0;
  // The frame size of each table profile for this request's shape, bytes,
  // indexed like ProfileTable::profiles() (PlanFrameSize knows it exactly for
  // the pack codec): a profile's compression ratio for this request is then
  // kv_bytes / frame_bytes[p] instead of the table's. Empty: the table's
  // ratios; an entry <= 0 (and raw's, always): that profile's table ratio.
  // Not owned; must stay valid during Decide.
  std::span<const double> frame_bytes;
  // How long the source takes to produce the KV that streams out layer by
  // layer while it runs (the prefill's forward pass, predicted), seconds,
  // finite and >= 0. With the streamed model the prediction is then the
  // movement left after the source ends (StreamedSeconds), which is what a
  // request waits for; feed Observe the same span (source end to the last
  // layer decoded). 0: nothing overlaps the source.
  double source_seconds = 0.0;
};

enum class ControllerAction : uint8_t { kSend = 0, kRecompute = 1 };

struct Decision {
  ControllerAction action = ControllerAction::kSend;
  int profile = ProfileTable::kRaw;  // index into the table
  // Analytical KV-movement time of `profile`, and after residual correction.
  double predicted_seconds = 0.0;
  double corrected_seconds = 0.0;
  // False when no profile was predicted to meet the SLO (the fallback
  // policy chose, or with kFastest the fastest was chosen all the same).
  bool feasible = true;
  bool explored = false;  // an epsilon-greedy exploration step
  // Bookkeeping for Observe(); opaque.
  int32_t environment = -1;
  double budget_seconds = kInfinity;  // T_SLO - T_model
  double kv_bytes = 0.0;              // the request's V
  double bandwidth = 0.0;             // the request's B
  double compression_ratio = 1.0;     // the CR the prediction used (request's or table's)
  double codec_factor = 1.0;          // the learned codec factor the prediction used
  double source_seconds = 0.0;        // the request's source_seconds
};

// What the transport measured for one request (Controller::Observe).
struct Observation {
  // End-to-end KV-movement latency, encode start to decode end, seconds > 0.
  double observed_seconds = 0.0;
  // Encode + decode compute time of the request (including the fixed
  // overhead t0), seconds; < 0 when the transport does not report it.
  double codec_seconds = -1.0;
  double now_seconds = 0.0;
  // The bandwidth this transfer measured (bytes/s; the estimator's estimate
  // after its sample), or 0 when unknown. When given, the bandit's residual
  // compares the observed latency with the prediction at this bandwidth, so
  // it learns the latency model's error and not the bandwidth estimate's
  // (a first transfer decided on the estimator's prior is not the
  // profile's fault).
  double bandwidth = 0.0;
};

// Picks a profile per request and learns from the observed latency.
//
// Decide() finds the analytical optimum on the lower envelope of the profiles
// with q_p(w) >= q_min (never a profile below the floor), checks T <= SLO,
// and, with the bandit on, chooses among the optimum and its envelope
// neighbours by residual-corrected latency; raw is always a candidate, so a
// profile predicted (after correction) to be slower than raw is not chosen.
// With a bandwidth uncertainty in the request, a compressed profile must
// also beat raw at the pessimistic (high) end of it (risk_sigmas). Observe()
// with codec times lets the bandit layer learn codec-speed drift.
//
// Thread safety: thread-safe. Decide and Observe may run concurrently from
// many threads; bandit state is guarded by striped mutexes.
class Controller {
 public:
  // InvalidArgument for options out of range.
  static Result<std::unique_ptr<Controller>> Create(ProfileTable table,
                                                    ControllerOptions options);
  ~Controller();

  // Chooses a profile for `request`. InvalidArgument for an unknown
  // workload or a non-positive/non-finite size or bandwidth.
  [[nodiscard]] Result<Decision> Decide(const ControllerRequest& request);
  // Feeds back the observed end-to-end KV-movement latency (encode start to
  // decode end) of a request served with `decision`. No-op for decisions
  // made without the bandit or for recompute. InvalidArgument for a
  // non-positive or non-finite latency.
  [[nodiscard]] Status Observe(const Decision& decision,
                               double observed_seconds, double now_seconds);
  // As above, with the codec time when the transport reports it: the
  // controller then learns codec-speed drift directly (see
  // ControllerOptions::learn_codec_drift) instead of only through the
  // latency residual. InvalidArgument for a non-positive or non-finite
  // latency or a non-finite codec time.
  [[nodiscard]] Status Observe(const Decision& decision,
                               const Observation& observation);

  const ProfileTable& table() const;
  const ControllerOptions& options() const;

  // The analytical optimum alone (no bandit, no SLO check); for tests and
  // tools. Same argument checks as Decide.
  [[nodiscard]] Result<int> ModelOptimum(const ControllerRequest& request) const;

  class Impl;

 private:
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Trace-driven simulation.

// Piecewise-constant service conditions: from time_seconds on (until the
// next point) the link gives `bandwidth` bytes/s and every codec runs
// `codec_slowdown` times slower than profiled.
struct TracePoint {
  double time_seconds = 0.0;
  double bandwidth = 0.0;
  double codec_slowdown = 1.0;
};

// Thread safety: value type.
class Trace {
 public:
  // CSV with header "time_s,bandwidth_gbps[,codec_slowdown]"; times strictly
  // increasing from 0; '#' lines are comments. Corruption when malformed.
  static Result<Trace> FromCsv(std::string_view csv);
  static Result<Trace> Load(const std::string& path);
  // Built-in generators. Steps: cycles through `gbps` every `period`.
  static Trace Steps(const std::vector<double>& gbps, double period_seconds,
                     double duration_seconds);
  // Gaussian random walk of log-bandwidth, one step per `step_seconds`,
  // clamped to [min_gbps, max_gbps]; seeded.
  static Trace RandomWalk(double start_gbps, double min_gbps, double max_gbps,
                          double sigma_per_step, double step_seconds,
                          double duration_seconds, uint64_t seed);
  // Multiplies codec time by `slowdown` from `from_seconds` on.
  Trace WithCodecSlowdown(double from_seconds, double slowdown) const;
  // Replaces the bandwidth by `gbps` in [from, to).
  Trace WithBandwidthDrop(double from_seconds, double to_seconds,
                          double gbps) const;

  double BandwidthAt(double t) const;
  double SlowdownAt(double t) const;
  double duration_seconds() const;
  const std::vector<TracePoint>& points() const { return points_; }
  std::string ToCsv() const;

 private:
  std::vector<TracePoint> points_;
};

struct SimulatedWorkload {
  std::string name;        // must be in the table
  double weight = 1.0;     // share of requests
  double kv_bytes_median = 64e6;
  double kv_bytes_sigma = 0.5;  // lognormal spread of V
  double slo_seconds = 1.0;     // KV-movement budget (T_model = 0)
  double quality_min = 0.0;
};

struct SimulationOptions {
  Trace trace;
  std::vector<SimulatedWorkload> workloads;
  double request_interval_seconds = 0.05;
  // Observed latency = true latency x lognormal(0, noise_sigma); the same
  // draw for every policy (common random numbers).
  double noise_sigma = 0.02;
  // Goodput samples = true bandwidth x lognormal(0, goodput_noise_sigma).
  double goodput_noise_sigma = 0.05;
  // Each profile's true codec speed differs from the table by a seeded
  // lognormal factor (offline-to-online mismatch).
  double profile_mismatch_sigma = 0.1;
  // A request counts as slower than raw when its latency exceeds raw's
  // latency for the same request, at the same instant and with the same
  // noise draw, by more than this fraction. The default is one sigma of the
  // per-request latency noise (noise_sigma): a smaller excess is below what
  // a single measured request can resolve. PolicyResult also counts any
  // excess at all.
  double raw_tolerance = 0.02;
  // Probe: the controller policies (full, no-bandit) start every transfer by
  // sending the first probe_layers of controller.model.layers layers raw and
  // measuring their goodput (one more estimator sample, with the same
  // goodput noise), then decide for the rest of the KV with that fresh
  // estimate. Raw loses nothing (the probe is the start of its transfer);
  // a compressed choice pays the probe's raw time before its own encode
  // starts (no overlap is assumed). 0 disables the probe.
  int probe_layers = 1;
  ControllerOptions controller;
  BandwidthEstimatorOptions estimator;
  uint64_t seed = 1;
};

struct PolicyResult {
  std::string name;
  double mean_seconds = 0.0;
  double p99_seconds = 0.0;
  double regret_seconds = 0.0;  // mean latency minus the oracle's
  int64_t slo_violations = 0;
  int64_t slower_than_raw = 0;      // by more than raw_tolerance
  int64_t slower_than_raw_any = 0;  // by any amount (relative > 1e-9)
  double worst_vs_raw = 0.0;     // max over requests of latency / raw - 1
  int64_t floor_violations = 0;  // requests served below their quality floor
  int64_t requests = 0;
  std::vector<double> latency_seconds;  // per request, in arrival order
  std::vector<int> profile;             // per request: the profile used
};

struct SimulationReport {
  std::vector<double> arrival_seconds;
  std::vector<double> bandwidth;  // true bandwidth at each arrival, bytes/s
  std::vector<double> codec_slowdown;  // true codec slowdown at each arrival
  std::vector<PolicyResult> policies;  // full, no-bandit, no-controller, raw,
                                       // oracle, then static:<spec> each
  double raw_tolerance = 0.0;          // SimulationOptions::raw_tolerance
  double decision_p50_seconds = 0.0;   // full controller's Decide()
  double decision_p99_seconds = 0.0;
  const PolicyResult* Find(std::string_view name) const;
};

// Runs every policy over the same request sequence. InvalidArgument for an
// empty trace or workload list, or a workload not in the table.
[[nodiscard]] Result<SimulationReport> Simulate(const ProfileTable& table,
                                                const SimulationOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_CONTROLLER_H_
