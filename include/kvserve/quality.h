// Copyright kvserve authors. The quality evaluator: task quality of a
// compression profile measured through the real prefill/decode path.
//
//   LoadWorkload(path)        eval samples (scripts/data/make_workloads.py)
//   QualityEvaluator          per sample: prefill once (cached on disk), then
//                             wire-dtype cast -> encode -> decode -> import
//                             (keep-mask for pruned tokens) -> score the
//                             answer teacher-forced; relative to the "none"
//                             profile through the same path.
//
// Scoring. Every sample is scored by one teacher-forced Decode of its
// answer_ids on the imported KV: prediction i is the argmax (lowest id on
// ties, as Sampler's greedy mode) of the logits before answer token i (the
// prefill's last logits for i = 0). Then
//   token accuracy = fraction of answer tokens predicted correctly;
//   exact match    = 1 iff every prediction is correct, which is exactly
//                    "a greedy decode reproduces answer_ids" (the workload's
//                    definition; answer_ids end with the newline token);
//   nll            = mean -log softmax(logits)[answer token] (perplexity =
//                    exp(nll), for metric "perplexity" workloads).
// Relative quality: exact_match workloads: mean EM(profile) / mean EM(none)
// (token accuracy likewise, reported beside it); perplexity workloads: mean
// over samples of ppl_none / ppl_profile. The 95% CI is a paired percentile
// bootstrap over samples (the same resampled indices for profile and none).
// When the baseline mean is 0 the ratio is undefined and reported as NaN.
//
// Thread safety: a QualityEvaluator is not thread-safe.
#ifndef KVSERVE_QUALITY_H_
#define KVSERVE_QUALITY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv_file.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/runtime.h"
#include "kvserve/status.h"

