// Copyright kvserve authors. One Bayesian engine iteration at n observations:
// GP fit (hyperparameters by marginal likelihood, warm-started as in the
// engine) + posterior and acquisition over every candidate of the default
// space. Issue target: <= 1 s at 300 observations on the 2-core machine.
//   build/bench/profiler_bench --benchmark_filter=EngineIteration
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>

#include "kvserve/profiler.h"
#include "profiler/acquisition.h"
#include "profiler/encoding.h"
#include "profiler/gaussian_process.h"

namespace kvserve::profiler {
namespace {

// Run from the repository root, or set KVSERVE_SOURCE_DIR.
std::string SourceDir() {
  const char* dir = std::getenv("KVSERVE_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

const std::vector<Profile>& DefaultSpace() {
  static const std::vector<Profile> space = [] {
    auto s = StrategySpace::Load(SourceDir() + "/configs/strategy_space.json");
    return s.ok() ? s->profiles() : std::vector<Profile>{};
  }();
  return space;
}

void BM_EngineIteration(benchmark::State& state) {
  const auto& space = DefaultSpace();
  if (space.empty()) {
    state.SkipWithError("cannot load configs/strategy_space.json");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  const ProfileEncoder encoder = ProfileEncoder::Fit(space, EncodingMode::kOneHotMinMax);
  const Eigen::MatrixXd features = encoder.Encode(space);
  std::mt19937_64 rng(1);
  Eigen::MatrixXd x(n, features.cols());
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % space.size());
    x.row(i) = features.row(c);
    y(i) = 0.9 + 0.1 * std::tanh(features.row(c).sum() - 4.0) +
           1e-3 * static_cast<double>(rng() % 100) / 100.0;
  }
  std::vector<double> cr(space.size());
  for (size_t i = 0; i < cr.size(); ++i) cr[i] = 1.0 + static_cast<double>(rng() % 1000) / 100;
  // Warm start as the engine has it: hyperparameters of the previous fit.
  GaussianProcess warm;
  GpOptions options;
  options.max_evaluations = BayesOptions{}.hyper_evaluations;
  if (!warm.Fit(x.topRows(n - 1), y.head(n - 1), options).ok()) {
    state.SkipWithError("fit failed");
    return;
  }
  const GpHyperparameters previous = warm.hyperparameters();
  for (auto _ : state) {
    GaussianProcess gp;
    if (!gp.Fit(x, y, options, &previous).ok()) state.SkipWithError("fit failed");
    Eigen::VectorXd mean, variance;
    gp.Predict(features, &mean, &variance);
    auto score = Acquisition({mean.data(), static_cast<size_t>(mean.size())},
                             {variance.data(), static_cast<size_t>(variance.size())}, cr, 11.0,
                             0.97, 0.1);
    benchmark::DoNotOptimize(score.data());
  }
  state.counters["candidates"] = static_cast<double>(space.size());
  state.counters["features"] = static_cast<double>(features.cols());
}
BENCHMARK(BM_EngineIteration)->Arg(80)->Arg(300)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace kvserve::profiler
