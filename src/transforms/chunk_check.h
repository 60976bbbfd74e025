// Copyright kvserve authors. Argument checks shared by the transforms.
#ifndef KVSERVE_TRANSFORMS_CHUNK_CHECK_H_
#define KVSERVE_TRANSFORMS_CHUNK_CHECK_H_

#include <string>
#include <string_view>

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::transforms {

// Returns InvalidArgument unless `x` has positive heads, tokens and dim and
// non-null data. `who` names the transform in the message.
inline Status CheckChunkTensor(const pipeline::ChunkTensor& x, std::string_view who) {
  if (x.heads <= 0 || x.tokens <= 0 || x.dim <= 0) {
    return Status::InvalidArgument(
        std::string(who) + ": chunk tensor must have positive heads, tokens and dim (got " +
        std::to_string(x.heads) + "x" + std::to_string(x.tokens) + "x" +
        std::to_string(x.dim) + ")");
  }
  if (x.data == nullptr) {
    return Status::InvalidArgument(std::string(who) + ": chunk tensor has null data");
  }
  return Status::Ok();
}

// The side reader handed to Inverse holds exactly the transform's side bytes
// (the frame layer length-prefixes them). Returns Corruption unless exactly
// `expected` bytes remain.
inline Status CheckSideSize(const pipeline::ByteReader& side, size_t expected,
                            std::string_view who) {
  if (side.remaining() != expected) {
    return Status::Corruption(std::string(who) + ": side bytes must be exactly " +
                              std::to_string(expected) + " bytes, got " +
                              std::to_string(side.remaining()));
  }
  return Status::Ok();
}

}  // namespace kvserve::transforms

#endif  // KVSERVE_TRANSFORMS_CHUNK_CHECK_H_
