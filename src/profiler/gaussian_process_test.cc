// Copyright kvserve authors.
#include "profiler/gaussian_process.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kvserve::profiler {
namespace {

Eigen::MatrixXd RandomInputs(std::mt19937_64& rng, int n, int d) {
  Eigen::MatrixXd x(n, d);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) x(i, j) = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  }
  return x;
}

Eigen::VectorXd Smooth(const Eigen::MatrixXd& x) {
  Eigen::VectorXd y(x.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    y(i) = std::sin(3.0 * x(i, 0)) + 0.5 * x(i, 1) * x(i, 1) - 0.2 * x(i, 2);
  }
  return y;
}

class GaussianProcessTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GaussianProcessTest, InterpolatesNoiselessData) {
  std::mt19937_64 rng(GetParam());
  const Eigen::MatrixXd x = RandomInputs(rng, 25, 3);
  const Eigen::VectorXd y = Smooth(x);
  GpOptions options;
  options.max_log_noise = -8.0;  // noiseless
  GaussianProcess gp;
  ASSERT_TRUE(gp.Fit(x, y, options).ok());
  Eigen::VectorXd mean, variance;
  gp.Predict(x, &mean, &variance);
  EXPECT_LT((mean - y).cwiseAbs().maxCoeff(), 1e-3);
}

TEST_P(GaussianProcessTest, PosteriorVarianceShrinksAtObservedPoints) {
  std::mt19937_64 rng(GetParam());
  const Eigen::MatrixXd x = RandomInputs(rng, 20, 3);
  const Eigen::MatrixXd far = RandomInputs(rng, 20, 3).array() + 3.0;  // outside the data
  GaussianProcess gp;
  ASSERT_TRUE(gp.Fit(x, Smooth(x), GpOptions{}).ok());
  Eigen::VectorXd m_obs, v_obs, m_far, v_far;
  gp.Predict(x, &m_obs, &v_obs);
  gp.Predict(far, &m_far, &v_far);
  EXPECT_GE(v_obs.minCoeff(), 0.0);
  EXPECT_LT(v_obs.maxCoeff(), v_far.minCoeff());
}

TEST_P(GaussianProcessTest, LikelihoodGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(GetParam());
  const int d = 4;
  const Eigen::MatrixXd x = RandomInputs(rng, 15, d);
  Eigen::VectorXd y = Smooth(x);
  GpOptions fixed;
  fixed.optimize = false;
  GaussianProcess gp;
  ASSERT_TRUE(gp.Fit(x, y, fixed).ok());
  Eigen::VectorXd theta(d + 2);
  for (int i = 0; i < d + 2; ++i) {
    theta(i) = -1.0 + 1.5 * static_cast<double>(rng() >> 11) * 0x1.0p-53;
  }
  theta(d + 1) = -2.0;
  Eigen::VectorXd grad;
  gp.LogMarginalLikelihood(theta, &grad);
  for (int i = 0; i < d + 2; ++i) {
    const double h = 1e-5;
    Eigen::VectorXd plus = theta, minus = theta;
    plus(i) += h;
    minus(i) -= h;
    const double numeric = (gp.LogMarginalLikelihood(plus, nullptr) -
                            gp.LogMarginalLikelihood(minus, nullptr)) / (2 * h);
    EXPECT_NEAR(grad(i), numeric, 1e-4 * std::max(1.0, std::abs(numeric))) << "theta " << i;
  }
}

TEST_P(GaussianProcessTest, OptimisationDoesNotLowerTheLikelihood) {
  std::mt19937_64 rng(GetParam());
  const Eigen::MatrixXd x = RandomInputs(rng, 30, 3);
  const Eigen::VectorXd y = Smooth(x);
  GpOptions fixed;
  fixed.optimize = false;
  GaussianProcess initial, fitted;
  ASSERT_TRUE(initial.Fit(x, y, fixed).ok());
  ASSERT_TRUE(fitted.Fit(x, y, GpOptions{}).ok());
  const double before = initial.LogMarginalLikelihood(initial.hyperparameters().Pack(), nullptr);
  const double after = fitted.LogMarginalLikelihood(fitted.hyperparameters().Pack(), nullptr);
  EXPECT_GE(after, before - 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Seeds, GaussianProcessTest, ::testing::Values(1u, 2u, 3u, 4u));

TEST(GaussianProcess, RejectsMismatchedInputs) {
  GaussianProcess gp;
  EXPECT_FALSE(gp.Fit(Eigen::MatrixXd(3, 2), Eigen::VectorXd(2), GpOptions{}).ok());
  EXPECT_FALSE(gp.Fit(Eigen::MatrixXd(0, 2), Eigen::VectorXd(0), GpOptions{}).ok());
}

}  // namespace
}  // namespace kvserve::profiler
