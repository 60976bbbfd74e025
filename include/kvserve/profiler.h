// Copyright kvserve authors. The offline profiler (paper §5.2): which
// compression profiles maximise the compression ratio under a quality floor
// for a workload, found with few evaluations of the expensive quality black
// box, and distilled into the profile tables the online controller reads.
//
// Parts, each in its own file under src/profiler/:
//   StrategySpace      the candidate profiles, from a JSON file
//                      (configs/strategy_space.json; docs/profiling.md §Space).
//   Evaluator          quality of a profile on one workload (the black box).
//   CodecMeter         compression ratio and codec throughput (cheap: encode a
//                      cached KV cache).
//   ResultsDb          SQLite store of every evaluation, so a run resumes
//                      after an interruption and never pays twice.
//   Searcher           Bayesian engine (Alg. 1), random and exhaustive search
//                      behind one interface.
//   Pareto / tables    the non-dominated set in (quality up, CR up, codec
//                      seconds per byte down) -> controller profile tables.
//   GroundTruth        a recorded table of every configuration of a space with
//                      its quality and codec metrics, for ablations and tests.
//
// Quality numbers carry their provenance: an Evaluator says whether it is a
// proxy (e.g. reconstruction fidelity of a synthetic KV cache) or a task
// metric, and the proxy label travels into the results database, the ground
// truth files and the reports. Proxy numbers are never task quality.
//
// Errors: every fallible function returns Status or Result<T>; nothing throws
// across this API. Thread safety is stated per class.
#ifndef KVSERVE_PROFILER_H_
#define KVSERVE_PROFILER_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/controller.h"
#include "kvserve/kv.h"
#include "kvserve/kv_file.h"
#include "kvserve/profile.h"
#include "kvserve/quality.h"
#include "kvserve/status.h"

namespace kvserve {

// ---------------------------------------------------------------------------
// Strategy space.

// A finite set of valid, distinct profiles. JSON format (docs/profiling.md):
//   {"format": "kvserve-strategy-space", "version": 1,
//    "transforms": {"identity": {}, "hadamard": {"seed": [7]}, ...},
//    "quantizers": {"kivi": {"k": [2, 3, 4], "group": {"min": 32, "max": 128,
//                            "pow2": true}, "transforms": ["identity", ...],
//                            "codecs": [...]}, ...},
//    "codecs": {"pack": {}, "rans": {"table": [12]}, ...},
//    "pipeline": {"chunk": [256]},
//    "include": ["kivi-2", "cachegen", ...]}
// The space is the Cartesian product, per quantizer, of its transforms
// (default: all listed), its parameter grids, its codecs (default: all) and
// the pipeline grid, minus combinations Profile::Validate() rejects, plus the
// "include" specs/presets. A parameter listed under a component applies only
// when that component is chosen (conditional parameters). Numeric values are
// a list of integers (words for axis_k/axis_v/scale) or {"min","max"} with
// "step" or "pow2": true. Every value must lie inside the parameter's bounds
// (AllParams()) and the parameter must apply to the component
// (ParamApplies()); otherwise InvalidArgument naming the component and key.
//
// Thread safety: immutable after construction.
// Most candidate profiles (grid assignments, before validation) a strategy
// space may describe; FromJson refuses a larger product before building
// any (the profiler evaluates tens to hundreds of them).
inline constexpr uint64_t kMaxStrategySpaceCandidates = 100000;

class StrategySpace {
 public:
  static Result<StrategySpace> FromJson(std::string_view json);
  // Reads and parses `path`. IOError when it cannot be read.
  static Result<StrategySpace> Load(const std::string& path);
  // A space of explicit profiles (tests, ad-hoc lists). InvalidArgument if
  // one is invalid; duplicates are dropped.
  static Result<StrategySpace> FromProfiles(std::vector<Profile> profiles);

  const std::vector<Profile>& profiles() const { return profiles_; }
  int size() const { return static_cast<int>(profiles_.size()); }
  // Index of the profile equal to `profile`, or -1.
  int IndexOf(const Profile& profile) const;
  // Combinations of the product rejected by Profile::Validate().
  int rejected() const { return rejected_; }

