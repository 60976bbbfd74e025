// Copyright kvserve authors.
#include "profiler/encoding.h"

#include <algorithm>
#include <limits>

namespace kvserve::profiler {
namespace {

constexpr int kTransforms = 4;
constexpr int kQuantizers = 7;
constexpr int kCodecs = 4;

bool Applies(const Profile& p, ParamId id) {
  return ParamApplies(id, p.transform(), p.quantizer(), p.codec());
}

}  // namespace

ProfileEncoder ProfileEncoder::Fit(std::span<const Profile> space, EncodingMode mode) {
  ProfileEncoder e;
  e.mode_ = mode;
  for (const ParamInfo& info : AllParams()) {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -lo;
    for (const Profile& p : space) {
      if (!Applies(p, info.id)) continue;
      const double v = static_cast<double>(p.Get(info.id));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi > lo) {  // constant parameters carry no information
      e.params_.push_back(info.id);
      e.min_.push_back(lo);
      e.max_.push_back(hi);
    }
  }
  const int categorical = mode == EncodingMode::kOneHotMinMax ? kTransforms + kQuantizers + kCodecs : 3;
  e.dimensions_ = categorical + static_cast<int>(e.params_.size());
  return e;
}

Eigen::MatrixXd ProfileEncoder::Encode(std::span<const Profile> profiles) const {
  Eigen::MatrixXd x = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(profiles.size()), dimensions_);
  for (size_t r = 0; r < profiles.size(); ++r) {
    const Profile& p = profiles[r];
    const auto row = static_cast<Eigen::Index>(r);
    int col = 0;
    const int t = static_cast<int>(p.transform());
    const int q = static_cast<int>(p.quantizer());
    const int c = static_cast<int>(p.codec());
    if (mode_ == EncodingMode::kOneHotMinMax) {
      x(row, t) = 1.0;
      x(row, kTransforms + q) = 1.0;
      x(row, kTransforms + kQuantizers + c) = 1.0;
      col = kTransforms + kQuantizers + kCodecs;
    } else {
      x(row, 0) = t;
      x(row, 1) = q;
      x(row, 2) = c;
      col = 3;
    }
    for (size_t i = 0; i < params_.size(); ++i, ++col) {
      const double v = static_cast<double>(p.Get(params_[i]));
      if (mode_ == EncodingMode::kRaw) {
        x(row, col) = v;
      } else if (Applies(p, params_[i])) {
        x(row, col) = std::clamp((v - min_[i]) / (max_[i] - min_[i]), 0.0, 1.0);
      }
    }
  }
  return x;
}

}  // namespace kvserve::profiler
