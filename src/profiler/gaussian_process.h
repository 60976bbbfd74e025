// Copyright kvserve authors. Gaussian-process regression with a Matérn 5/2
// ARD kernel (one length scale per input dimension), a signal variance and a
// Gaussian noise term; hyperparameters by maximising the log marginal
// likelihood with NLopt's L-BFGS (analytic gradient), Cholesky via Eigen.
//
//   k(x, x') = sf2 (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r),
//   r^2 = sum_d (x_d - x'_d)^2 / l_d^2,   K_y = K + sn2 I.
//
// Targets are standardised (mean 0, unit variance) before fitting; Predict
// returns means and latent-function variances in the original units.
// Thread safety: const methods may run concurrently.
#ifndef KVSERVE_PROFILER_GAUSSIAN_PROCESS_H_
#define KVSERVE_PROFILER_GAUSSIAN_PROCESS_H_

#include <Eigen/Dense>

#include "kvserve/status.h"

namespace kvserve::profiler {

// Log-space hyperparameters, packed as [log l_1..log l_d, log sf, log sn].
struct GpHyperparameters {
  Eigen::VectorXd log_length;
  double log_signal = 0.0;  // log sf (standard deviation, standardised units)
  double log_noise = -3.0;  // log sn
  Eigen::VectorXd Pack() const;
  static GpHyperparameters Unpack(const Eigen::VectorXd& theta);
};

struct GpOptions {
  bool optimize = true;          // false: keep the given/initial hyperparameters
  int max_evaluations = 40;      // objective evaluations per start
  double min_log_length = -4.6;  // ~0.01
  double max_log_length = 4.6;   // ~100
  double min_log_signal = -3.0;
  double max_log_signal = 3.0;
  double min_log_noise = -9.2;   // ~1e-4
  double max_log_noise = 0.0;
};

class GaussianProcess {
 public:
  // Fits on rows of `x` (n x d) and targets `y` (n). Starts the optimiser at
  // `start` when given (warm start), and also at a default point unless a
  // warm start is given and n >= 100; keeps the best point seen. InvalidArgument for mismatched or empty inputs; Internal if no
  // hyperparameters give a positive-definite covariance.
  [[nodiscard]] Status Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                           const GpOptions& options, const GpHyperparameters* start = nullptr);

  // Posterior mean and latent variance (>= 0) at rows of `xs`.
  void Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean, Eigen::VectorXd* variance) const;

  // Log marginal likelihood of the standardised targets at `theta` (packed),
  // and its gradient when `gradient` is non-null. -inf (gradient zero) when
  // the covariance is not positive definite. Valid after Fit (uses its data).
  double LogMarginalLikelihood(const Eigen::VectorXd& theta, Eigen::VectorXd* gradient) const;

  const GpHyperparameters& hyperparameters() const { return hyper_; }
  int observations() const { return static_cast<int>(x_.rows()); }

 private:
  [[nodiscard]] Status Factor();
  Eigen::MatrixXd x_;
  Eigen::VectorXd y_;  // standardised
  double y_mean_ = 0.0, y_scale_ = 1.0;
  GpHyperparameters hyper_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;
};

// The Matérn 5/2 ARD kernel matrix between rows of `a` and `b`.
Eigen::MatrixXd Matern52(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                         const GpHyperparameters& hyper);

}  // namespace kvserve::profiler

#endif  // KVSERVE_PROFILER_GAUSSIAN_PROCESS_H_
