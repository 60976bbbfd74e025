// Copyright kvserve authors.
#include "transforms/identity.h"

#include "transforms/chunk_check.h"

namespace kvserve::transforms {

Status IdentityTransform::Forward(const pipeline::ChunkInfo& info,
                                  const pipeline::ChunkTensor& x,
                                  pipeline::ByteWriter& side) const {
  return CheckChunkTensor(x, "identity");
}

Status IdentityTransform::Inverse(const pipeline::ChunkInfo& info,
                                  const pipeline::ChunkTensor& x,
                                  pipeline::ByteReader& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "identity"));
  return CheckSideSize(side, 0, "identity");
}

}  // namespace kvserve::transforms
