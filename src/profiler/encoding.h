// Copyright kvserve authors. Feature encoding of profiles for the GP
// surrogate (paper Alg. 1 line 1): one-hot categorical choices and min-max
// scaled numeric parameters, or raw features for the "w/o Enc" ablation.
#ifndef KVSERVE_PROFILER_ENCODING_H_
#define KVSERVE_PROFILER_ENCODING_H_

#include <span>
#include <vector>

#include <Eigen/Dense>

#include "kvserve/profile.h"

namespace kvserve::profiler {

enum class EncodingMode : uint8_t {
  // transform, quantizer and codec one-hot; every parameter that varies in
  // the space min-max scaled to [0, 1] over the space, 0 where it does not
  // apply. Every feature lies in [0, 1].
  kOneHotMinMax = 0,
  // Component indices (0..n-1) and raw effective parameter values
  // (Profile::Get), whether or not they apply: the ablation baseline.
  kRaw = 1,
};

// Fixed on a set of profiles (the space), then applied to any of them.
// Thread safety: immutable after Fit.
class ProfileEncoder {
 public:
  static ProfileEncoder Fit(std::span<const Profile> space, EncodingMode mode);
  int dimensions() const { return dimensions_; }
  // One row per profile.
  Eigen::MatrixXd Encode(std::span<const Profile> profiles) const;

 private:
  EncodingMode mode_ = EncodingMode::kOneHotMinMax;
  std::vector<ParamId> params_;  // parameters that vary in the space
  std::vector<double> min_, max_;
  int dimensions_ = 0;
};

}  // namespace kvserve::profiler

#endif  // KVSERVE_PROFILER_ENCODING_H_
