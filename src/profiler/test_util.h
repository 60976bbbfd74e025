// Copyright kvserve authors. Seeded synthetic search problems for tests.
#ifndef KVSERVE_PROFILER_TEST_UTIL_H_
#define KVSERVE_PROFILER_TEST_UTIL_H_

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "kvserve/profiler.h"

namespace kvserve::profiler::testing {

// A space of uniform/kivi/layermix profiles over several transforms and
// codecs with a synthetic quality that never rises when a bit width falls
// (the documented monotonicity assumption) and a CR that rises as bits fall.
struct SyntheticProblem {
  std::vector<Candidate> candidates;
  std::vector<double> quality;
};

inline SyntheticProblem MakeSyntheticProblem(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  SyntheticProblem out;
  const TransformType transforms[] = {TransformType::kIdentity, TransformType::kHadamard,
                                      TransformType::kAffine};
  const CodecType codecs[] = {CodecType::kPack, CodecType::kRans};
  std::map<int, double> family_penalty;
  int family = 0;
  for (TransformType t : transforms) {
    for (CodecType c : codecs) {
      for (int group : {32, 64}) {
        const double penalty = 0.02 + 0.08 * uniform();
        const double cr_gain = 1.0 + 0.3 * uniform();
        for (int k = 1; k <= 4; ++k) {
          for (int v = 1; v <= 4; ++v) {
            Profile p;
            p.set_transform(t);
            p.set_quantizer(QuantizerType::kKivi);
            p.set_codec(c);
            (void)p.Set(ParamId::kBitsKey, k);
            (void)p.Set(ParamId::kBitsValue, v);
            (void)p.Set(ParamId::kGroup, group);
            Candidate cand;
            cand.profile = p;
            cand.codec.compression_ratio = cr_gain * 16.0 / (k + v) * (group == 64 ? 1.05 : 1.0);
            cand.codec.encode_bytes_per_second = 1e9 * (1.0 + uniform());
            cand.codec.decode_bytes_per_second = 1e9 * (1.0 + uniform());
            out.candidates.push_back(cand);
            out.quality.push_back(1.0 - penalty * (std::pow(2.0, -k) * 4 + std::pow(2.0, -v) * 2) -
                                  (group == 64 ? 0.005 : 0.0));
          }
        }
        ++family;
      }
    }
  }
  return out;
}

class TableEvaluator final : public Evaluator {
 public:
  TableEvaluator(const std::vector<Candidate>* candidates, const std::vector<double>* quality)
      : candidates_(candidates), quality_(quality) {}
  std::string name() const override { return "test-table"; }
  bool is_proxy() const override { return true; }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    ++calls;
    if (fail_after >= 0 && calls > fail_after) return Status::Unavailable("injected failure");
    for (size_t i = 0; i < candidates_->size(); ++i) {
      if ((*candidates_)[i].profile == profile) return PointEstimate((*quality_)[i]);
    }
    return Status::NotFound("not a candidate");
  }
  int calls = 0;
  int fail_after = -1;

 private:
  const std::vector<Candidate>* candidates_;
  const std::vector<double>* quality_;
};

}  // namespace kvserve::profiler::testing

#endif  // KVSERVE_PROFILER_TEST_UTIL_H_
