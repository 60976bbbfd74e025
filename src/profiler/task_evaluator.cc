// Copyright kvserve authors. Task quality behind the profiler's Evaluator
// interface (include/kvserve/profiler.h): QualityEvaluator on a fixed sample
// subset, and the equal-weight mix of several workloads (KVServe-Unified).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/checksum.h"
#include "kvserve/profiler.h"

namespace kvserve {

Result<std::unique_ptr<TaskEvaluator>> TaskEvaluator::Create(QualityEvaluator* quality,
                                                             std::string workload,
                                                             std::vector<EvalSample> samples,
                                                             TaskEvaluatorOptions options) {
  if (quality == nullptr) return Status::InvalidArgument("task evaluator: no quality evaluator");
  if (workload.empty()) return Status::InvalidArgument("task evaluator: empty workload name");
  if (samples.empty()) {
    return Status::InvalidArgument("task evaluator: workload " + workload + " has no samples");
  }
  std::unique_ptr<TaskEvaluator> ev(new TaskEvaluator());
  ev->quality_ = quality;
  ev->workload_ = std::move(workload);
  ev->subset_ = ChooseSubset(static_cast<int>(samples.size()), options.samples, options.seed);
  ev->samples_ = std::move(samples);
  ev->options_ = options;
  // What the subset holds, not only which positions it takes: a rebuilt
  // eval set with other prompts must not be answered from the old one's rows.
  Checksum64Stream hash;
  for (int i : ev->subset_) {
    const EvalSample& s = ev->samples_[i];
    const uint64_t sizes[3] = {s.id.size(), s.prompt_ids.size(), s.answer_ids.size()};
    const int32_t metric = static_cast<int32_t>(s.metric);
    hash.Update(sizes, sizeof(sizes));
    hash.Update(s.id.data(), s.id.size());
    hash.Update(&metric, sizeof(metric));
    hash.Update(s.prompt_ids.data(), s.prompt_ids.size() * sizeof(int32_t));
    hash.Update(s.answer_ids.data(), s.answer_ids.size() * sizeof(int32_t));
  }
  ev->data_hash_ = hash.Digest();
  return ev;
}

std::string TaskEvaluator::name() const {
  const std::string tag = options_.sample_tag.empty() ? "" : ":" + options_.sample_tag;
  return fmt::format("task:{}{}:n={}:seed={}", workload_, tag, samples_scored(), options_.seed);
}

std::string TaskEvaluator::sample_set() const {
  const std::string tag = options_.sample_tag.empty() ? "" : options_.sample_tag + ",";
  return fmt::format("task:{}n={},seed={},data={:016x},wire={},model={}", tag, samples_scored(),
                     options_.seed, data_hash_, DTypeName(options_.wire_dtype),
                     quality_->model_fingerprint());
}

Result<QualityEstimate> TaskEvaluator::Evaluate(const Profile& profile) {
  QualityOptions o;
  o.samples = options_.samples;
  o.seed = options_.seed;
  o.cache_dir = options_.cache_dir;
  o.wire_dtype = options_.wire_dtype;
  o.head_scores = options_.head_scores;
  o.codec_threads = options_.codec_threads;
  o.bootstrap_resamples = options_.bootstrap_resamples;
  KVSERVE_ASSIGN_OR_RETURN(QualityReport report, quality_->Evaluate(samples_, profile, o));
  if (!std::isfinite(report.relative)) {
    return Status::NotSupported(fmt::format(
        "workload {}: relative quality of {} is undefined (baseline {} = {})", workload_,
        report.profile, report.metric == QualityMetric::kPerplexity ? "perplexity" : "exact match",
        report.baseline_metric_value));
  }
  QualityEstimate q;
  q.quality = report.relative;
  const double low = report.relative_ci.low, high = report.relative_ci.high;
  q.ci_half_width = std::isfinite(low) && std::isfinite(high) ? (high - low) / 2 : 0.0;
  q.low = low;
  q.high = high;
  q.samples = report.samples_scored;
  last_ = std::move(report);
  return q;
}

Result<KvCache> TaskEvaluator::CodecKv(int max_tokens, std::string* description) {
  // The subset sample with the median prompt length (ties: the earlier one).
  std::vector<int> order = subset_;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return samples_[a].prompt_ids.size() < samples_[b].prompt_ids.size();
  });
  const EvalSample& sample = samples_[order[order.size() / 2]];
  KVSERVE_ASSIGN_OR_RETURN(PrefilledSample prefilled,
                           quality_->PrefillSample(sample, options_.cache_dir,
                                                   options_.wire_dtype));
  KvView view = prefilled.kv.view();
  if (max_tokens > 0 && view.shape.tokens > max_tokens) view.shape.tokens = max_tokens;
  KVSERVE_ASSIGN_OR_RETURN(KvCache kv, KvCache::CopyFrom(view));
  if (description != nullptr) {
    const KvShape& s = kv.shape();
    *description = fmt::format("sample {} of {}, {}x{}x{}x{} {} (first {} of {} tokens)",
                               sample.id, workload_, s.layers, s.kv_heads, s.tokens, s.head_dim,
                               DTypeName(kv.dtype()), s.tokens, prefilled.kv.shape().tokens);
  }
  return kv;
}

