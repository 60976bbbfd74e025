// Copyright kvserve authors. The identity transform: a no-op.
#ifndef KVSERVE_TRANSFORMS_IDENTITY_H_
#define KVSERVE_TRANSFORMS_IDENTITY_H_

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::transforms {

// Leaves the chunk untouched and writes no side bytes.
// Thread safety: stateless; safe to share across threads.
class IdentityTransform final : public pipeline::Transform {
 public:
  // Returns OK for any valid chunk tensor (InvalidArgument for an empty or
  // null one). Writes nothing to `side`.
  Status Forward(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteWriter& side) const override;
  // Returns OK and leaves `x` untouched when `side` is empty; Corruption if it
  // holds any bytes; InvalidArgument for an empty or null tensor.
  Status Inverse(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteReader& side) const override;
  // Always row-local; TransformRows leaves the rows untouched.
  bool RowLocal(int head_dim) const override { return true; }
  void TransformRows(const pipeline::ChunkInfo& info, int head, float* rows, int count,
                     bool inverse) const override {}
};

}  // namespace kvserve::transforms

#endif  // KVSERVE_TRANSFORMS_IDENTITY_H_