 private:
  std::vector<Profile> profiles_;
  int rejected_ = 0;
};

// ---------------------------------------------------------------------------
// Measurements.

// Cheap per-profile metrics, measured by encoding (and decoding) a KV cache.
struct CodecMetrics {
  double compression_ratio = 1.0;                // logical bytes / frame bytes
  double encode_bytes_per_second = 0.0;          // over logical (uncompressed) bytes
  double decode_bytes_per_second = 0.0;
  double overhead_seconds = 0.0;                 // fixed per-request cost t0; 0 = not measured
  // 1/s_p = 1/s_enc + 1/s_dec (round-trip codec seconds per byte).
  double CodecSecondsPerByte() const {
    return 1.0 / encode_bytes_per_second + 1.0 / decode_bytes_per_second;
  }
};

// Quality of one profile on one workload, relative to uncompressed (1 =
// indistinguishable), with a 95% confidence half-width (0 when exact).
struct QualityEstimate {
  double quality = 0.0;
  double ci_half_width = 0.0;
  int samples = 0;
  // The 95% interval's ends when the evaluator knows them (the task
  // evaluator's paired bootstrap, which need not be symmetric); NaN
  // otherwise.
  double low = std::numeric_limits<double>::quiet_NaN();
  double high = std::numeric_limits<double>::quiet_NaN();
  // The interval's lower end: `low` when known, else quality - ci_half_width.
  double LowerBound() const { return std::isfinite(low) ? low : quality - ci_half_width; }
};

// An exact quality (a proxy or a recorded value): no interval, one "sample".
inline QualityEstimate PointEstimate(double quality) {
  QualityEstimate q;
  q.quality = quality;
  q.samples = 1;
  return q;
}

// The expensive black box: quality of a profile on one workload and sample
// set. Implementations: the task evaluator (quality issue), the
// reconstruction proxy (MakeReconstructionProxyEvaluator), a recorded ground
// truth (GroundTruth::MakeEvaluator), a database cache (MakeCachingEvaluator).
// Thread safety: not required; the searchers call it from one thread.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Identity stored with every result, e.g. "proxy:reconstruction-snr".
  // Results of different evaluators are never mixed.
  virtual std::string name() const = 0;
  // True when quality is a proxy rather than a task metric.
  virtual bool is_proxy() const = 0;
  // Quality of `profile`. Errors are propagated by the searchers unchanged.
  virtual Result<QualityEstimate> Evaluate(const Profile& profile) = 0;
};

// Measures CodecMetrics of a profile. Not thread-safe.
class CodecMeter {
 public:
  virtual ~CodecMeter() = default;
  virtual Result<CodecMetrics> Measure(const Profile& profile) = 0;
};

// The label every proxy quality number carries.
inline constexpr std::string_view kReconstructionProxyLabel =
    "proxy: reconstruction SNR, not task accuracy";

// Encoding, decoding and reconstruction error of one profile on a KV cache.
struct KvMeasurement {
  CodecMetrics codec;
  // Proxy quality: 1 - NMSE, NMSE = ||x - x'||^2 / ||x||^2 per K and V,
  // averaged over K and V, clamped to [0, 1]. Pruned tokens count as zeros.
  // This is kReconstructionProxyLabel, not task quality.
  double proxy_quality = 0.0;
  double snr_db = 0.0;  // -10 log10(mean NMSE)
};

// How MeasureProfileCost runs.
struct ProfileCostOptions {
  int threads = 1;  // encoder/decoder threads (0 = hardware concurrency)
  int repeats = 1;  // timings are the fastest of this many runs (>= 1)
  const HeadScores* head_scores = nullptr;  // required by mixhq and duo
  // Also measure the fixed per-request overhead t0: what encoding and
  // decoding the first min(tokens, 16) tokens cost beyond their share of
  // the throughput (CodecMetrics::overhead_seconds; 0 otherwise).
  bool measure_overhead = false;
  // Keep the frame, the decoded cache and its keep mask in the result.
  bool keep_output = false;
  // Called with a short phase description ("encode 2/3"); may be empty.
  std::function<void(const std::string& phase)> progress;
};

// The cost of one profile on one KV cache, as the profiler, the controller's
// calibration and the benchmarks measure it.
struct ProfileCostMeasurement {
  CodecMetrics codec;        // CR over every frame byte, rates over logical bytes
  uint64_t input_bytes = 0;  // logical bytes of the cache (the V of the latency model)
  uint64_t frame_bytes = 0;
  FrameStats stats;          // the encoder's section sizes
  double encode_seconds = 0;  // fastest of `repeats`
  double decode_seconds = 0;
  // With keep_output: the frame, the last decode's output (contiguous) and
  // its keep mask ([layer][kind][head][token], 0 = pruned).
  std::vector<uint8_t> frame;
  KvCache decoded;
  std::vector<uint8_t> keep_mask;
};