namespace kvserve {

enum class QualityMetric : uint8_t { kExactMatch = 0, kPerplexity = 1 };

// One eval sample. prompt_ids are WITHOUT the BOS (the evaluator prepends
// the model's bos_token_id when it has one).
struct EvalSample {
  std::string id;
  std::string workload;
  QualityMetric metric = QualityMetric::kExactMatch;
  std::string prompt, answer;  // text (informational)
  std::vector<int32_t> prompt_ids, answer_ids;
};

// Parses a workload file: JSONL (one object per line) or a JSON array of
// objects, each with "id" (string), "metric" ("exact_match"|"perplexity"),
// "prompt_ids" and "answer_ids" (non-empty arrays of non-negative ints);
// "workload", "prompt", "answer" are optional. Blank lines are skipped.
// NotFound / IOError for the file; Corruption naming the path, line and the
// field for anything malformed, a duplicate id, or an empty file.
Result<std::vector<EvalSample>> LoadWorkload(const std::string& path);

// `name_or_file` if it names an existing file, else
// `eval_dir`/<name>.jsonl. NotFound with a hint ("build the eval sets with
// scripts/data/build_all.sh") when neither exists.
Result<std::string> ResolveWorkloadPath(const std::string& name_or_file,
                                        const std::string& eval_dir = "data/eval");

// A random subset of `n` distinct indices of [0, total) (all when n <= 0 or
// n >= total), in increasing order, deterministic in `seed`.
std::vector<int> ChooseSubset(int total, int n, uint64_t seed);

// The samples of `all` outside ChooseSubset(all.size(), search_samples,
// seed) -- the held-out set of a search that scored that subset -- in their
// order in `all`. InvalidArgument when the search used every sample
// (search_samples <= 0 or >= all.size()): nothing is held out.
Result<std::vector<EvalSample>> HeldOutSamples(const std::vector<EvalSample>& all,
                                               int search_samples, uint64_t seed);

// Paired percentile bootstrap of a statistic of per-sample pairs.
struct Interval {
  double low = 0, high = 0;
};
// statistic(indices) is evaluated on `resamples` resamples (with
// replacement) of [0, n); returns the 2.5% and 97.5% percentiles of the
// finite values (NaN bounds when none is finite). Deterministic in seed.
Interval BootstrapInterval(int n, const std::function<double(const std::vector<int>&)>& statistic,
                           int resamples, uint64_t seed);

// A per-sample score through one profile.
struct SampleScore {
  std::string id;
  double exact_match = 0;     // 0 or 1
  double token_accuracy = 0;  // [0, 1]
  double nll = 0;             // mean per answer token (nats)
  std::vector<int32_t> predicted;  // teacher-forced argmax per answer token
  uint64_t input_bytes = 0;   // logical bytes of the KV in the wire dtype
  uint64_t frame_bytes = 0;   // every byte of the encoded frame
  double encode_seconds = 0, decode_seconds = 0;
};

// The output of a prefill as the prefill node sends it: the KV cast to the
// wire dtype, the token ids (BOS included) and the last token's logits.
// On disk (the prefill cache) it is a KV file (kv_file.h) whose metadata
// holds the token ids, the logits and an XXH3 checksum of all three.
struct PrefilledSample {
  KvCache kv;
  std::vector<int32_t> token_ids;
  std::vector<float> last_logits;
};

struct QualityOptions {
  int samples = 0;        // random subset size; 0 = all
  uint64_t seed = 0;      // subset and bootstrap seed
  std::string cache_dir;  // prefill KV + baseline scores; empty = no disk cache
  DType wire_dtype = DType::kF16;  // the KV is cast to this before encoding
  const HeadScores* head_scores = nullptr;  // for mixhq / duo
  int codec_threads = 1;
  int bootstrap_resamples = 1000;
  std::function<void(const std::string&)> progress;  // optional
};

struct QualityReport {
  std::string workload;
  std::string profile;   // canonical spec
  QualityMetric metric = QualityMetric::kExactMatch;
  int samples_total = 0, samples_scored = 0;
  bool subset = false;
  // Means over the scored samples (metric_value: EM, or perplexity =
  // exp(mean nll over samples)).
  double metric_value = 0, baseline_metric_value = 0;
  double token_accuracy = 0, baseline_token_accuracy = 0;
  double relative = 0;          // primary relative quality (see top)
  Interval relative_ci;         // 95% paired bootstrap
  double relative_token_accuracy = 0;
  Interval relative_token_accuracy_ci;
  double identical_predictions = 0;  // fraction of samples predicting as none does
  double cr_mean = 0;            // mean of input_bytes / frame_bytes
  double cr_aggregate = 0;       // sum input / sum frame
  double encode_ms_mean = 0, decode_ms_mean = 0;
  int prefills = 0, prefill_cache_hits = 0;  // during this Evaluate
  double seconds = 0;
  std::vector<SampleScore> samples, baseline;
  // The report as JSON (per-sample rows included when `per_sample`).
  std::string ToJson(bool per_sample = false) const;
};

class QualityEvaluator {
 public:
  // Loads the model in `model_dir` and fingerprints it (XXH3 of config.json
  // and the safetensors files) for the prefill cache key.
  static Result<std::unique_ptr<QualityEvaluator>> Create(const std::string& model_dir,
                                                          const RuntimeOptions& options = {});
  ~QualityEvaluator();

  const Model& model() const;
  const std::string& model_fingerprint() const;

  // Scores `profile` and the baseline ("none") on the (subset of) samples.
  // InvalidArgument for an invalid profile, a token id outside the vocab or
  // a prompt + answer longer than max_position_embeddings; errors of the
  // codec/runtime are returned unchanged. Cache files that fail to parse are
  // recomputed and rewritten.
  Result<QualityReport> Evaluate(const std::vector<EvalSample>& samples, const Profile& profile,
                                 const QualityOptions& options);

  // The prefilled KV of `sample` (BOS prepended) in `wire_dtype`: from the
  // cache when present and intact, else prefilled (and stored when
  // cache_dir is non-empty).
  Result<PrefilledSample> PrefillSample(const EvalSample& sample, const std::string& cache_dir,
                                        DType wire_dtype = DType::kF16);

  // Scores one sample: `prefilled` goes through `profile`'s encode/decode,
  // is imported (keep-mask where tokens were pruned) and the answer is
  // scored teacher-forced.
  Result<SampleScore> ScoreSample(const EvalSample& sample, const PrefilledSample& prefilled,
                                  const Profile& profile, const QualityOptions& options);

  // Prefills run / cache hits since Create.
  int prefills() const { return prefills_; }
  int prefill_cache_hits() const { return cache_hits_; }

 private:
  QualityEvaluator() = default;
  std::unique_ptr<Model> model_;
  std::string fingerprint_;
  int prefills_ = 0, cache_hits_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_QUALITY_H_
