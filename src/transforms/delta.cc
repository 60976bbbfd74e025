// Copyright kvserve authors.
#include "transforms/delta.h"

#include <string>

#include "transforms/chunk_check.h"

namespace kvserve::transforms {
namespace {

Status CheckAnchor(int anchor_interval) {
  if (anchor_interval < 0) {
    return Status::InvalidArgument("delta: anchor interval must be >= 0, got " +
                                   std::to_string(anchor_interval));
  }
  return Status::Ok();
}

// Applies y = x -/+ anchor to every non-anchor token. Each element is one
// independent fp32 operation, so loop order (and any auto-vectorization)
// cannot change the result.
template <bool kForward>
void ApplyDelta(const pipeline::ChunkTensor& x, int anchor_interval) {
  const int run = anchor_interval == 0 ? x.tokens : anchor_interval;
  for (int h = 0; h < x.heads; ++h) {
    for (int anchor = 0; anchor < x.tokens; anchor += run) {
      const float* a = x.row(h, anchor);
      const int end = run < x.tokens - anchor ? anchor + run : x.tokens;
      for (int t = anchor + 1; t < end; ++t) {
        float* v = x.row(h, t);
        for (int i = 0; i < x.dim; ++i) {
          if constexpr (kForward) {
            v[i] = v[i] - a[i];
          } else {
            v[i] = v[i] + a[i];
          }
        }
      }
    }
  }
}

}  // namespace

Status DeltaTransform::Forward(const pipeline::ChunkInfo& info,
                               const pipeline::ChunkTensor& x,
                               pipeline::ByteWriter& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckAnchor(anchor_interval_));
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "delta"));
  ApplyDelta<true>(x, anchor_interval_);
  return Status::Ok();
}

Status DeltaTransform::Inverse(const pipeline::ChunkInfo& info,
                               const pipeline::ChunkTensor& x,
                               pipeline::ByteReader& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckAnchor(anchor_interval_));
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "delta"));
  KVSERVE_RETURN_IF_ERROR(CheckSideSize(side, 0, "delta"));
  ApplyDelta<false>(x, anchor_interval_);
  return Status::Ok();
}

}  // namespace kvserve::transforms