// Encodes `kv` with `profile` `repeats` times, then decodes the frame
// `repeats` times into a preallocated cache; contexts are created once,
// outside the timed region, and buffers are reused so that the first run's
// page faults do not count. This is the one timing loop of the profiler,
// the e2e calibration and `kvserve bench` / `eval`. InvalidArgument for an
// invalid profile, view or option; the codec's errors unchanged.
Result<ProfileCostMeasurement> MeasureProfileCost(const Profile& profile, const KvView& kv,
                                                  const ProfileCostOptions& options = {});

// MeasureProfileCost (threads = 1, `repeats` timed runs) plus the
// reconstruction error of the decoded cache. `head_scores` is required by
// mixhq and duo. InvalidArgument for an invalid profile; errors of the codec
// otherwise.
Result<KvMeasurement> MeasureOnKv(const Profile& profile, const KvView& kv,
                                  const HeadScores* head_scores, int repeats = 1);

// A CodecMeter and a proxy Evaluator on one cached KV cache. The caller
// keeps `kv` (and `head_scores`) alive for the object's lifetime.
std::unique_ptr<CodecMeter> MakeKvCodecMeter(const KvView& kv, const HeadScores* head_scores,
                                             int repeats = 1);
std::unique_ptr<Evaluator> MakeReconstructionProxyEvaluator(const KvView& kv,
                                                            const HeadScores* head_scores);

// Synthetic KV variants that stand in for workloads until real KV dumps and
// the task evaluator exist: "synth-smooth" (strongly correlated tokens, few
// outliers), "synth-outlier" (weak correlation, heavy key outliers),
// "synth-unseen" (a third mix, never profiled). NotFound for other names.
Result<SynthOptions> SynthWorkloadOptions(std::string_view workload);
std::vector<std::string> SynthWorkloadNames();

// ---------------------------------------------------------------------------
// Task quality: the quality issue's QualityEvaluator behind Evaluator.

struct TaskEvaluatorOptions {
  int samples = 100;       // random subset size (ChooseSubset); 0 = all samples
  uint64_t seed = 0;       // subset and bootstrap seed
  std::string cache_dir;   // prefill cache (QualityOptions::cache_dir); "" = none
  DType wire_dtype = DType::kF16;            // the KV is cast to this before encoding
  const HeadScores* head_scores = nullptr;   // for mixhq / duo; caller keeps it alive
  int codec_threads = 1;
  int bootstrap_resamples = 1000;
  // Names the sample set when the samples given are not a workload's own
  // (e.g. "holdout": HeldOutSamples of a search); part of name() and
  // sample_set(), so the results database keeps the sets apart.
  std::string sample_tag;
};

// Task quality of a profile on one workload: QualityEvaluator::Evaluate on a
// fixed sample subset, relative to the "none" profile through the same
// prefill -> wire dtype -> encode -> decode -> import path. The estimate is
// QualityReport::relative (exact-match ratio, or mean ppl_none/ppl for
// perplexity workloads) with ci_half_width = (high - low) / 2 of its 95%
// paired bootstrap interval. Same profile and options give the same number.
// Not a proxy. Not thread-safe (neither is QualityEvaluator).
class TaskEvaluator final : public Evaluator {
 public:
  // `quality` must outlive the object. InvalidArgument for no samples or a
  // workload name that is empty.
  static Result<std::unique_ptr<TaskEvaluator>> Create(QualityEvaluator* quality,
                                                       std::string workload,
                                                       std::vector<EvalSample> samples,
                                                       TaskEvaluatorOptions options);

  // "task:<workload>:n=<samples scored>:seed=<seed>", with ":<sample_tag>"
  // after the workload when the options name one.
  std::string name() const override;
  bool is_proxy() const override { return false; }
  // NotSupported when the relative quality is undefined (the baseline
  // scores 0, e.g. a model that never answers the workload); errors of the
  // quality evaluator (invalid profile, missing head scores, runtime) as is.
  Result<QualityEstimate> Evaluate(const Profile& profile) override;

