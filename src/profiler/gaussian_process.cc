// Copyright kvserve authors.
#include "profiler/gaussian_process.h"

#include <cmath>
#include <limits>
#include <vector>

#include <nlopt.hpp>

namespace kvserve::profiler {
namespace {

constexpr double kSqrt5 = 2.23606797749979;
constexpr double kJitter = 1e-8;
constexpr Eigen::Index kSecondStartBelow = 100;

// Squared scaled distances between rows of a and b (length scales applied).
Eigen::MatrixXd ScaledSquaredDistances(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                                       const Eigen::VectorXd& inv_length) {
  const Eigen::MatrixXd as = a * inv_length.asDiagonal();
  const Eigen::MatrixXd bs = b * inv_length.asDiagonal();
  Eigen::MatrixXd d2 = -2.0 * as * bs.transpose();
  d2.colwise() += as.rowwise().squaredNorm();
  d2.rowwise() += bs.rowwise().squaredNorm().transpose();
  return d2.cwiseMax(0.0);
}

}  // namespace

Eigen::VectorXd GpHyperparameters::Pack() const {
  Eigen::VectorXd theta(log_length.size() + 2);
  theta.head(log_length.size()) = log_length;
  theta(log_length.size()) = log_signal;
  theta(log_length.size() + 1) = log_noise;
  return theta;
}

GpHyperparameters GpHyperparameters::Unpack(const Eigen::VectorXd& theta) {
  GpHyperparameters h;
  const Eigen::Index d = theta.size() - 2;
  h.log_length = theta.head(d);
  h.log_signal = theta(d);
  h.log_noise = theta(d + 1);
  return h;
}

Eigen::MatrixXd Matern52(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                         const GpHyperparameters& hyper) {
  const Eigen::VectorXd inv_length = (-hyper.log_length.array()).exp().matrix();
  const double sf2 = std::exp(2.0 * hyper.log_signal);
  const Eigen::ArrayXXd r = ScaledSquaredDistances(a, b, inv_length).array().sqrt();
  return (sf2 * (1.0 + kSqrt5 * r + (5.0 / 3.0) * r.square()) * (-kSqrt5 * r).exp()).matrix();
}

double GaussianProcess::LogMarginalLikelihood(const Eigen::VectorXd& theta,
                                              Eigen::VectorXd* gradient) const {
  const Eigen::Index n = x_.rows();
  const Eigen::Index d = x_.cols();
  const GpHyperparameters h = GpHyperparameters::Unpack(theta);
  const Eigen::VectorXd inv_length = (-h.log_length.array()).exp().matrix();
  const double sf2 = std::exp(2.0 * h.log_signal);
  const double sn2 = std::exp(2.0 * h.log_noise);
  const Eigen::ArrayXXd r = ScaledSquaredDistances(x_, x_, inv_length).array().sqrt();
  const Eigen::ArrayXXd decay = (-kSqrt5 * r).exp();
  Eigen::MatrixXd k = (sf2 * (1.0 + kSqrt5 * r + (5.0 / 3.0) * r.square()) * decay).matrix();
  const Eigen::MatrixXd k_signal = k;
  k.diagonal().array() += sn2 + kJitter;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (gradient != nullptr) gradient->setZero(theta.size());
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(y_);
  const double log_det = 2.0 * llt.matrixLLT().diagonal().array().log().sum();
  const double lml = -0.5 * y_.dot(alpha) - 0.5 * log_det -
                     0.5 * static_cast<double>(n) * std::log(2.0 * M_PI);
  if (!std::isfinite(lml)) return -std::numeric_limits<double>::infinity();
  if (gradient == nullptr) return lml;

  // dL/dtheta = 1/2 tr(W dK/dtheta), W = alpha alpha^T - K^-1.
  Eigen::MatrixXd w = llt.solve(Eigen::MatrixXd::Identity(n, n));
  w = alpha * alpha.transpose() - w;
  Eigen::VectorXd& g = *gradient;
  g(d) = (w.array() * k_signal.array()).sum();  // dK/dlog sf = 2 K_signal
  g(d + 1) = sn2 * w.trace();                    // dK/dlog sn = 2 sn2 I
  // dK_ij/dlog l_k = 5/3 sf2 (1 + sqrt5 r) e^{-sqrt5 r} (x_ik - x_jk)^2 / l_k^2.
  const Eigen::ArrayXXd coeff =
      w.array() * ((5.0 / 3.0) * sf2 * (1.0 + kSqrt5 * r) * decay);
  const Eigen::MatrixXd xt = x_.transpose();
  Eigen::VectorXd acc = Eigen::VectorXd::Zero(d);
  for (Eigen::Index j = 0; j < n; ++j) {
    for (Eigen::Index i = j + 1; i < n; ++i) {
      const double c = coeff(i, j);
      acc.noalias() += c * (xt.col(i) - xt.col(j)).cwiseAbs2();
    }
  }
  // Sum over i < j counts each symmetric pair once: 1/2 * 2 = 1.
  g.head(d) = acc.cwiseProduct(inv_length.cwiseAbs2());
  return lml;
}

Status GaussianProcess::Factor() {
  Eigen::MatrixXd k = Matern52(x_, x_, hyper_);
  k.diagonal().array() += std::exp(2.0 * hyper_.log_noise) + kJitter;
  for (int attempt = 0; attempt < 6; ++attempt) {
    llt_.compute(k);
    if (llt_.info() == Eigen::Success) {
      alpha_ = llt_.solve(y_);
      return Status::Ok();
    }
    k.diagonal().array() += std::pow(10.0, -6 + attempt);
  }
  return Status::Internal("GP covariance is not positive definite");
}

Status GaussianProcess::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                            const GpOptions& options, const GpHyperparameters* start) {
  if (x.rows() == 0 || x.rows() != y.size()) {
    return Status::InvalidArgument("GP fit: need as many targets as rows, at least one");
  }
  x_ = x;
  const Eigen::Index n = y.size();
  const Eigen::Index d = x.cols();
  y_mean_ = y.mean();
  const double var = (y.array() - y_mean_).square().sum() / static_cast<double>(n);
  y_scale_ = var > 1e-18 ? std::sqrt(var) : 1.0;
  y_ = (y.array() - y_mean_) / y_scale_;

  GpHyperparameters initial;
  initial.log_length = Eigen::VectorXd::Constant(d, 0.0);
  initial.log_signal = 0.0;
  initial.log_noise = std::log(0.05);
  std::vector<Eigen::VectorXd> starts;
  const bool warm = start != nullptr && start->log_length.size() == d;
  if (warm) starts.push_back(start->Pack());
  // The default start guards against a poor warm start while data are few;
  // with many observations the previous optimum moves little and a second
  // start would double the cost of a fit.
  if (!warm || n < kSecondStartBelow) starts.push_back(initial.Pack());
  hyper_ = GpHyperparameters::Unpack(starts.front());

  const Eigen::Index dim = d + 2;
  std::vector<double> lower(dim), upper(dim);
  for (Eigen::Index i = 0; i < d; ++i) {
    lower[i] = options.min_log_length;
    upper[i] = options.max_log_length;
  }
  lower[d] = options.min_log_signal;
  upper[d] = options.max_log_signal;
  lower[d + 1] = options.min_log_noise;
  upper[d + 1] = options.max_log_noise;

  if (options.optimize && n >= 2) {
    struct Context {
      const GaussianProcess* gp;
      double best = -std::numeric_limits<double>::infinity();
      Eigen::VectorXd best_theta;
    } ctx{this, -std::numeric_limits<double>::infinity(), starts.front()};
    auto objective = [](const std::vector<double>& v, std::vector<double>& grad,
                        void* data) -> double {
      auto* c = static_cast<Context*>(data);
      const Eigen::VectorXd theta = Eigen::Map<const Eigen::VectorXd>(v.data(), v.size());
      Eigen::VectorXd g;
      double value = c->gp->LogMarginalLikelihood(theta, grad.empty() ? nullptr : &g);
      if (!grad.empty()) Eigen::Map<Eigen::VectorXd>(grad.data(), grad.size()) = g;
      if (!std::isfinite(value)) return -1e300;
      if (value > c->best) {
        c->best = value;
        c->best_theta = theta;
      }
      return value;
    };
    for (const Eigen::VectorXd& s : starts) {
      nlopt::opt opt(nlopt::LD_LBFGS, static_cast<unsigned>(dim));
      opt.set_lower_bounds(lower);
      opt.set_upper_bounds(upper);
      opt.set_max_objective(objective, &ctx);
      opt.set_maxeval(options.max_evaluations);
      opt.set_ftol_rel(1e-7);
      std::vector<double> v(dim);
      for (Eigen::Index i = 0; i < dim; ++i) {
        v[i] = std::clamp(s(i), lower[i], upper[i]);
      }
      double value = 0.0;
      try {
        opt.optimize(v, value);
      } catch (const std::exception&) {
        // NLopt reports round-off and forced stops by throwing; the best
        // point seen is kept in ctx either way.
      }
    }
    if (std::isfinite(ctx.best)) hyper_ = GpHyperparameters::Unpack(ctx.best_theta);
  }
  return Factor();
}

void GaussianProcess::Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean,
                              Eigen::VectorXd* variance) const {
  const Eigen::MatrixXd ks = Matern52(xs, x_, hyper_);
  *mean = (ks * alpha_).array() * y_scale_ + y_mean_;
  if (variance != nullptr) {
    const Eigen::MatrixXd v = llt_.matrixL().solve(ks.transpose());
    const double sf2 = std::exp(2.0 * hyper_.log_signal);
    *variance = ((sf2 - v.colwise().squaredNorm().array()).cwiseMax(0.0) * y_scale_ * y_scale_)
                    .matrix()
                    .transpose();
  }
}

}  // namespace kvserve::profiler
