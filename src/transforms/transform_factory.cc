// Copyright kvserve authors. CreateTransform (declared in core/stages.h).
#include <memory>
#include <string>

#include "kvserve/profile.h"
#include "core/stages.h"
#include "transforms/affine.h"
#include "transforms/delta.h"
#include "transforms/hadamard.h"
#include "transforms/identity.h"

namespace kvserve::pipeline {

Result<std::unique_ptr<Transform>> CreateTransform(const Profile& profile) {
  std::unique_ptr<Transform> transform;
  switch (profile.transform()) {
    case TransformType::kIdentity:
      transform = std::make_unique<transforms::IdentityTransform>();
      break;
    case TransformType::kDelta: {
      const int64_t anchor = profile.Get(ParamId::kAnchor);
      if (anchor < 0 || anchor > (int64_t{1} << 30)) {
        return Status::InvalidArgument("delta: anchor out of range: " + std::to_string(anchor));
      }
      transform = std::make_unique<transforms::DeltaTransform>(static_cast<int>(anchor));
      break;
    }
    case TransformType::kHadamard: {
      const int64_t seed = profile.Get(ParamId::kSeed);
      if (seed < 0) {
        return Status::InvalidArgument("hadamard: seed must be >= 0, got " +
                                       std::to_string(seed));
      }
      transform = std::make_unique<transforms::HadamardTransform>(static_cast<uint64_t>(seed));
      break;
    }
    case TransformType::kAffine:
      transform = std::make_unique<transforms::AffineTransform>();
      break;
  }
  if (transform == nullptr) {
    return Status::InvalidArgument(
        "unknown transform type " +
        std::to_string(static_cast<int>(profile.transform())));
  }
  return transform;
}

}  // namespace kvserve::pipeline