  // Sample-set key for the results database: the subset, a hash of what it
  // holds (every scored sample's id, metric and token ids), the wire dtype
  // and the model fingerprint, so neither a retrained model nor a rebuilt
  // eval set with other prompts is answered from old rows.
  std::string sample_set() const;
  const std::string& workload() const { return workload_; }
  // Samples scored per evaluation (min(samples, workload size)).
  int samples_scored() const { return static_cast<int>(subset_.size()); }
  // The full report of the last successful Evaluate; nullptr before one.
  const QualityReport* last_report() const { return last_.has_value() ? &*last_ : nullptr; }

  // The real KV cheap metrics (CR, codec speed) are measured on: the
  // prefilled KV (wire dtype, from the prefill cache when present) of the
  // subset sample with the median prompt length, cut to its first
  // `max_tokens` tokens (all when <= 0). `description` (optional) receives
  // "sample <id>, <shape> <dtype>".
  Result<KvCache> CodecKv(int max_tokens, std::string* description = nullptr);

 private:
  TaskEvaluator() = default;
  QualityEvaluator* quality_ = nullptr;
  std::string workload_;
  std::vector<EvalSample> samples_;
  std::vector<int> subset_;
  uint64_t data_hash_ = 0;  // of the subset's samples (sample_set)
  TaskEvaluatorOptions options_;
  std::optional<QualityReport> last_;
};

// Codec metrics of a task evaluation: CR = sum of input bytes / sum of frame
// bytes over the scored samples, encode/decode throughput over the mean
// per-sample times (0 when a time is 0).
CodecMetrics TaskCodecMetrics(const QualityReport& report);

// Mean quality over several workloads with equal weights (paper §7.3,
// KVServe-Unified): quality = mean of the parts, ci_half_width =
// sqrt(sum of squared half-widths) / parts (independent parts), samples =
// sum. name() = "mixed:" + the parts' names joined by '+'; a proxy iff any
// part is. The parts must outlive the object. Not thread-safe.
class MixedEvaluator final : public Evaluator {
 public:
  explicit MixedEvaluator(std::vector<Evaluator*> parts);
  std::string name() const override;
  bool is_proxy() const override;
  // The first error of a part, unchanged; InvalidArgument with no parts.
  Result<QualityEstimate> Evaluate(const Profile& profile) override;
  // Qualities of the parts from the last successful Evaluate, in part order.
  const std::vector<QualityEstimate>& last_parts() const { return last_parts_; }

 private:
  std::vector<Evaluator*> parts_;
  std::vector<QualityEstimate> last_parts_;
};

// Wraps `inner` for a search that checks the floor against the lower end of
// each 95% interval: Evaluate returns inner's estimate with quality =
// inner's LowerBound(), no interval (ci_half_width 0, low/high NaN) and the
// same sample count; name() = inner's + ":lower-end"; inner's errors
// unchanged. Put it outside a caching evaluator so the database keeps the
// real estimates. `inner` must outlive the wrapper.
std::unique_ptr<Evaluator> MakeLowerEndEvaluator(Evaluator* inner);

// ---------------------------------------------------------------------------
// Results database.

// Key of one evaluation. `evaluator` keeps proxy and task numbers apart.
struct EvaluationKey {
  std::string model;       // model directory or name
  std::string workload;
  std::string spec;        // canonical profile spec
  std::string sample_set;  // e.g. "seed=1,n=100" or a KV file digest
  std::string evaluator;   // Evaluator::name()
};

struct EvaluationRecord {
  EvaluationKey key;
  std::optional<QualityEstimate> quality;
  std::optional<CodecMetrics> codec;
};

// SQLite store of evaluations (one row per key). Each Put commits on its own,
// so a run killed at any point keeps everything it finished. Not thread-safe;
// one object per thread (SQLite handles concurrent processes).
class ResultsDb {
 public:
  // Opens or creates the database at `path` (":memory:" for a private one).
  // IOError when it cannot be opened; Corruption when it is not ours.
  static Result<std::unique_ptr<ResultsDb>> Open(const std::string& path);
  ~ResultsDb();
  ResultsDb(const ResultsDb&) = delete;
  ResultsDb& operator=(const ResultsDb&) = delete;

