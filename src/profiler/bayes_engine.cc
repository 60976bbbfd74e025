// Copyright kvserve authors. Constraint-aware Bayesian optimisation with a
// Gaussian process (paper Alg. 1).
#include "profiler/bayes_engine.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "profiler/acquisition.h"
#include "profiler/encoding.h"
#include "profiler/gaussian_process.h"
#include "profiler/search_common.h"

namespace kvserve::profiler {
namespace {

constexpr std::array<ParamId, 8> kBitParams = {
    ParamId::kBitsKey,  ParamId::kBitsValue, ParamId::kLevelsKey,  ParamId::kLevelsValue,
    ParamId::kBitsHigh, ParamId::kBitsLow,   ParamId::kBitsFirst, ParamId::kBitsLast};

}  // namespace

PruningIndex PruningIndex::Build(std::span<const Candidate> candidates) {
  PruningIndex index;
  std::map<std::string, int> families;
  for (const Candidate& c : candidates) {
    Profile family = c.profile;
    std::array<int64_t, 8> bits{};
    for (size_t i = 0; i < kBitParams.size(); ++i) {
      bits[i] = c.profile.Get(kBitParams[i]);
      family.Clear(kBitParams[i]);
    }
    auto [it, inserted] =
        families.emplace(family.ToString(), static_cast<int>(families.size()));
    index.family.push_back(it->second);
    index.bits.push_back(bits);
    index.cr.push_back(c.codec.compression_ratio);
  }
  return index;
}

int Prune(const PruningIndex& index, int evaluated, double quality, double quality_min,
          const BayesOptions& options, std::vector<char>* alive) {
  int pruned = 0;
  const double cr = index.cr[evaluated];
  const size_t n = index.cr.size();
  if (quality >= quality_min) {
    // Nothing with a lower CR can beat a feasible candidate.
    const double floor = cr * (1.0 - options.prune_epsilon);
    for (size_t i = 0; i < n; ++i) {
      if ((*alive)[i] && index.cr[i] < floor) {
        (*alive)[i] = 0;
        ++pruned;
      }
    }
  } else if (quality < quality_min - options.infeasible_margin) {
    // Monotonicity: fewer bits, all else equal, cannot raise quality.
    const double ceiling = cr * (1.0 + options.prune_epsilon);
    const int family = index.family[evaluated];
    const auto& bits = index.bits[evaluated];
    for (size_t i = 0; i < n; ++i) {
      if (!(*alive)[i] || index.family[i] != family || index.cr[i] <= ceiling) continue;
      bool fewer = true;
      for (size_t b = 0; b < bits.size(); ++b) fewer = fewer && index.bits[i][b] <= bits[b];
      if (fewer) {
        (*alive)[i] = 0;
        ++pruned;
      }
    }
  }
  return pruned;
}

namespace {

class BayesSearcher final : public Searcher {
 public:
  explicit BayesSearcher(const BayesOptions& options) : options_(options) {}
  std::string name() const override { return "bayes"; }

  Result<SearchTrace> Search(const SearchProblem& problem, Evaluator& evaluator,
                             const ProgressFn& progress) override {
    const int n = static_cast<int>(problem.candidates.size());
    if (n == 0) return Status::InvalidArgument("search: no candidates");
    std::vector<Profile> profiles;
    profiles.reserve(n);
    double cr_max = 0.0;
    for (const Candidate& c : problem.candidates) {
      profiles.push_back(c.profile);
      cr_max = std::max(cr_max, c.codec.compression_ratio);
    }
    const ProfileEncoder encoder = ProfileEncoder::Fit(
        profiles, options_.encoding ? EncodingMode::kOneHotMinMax : EncodingMode::kRaw);
    const Eigen::MatrixXd features = encoder.Encode(profiles);
    const PruningIndex pruning = PruningIndex::Build(problem.candidates);

    std::vector<char> alive(n, 1), evaluated(n, 0);
    std::mt19937_64 rng(problem.seed);
    TraceBuilder trace(problem, progress);
    GaussianProcess gp;
    std::optional<GpHyperparameters> warm;
    GpOptions gp_options;
    gp_options.max_evaluations = options_.hyper_evaluations;
    std::vector<int> observed;
    std::vector<double> observed_quality;
    int failures = 0;
    int bo_step = 0;

    while (trace.evaluations() < problem.budget) {
      std::vector<int> remaining;
      for (int i = 0; i < n; ++i) {
        if (alive[i] && !evaluated[i]) remaining.push_back(i);
      }
      if (remaining.empty()) return trace.Finish("space exhausted");

      int pick = -1;
      if (trace.evaluations() < options_.initial_random) {
        pick = remaining[UniformIndex(rng, static_cast<int>(remaining.size()))];
      } else {
        Eigen::MatrixXd x(static_cast<Eigen::Index>(observed.size()), features.cols());
        Eigen::VectorXd y(static_cast<Eigen::Index>(observed.size()));
        for (size_t i = 0; i < observed.size(); ++i) {
          x.row(static_cast<Eigen::Index>(i)) = features.row(observed[i]);
          y(static_cast<Eigen::Index>(i)) = observed_quality[i];
        }
        KVSERVE_RETURN_IF_ERROR(gp.Fit(x, y, gp_options, warm ? &*warm : nullptr));
        warm = gp.hyperparameters();
        Eigen::MatrixXd xs(static_cast<Eigen::Index>(remaining.size()), features.cols());
        for (size_t i = 0; i < remaining.size(); ++i) {
          xs.row(static_cast<Eigen::Index>(i)) = features.row(remaining[i]);
        }
        Eigen::VectorXd mean, variance;
        gp.Predict(xs, &mean, &variance);
        std::vector<double> cr(remaining.size());
        for (size_t i = 0; i < remaining.size(); ++i) cr[i] = pruning.cr[remaining[i]];
        const double lambda = ExplorationWeight(options_.exploration, options_.lambda0,
                                                options_.lambda_decay, bo_step++);
        const std::vector<double> score =
            Acquisition({mean.data(), static_cast<size_t>(mean.size())},
                        {variance.data(), static_cast<size_t>(variance.size())}, cr, cr_max,
                        problem.quality_min, lambda);
        pick = remaining[std::max_element(score.begin(), score.end()) - score.begin()];
      }

      auto q = evaluator.Evaluate(problem.candidates[pick].profile);
      if (!q.ok()) return q.status();
      evaluated[pick] = 1;
      observed.push_back(pick);
      observed_quality.push_back(q->quality);
      if (options_.pruning) {
        Prune(pruning, pick, q->quality, problem.quality_min, options_, &alive);
      }
      int left = 0;
      for (int i = 0; i < n; ++i) left += alive[i] && !evaluated[i];
      const bool improved = trace.Record(pick, *q, left);
      // Failures count only once something is feasible: before that the
      // engine is still looking for the feasible region, not refining it.
      if (trace.best_cr() > 0.0) failures = improved ? 0 : failures + 1;
      if (options_.early_stopping && failures >= options_.patience) {
        return trace.Finish("early stop: " + std::to_string(failures) +
                            " evaluations without a better feasible CR");
      }
    }
    return trace.Finish("budget");
  }

 private:
  BayesOptions options_;
};

}  // namespace
}  // namespace kvserve::profiler

namespace kvserve {
std::unique_ptr<Searcher> MakeBayesSearcher(const BayesOptions& options) {
  return std::make_unique<profiler::BayesSearcher>(options);
}
}  // namespace kvserve