CodecMetrics TaskCodecMetrics(const QualityReport& report) {
  CodecMetrics m;
  m.compression_ratio = report.cr_aggregate;
  double input = 0;
  for (const SampleScore& s : report.samples) input += static_cast<double>(s.input_bytes);
  const double mean_input = report.samples.empty() ? 0.0 : input / report.samples.size();
  if (report.encode_ms_mean > 0) m.encode_bytes_per_second = mean_input / (report.encode_ms_mean / 1e3);
  if (report.decode_ms_mean > 0) m.decode_bytes_per_second = mean_input / (report.decode_ms_mean / 1e3);
  return m;
}

MixedEvaluator::MixedEvaluator(std::vector<Evaluator*> parts) : parts_(std::move(parts)) {}

std::string MixedEvaluator::name() const {
  std::string out = "mixed:";
  for (size_t i = 0; i < parts_.size(); ++i) out += (i ? "+" : "") + parts_[i]->name();
  return out;
}

bool MixedEvaluator::is_proxy() const {
  return std::any_of(parts_.begin(), parts_.end(), [](const Evaluator* e) { return e->is_proxy(); });
}

Result<QualityEstimate> MixedEvaluator::Evaluate(const Profile& profile) {
  if (parts_.empty()) return Status::InvalidArgument("mixed evaluator without parts");
  std::vector<QualityEstimate> got;
  QualityEstimate mean;
  double variance = 0;
  for (Evaluator* part : parts_) {
    KVSERVE_ASSIGN_OR_RETURN(QualityEstimate q, part->Evaluate(profile));
    mean.quality += q.quality;
    variance += q.ci_half_width * q.ci_half_width;
    mean.samples += q.samples;
    got.push_back(q);
  }
  const double n = static_cast<double>(parts_.size());
  mean.quality /= n;
  mean.ci_half_width = std::sqrt(variance) / n;
  last_parts_ = std::move(got);
  return mean;
}

namespace {

class LowerEndEvaluator final : public Evaluator {
 public:
  explicit LowerEndEvaluator(Evaluator* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name() + ":lower-end"; }
  bool is_proxy() const override { return inner_->is_proxy(); }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    KVSERVE_ASSIGN_OR_RETURN(QualityEstimate q, inner_->Evaluate(profile));
    QualityEstimate out;
    out.quality = q.LowerBound();
    out.samples = q.samples;
    return out;
  }

 private:
  Evaluator* inner_;
};

}  // namespace

std::unique_ptr<Evaluator> MakeLowerEndEvaluator(Evaluator* inner) {
  return std::make_unique<LowerEndEvaluator>(inner);
}

}  // namespace kvserve