  // Stores the quality (codec) half of a row, keeping the other half.
  [[nodiscard]] Status PutQuality(const EvaluationKey& key, const QualityEstimate& quality);
  [[nodiscard]] Status PutCodec(const EvaluationKey& key, const CodecMetrics& codec);
  // The row for `key`; NotFound when absent.
  Result<EvaluationRecord> Get(const EvaluationKey& key);
  // Every row with this model, workload, sample set and evaluator (spec
  // ignored), in insertion order.
  Result<std::vector<EvaluationRecord>> List(const EvaluationKey& scope);

 private:
  struct Impl;
  explicit ResultsDb(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Wraps `inner`: returns a stored quality for (scope + spec) when the
// database has one, else calls `inner` and stores the result before
// returning it. scope.spec and scope.evaluator are ignored (the evaluator
// name is inner's). `reused` (optional) counts the calls answered from the
// database. `db` and `inner` must outlive the wrapper.
std::unique_ptr<Evaluator> MakeCachingEvaluator(Evaluator* inner, ResultsDb* db,
                                                EvaluationKey scope, int* reused = nullptr);

// ---------------------------------------------------------------------------
// Search.

// One candidate: a profile of the space with its cheap metrics.
struct Candidate {
  Profile profile;
  CodecMetrics codec;
};

// Progress of MeasureCandidates: measurements made so far, rows read from
// the database, candidates done. A non-OK return stops the loop with that
// status (e.g. a user's Ctrl-C).
using MeasureProgressFn = std::function<Status(int measured, int from_db, size_t done)>;

// The candidates of `space`, in its order, with their codec metrics: the
// row stored in `db` under (scope.model, scope.workload, spec,
// scope.sample_set, "codec") where there is one, else measured by `meter`
// and stored before the next profile (an interrupted run keeps everything it
// measured; a rerun measures nothing twice). scope.spec and scope.evaluator
// are ignored. `on_progress` (may be empty) runs after every `every`-th
// measurement (every <= 0: never). `counts` (may be null) receives the
// totals: measurements made, rows read from the database. Errors: the
// meter's, with the spec as context; the database's; on_progress's.
struct MeasureCounts {
  int measured = 0;
  int from_db = 0;
};
Result<std::vector<Candidate>> MeasureCandidates(const StrategySpace& space, CodecMeter& meter,
                                                 ResultsDb& db, const EvaluationKey& scope,
                                                 int every = 0,
                                                 const MeasureProgressFn& on_progress = {},
                                                 MeasureCounts* counts = nullptr);

struct SearchProblem {
  std::vector<Candidate> candidates;
  double quality_min = 0.97;  // feasible iff quality >= quality_min
  int budget = 80;            // maximum evaluations
  uint64_t seed = 1;
};

struct SearchObservation {
  int candidate = 0;  // index into SearchProblem::candidates
  QualityEstimate quality;
  bool feasible = false;
};

struct SearchProgress {
  int iteration = 0;                // evaluations so far (1-based after the first)
  int candidate = 0;                // just evaluated
  double quality = 0.0;
  bool feasible = false;
  double best_feasible_cr = 0.0;    // 0 until something is feasible
  int remaining = 0;                // candidates neither evaluated nor pruned
};
using ProgressFn = std::function<void(const SearchProgress&)>;

struct SearchTrace {
  std::vector<SearchObservation> observations;  // in evaluation order
  int best_feasible = -1;  // candidate index of the max-CR feasible observation, or -1
  std::string stop_reason; // "budget", "space exhausted", "early stop: ..."
  // Candidates feasible in the trace (the paper's F), by candidate index.
  std::vector<int> Feasible() const;
};

// Search strategies behind one interface. Deterministic: the same problem
// (including seed) and the same evaluator answers give the same trace.
class Searcher {
 public:
  virtual ~Searcher() = default;
  virtual std::string name() const = 0;
  // Runs until the budget, an exhausted space or an early stop. Returns the
  // evaluator's first error, InvalidArgument for an empty problem.
  virtual Result<SearchTrace> Search(const SearchProblem& problem, Evaluator& evaluator,
                                     const ProgressFn& progress = {}) = 0;
};

enum class ExplorationSchedule : uint8_t {
  kDecay = 0,     // lambda_t = lambda0 * decay^t (the paper)
  kConstant = 1,  // lambda_t = lambda0 (ablation "w/o decay")
  kNone = 2,      // lambda_t = 0 (ablation "w/o exploration")
};

// Options of the Bayesian engine (paper Alg. 1); docs/profiling.md explains
// each default.
struct BayesOptions {
  // One-hot categorical + min-max numeric features (paper line 1). false:
  // raw features (category index, raw parameter values): ablation "w/o Enc".
  bool encoding = true;
  ExplorationSchedule exploration = ExplorationSchedule::kDecay;
  double lambda0 = 0.2;
  double lambda_decay = 0.85;
  // Bi-directional pruning. Feasible c: drop candidates with
  // CR < CR(c) (1 - epsilon): they cannot beat c. Clearly infeasible c
  // (quality < quality_min - infeasible_margin): drop the candidates of the
  // same family (same components and non-bit parameters) whose every bit
  // width is <= c's and whose CR > CR(c) (1 + epsilon): under the
  // monotonicity assumption (docs/profiling.md: quality does not rise when a
  // bit width falls, all else fixed) they are infeasible too.
  bool pruning = true;
  double prune_epsilon = 0.02;
  double infeasible_margin = 0.02;
  // Early stop after `patience` consecutive evaluations that do not raise
  // the best feasible CR, counted from the first feasible evaluation (the
  // space running empty always stops).
  bool early_stopping = true;
  int patience = 30;
  int initial_random = 6;
  // GP hyperparameter optimisation: objective evaluations per fit.
  int hyper_evaluations = 40;
};

std::unique_ptr<Searcher> MakeBayesSearcher(const BayesOptions& options = {});
// Uniform sampling without replacement, seeded.
std::unique_ptr<Searcher> MakeRandomSearcher();
// Every candidate in index order (the budget still applies).
std::unique_ptr<Searcher> MakeExhaustiveSearcher();

// ---------------------------------------------------------------------------
// Ground truth.

// A recorded evaluation of every profile of a space on one workload
// (configs/ground_truth/<workload>.json, format in docs/profiling.md). Lets
// searches and ablations run in seconds without the expensive evaluator.
struct GroundTruthRow {
  std::string spec;
  double quality = 0.0;
  CodecMetrics codec;
};

class GroundTruth {
 public:
  static Result<GroundTruth> FromJson(std::string_view json);
  static Result<GroundTruth> Load(const std::string& path);
  std::string ToJson() const;

  std::string workload;
  std::string quality_kind;     // kReconstructionProxyLabel or the task metric's name
  std::string evaluator;        // Evaluator::name() of the producer
  std::string source;           // KV source, machine, command: free text
  std::vector<GroundTruthRow> rows;

  // Candidates (profiles with codec metrics) in row order. Corruption if a
  // spec does not parse.
  Result<std::vector<Candidate>> Candidates() const;
  // Evaluator answering from the rows (exact specs); NotFound for others.
  // The object must outlive it.
  std::unique_ptr<Evaluator> MakeEvaluator() const;
  // Index of the max-CR row with quality >= quality_min, or -1.
  int BestFeasible(double quality_min) const;
};

// Measures every profile of `space` on `kv` (MeasureOnKv) and returns the
// table. `progress` (optional) is called after each row with (done, total).
Result<GroundTruth> GenerateGroundTruth(const StrategySpace& space, const KvView& kv,
                                        const HeadScores* head_scores, std::string workload,
                                        std::string source,
                                        const std::function<void(int, int)>& progress = {});

// ---------------------------------------------------------------------------
// Pareto frontier and profile tables.

struct ParetoPoint {
  double quality = 0.0;                 // higher is better
  double compression_ratio = 0.0;       // higher is better
  double codec_seconds_per_byte = 0.0;  // lower is better (1/s_p)
};

// True when `a` is at least as good as `b` in all three and better in one.
bool Dominates(const ParetoPoint& a, const ParetoPoint& b);
// Indices of the non-dominated points, ascending. Equal points are all kept.
std::vector<int> NonDominated(std::span<const ParetoPoint> points);

// One row destined for a profile table.
struct TableEntry {
  Profile profile;
  CodecMetrics codec;
  std::map<std::string, double> quality;  // workload -> relative quality
};

// The Pareto set of `entries` for `workload` among those with
// quality[workload] >= quality_min, as a controller ProfileTable (format of
// kvserve/controller.h) whose rows carry every quality they have. Rows with
// CR <= 1 are dropped (never useful to the controller). InvalidArgument if
// no entry is feasible.
Result<ProfileTable> BuildParetoTable(std::span<const TableEntry> entries,
                                      std::string_view workload, double quality_min);

}  // namespace kvserve

#endif  // KVSERVE_PROFILER_H_
