// Copyright kvserve authors. Cheap measurements on a cached KV cache: the
// compression ratio and codec throughput of a profile (by really encoding
// and decoding it), and the reconstruction-fidelity proxy of quality.
#include <algorithm>
#include <cmath>

#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"

namespace kvserve {
namespace {

class KvCodecMeter final : public CodecMeter {
 public:
  KvCodecMeter(const KvView& kv, const HeadScores* scores, int repeats)
      : kv_(kv), scores_(scores), repeats_(repeats) {}
  Result<CodecMetrics> Measure(const Profile& profile) override {
    auto m = MeasureOnKv(profile, kv_, scores_, repeats_);
    if (!m.ok()) return m.status();
    return m->codec;
  }

 private:
  KvView kv_;
  const HeadScores* scores_;
  int repeats_;
};

class ReconstructionProxyEvaluator final : public Evaluator {
 public:
  ReconstructionProxyEvaluator(const KvView& kv, const HeadScores* scores)
      : kv_(kv), scores_(scores) {}
  std::string name() const override { return "proxy:reconstruction-snr"; }
  bool is_proxy() const override { return true; }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    auto m = MeasureOnKv(profile, kv_, scores_, 1);
    if (!m.ok()) return m.status();
    return PointEstimate(m->proxy_quality);
  }

 private:
  KvView kv_;
  const HeadScores* scores_;
};

}  // namespace

Result<KvMeasurement> MeasureOnKv(const Profile& profile, const KvView& kv,
                                  const HeadScores* head_scores, int repeats) {
  KVSERVE_ASSIGN_OR_RETURN(ProfileCostMeasurement cost,
                           MeasureProfileCost(profile, kv,
                                              {.threads = 1,
                                               .repeats = std::max(repeats, 1),
                                               .head_scores = head_scores,
                                               .keep_output = true}));
  KvMeasurement m;
  m.codec = cost.codec;
  // NMSE per kind over the whole cache.
  const KvView decoded = cost.decoded.view();
  double nmse_sum = 0.0;
  for (int kind = 0; kind < 2; ++kind) {
    double error = 0.0, energy = 0.0;
    for (int l = 0; l < kv.shape.layers; ++l) {
      for (int h = 0; h < kv.shape.kv_heads; ++h) {
        for (int t = 0; t < kv.shape.tokens; ++t) {
          for (int d = 0; d < kv.shape.head_dim; ++d) {
            const double a = LoadAsFloat(kv.At(l, kind, h, t, d), kv.dtype);
            const double b = LoadAsFloat(decoded.At(l, kind, h, t, d), decoded.dtype);
            error += (a - b) * (a - b);
            energy += a * a;
          }
        }
      }
    }
    nmse_sum += energy > 0.0 ? error / energy : 0.0;
  }
  const double nmse = nmse_sum / 2.0;
  m.proxy_quality = std::clamp(1.0 - nmse, 0.0, 1.0);
  m.snr_db = nmse > 0.0 ? -10.0 * std::log10(nmse) : 300.0;
  return m;
}

std::unique_ptr<CodecMeter> MakeKvCodecMeter(const KvView& kv, const HeadScores* head_scores,
                                             int repeats) {
  return std::make_unique<KvCodecMeter>(kv, head_scores, repeats);
}

std::unique_ptr<Evaluator> MakeReconstructionProxyEvaluator(const KvView& kv,
                                                            const HeadScores* head_scores) {
  return std::make_unique<ReconstructionProxyEvaluator>(kv, head_scores);
}

Result<SynthOptions> SynthWorkloadOptions(std::string_view workload) {
  SynthOptions o;
  o.shape = KvShape{4, 4, 512, 64};
  o.dtype = DType::kBF16;
  if (workload == "synth-smooth") {
    o.seed = 11;
    o.token_correlation_key = 0.95f;
    o.token_correlation_value = 0.8f;
    o.key_outlier_fraction = 0.03f;
    o.key_outlier_scale = 10.0f;
    o.value_outlier_fraction = 0.01f;
    o.value_outlier_scale = 2.0f;
  } else if (workload == "synth-outlier") {
    o.seed = 22;
    o.token_correlation_key = 0.7f;
    o.token_correlation_value = 0.3f;
    o.key_outlier_fraction = 0.1f;
    o.key_outlier_scale = 20.0f;
    o.value_outlier_fraction = 0.05f;
    o.value_outlier_scale = 5.0f;
  } else if (workload == "synth-unseen") {
    o.seed = 33;
    o.token_correlation_key = 0.85f;
    o.token_correlation_value = 0.5f;
    o.key_outlier_fraction = 0.06f;
    o.key_outlier_scale = 15.0f;
    o.value_outlier_fraction = 0.03f;
    o.value_outlier_scale = 3.0f;
  } else {
    return Status::NotFound("unknown synthetic workload \"" + std::string(workload) +
                            "\" (synth-smooth, synth-outlier, synth-unseen)");
  }
  return o;
}

std::vector<std::string> SynthWorkloadNames() {
  return {"synth-smooth", "synth-outlier", "synth-unseen"};
}

}  // namespace kvserve
