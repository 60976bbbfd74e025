// Copyright kvserve authors. Token delta against per-chunk anchor tokens
// (CacheGen): neighbouring tokens' K/V are similar, so their differences have
// a smaller range than the values and quantize with less error.
#ifndef KVSERVE_TRANSFORMS_DELTA_H_
#define KVSERVE_TRANSFORMS_DELTA_H_

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::transforms {

// Float math (normative, docs/format.md): with A = anchor interval (A == 0
// means A = tokens, i.e. one anchor at the chunk's first token), the chunk's
// tokens t = 0..tokens-1 (chunk-relative) form runs [k*A, (k+1)*A); the first
// token a = t - t % A of each run is its anchor. For every head h, non-anchor
// token t and dim i:
//   Forward:  y[h][t][i] = x[h][t][i] - x[h][a][i]   (one fp32 subtraction)
//   Inverse:  x[h][t][i] = y[h][t][i] + y[h][a][i]   (one fp32 addition)
// Anchor tokens are unchanged. No side bytes. The round trip is not bit-exact
// (two roundings); for finite inputs its error is at most
// ulp(|x - a|)/2 + ulp(|x|)/2. Non-finite anchors turn their run into NaN/inf.
//
// Thread safety: immutable after construction; safe to share across threads.
class DeltaTransform final : public pipeline::Transform {
 public:
  // `anchor_interval` in tokens, >= 0 (0 = one anchor per chunk). A negative
  // value makes Forward/Inverse return InvalidArgument.
  explicit DeltaTransform(int anchor_interval) : anchor_interval_(anchor_interval) {}

  // Replaces every non-anchor token by its difference to its run's anchor.
  // Returns InvalidArgument for a negative anchor interval or an empty/null
  // tensor. Writes no side bytes.
  Status Forward(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteWriter& side) const override;
  // Adds each run's anchor back to its other tokens. Corruption if `side` is
  // not empty (x is then untouched); InvalidArgument as for Forward.
  Status Inverse(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteReader& side) const override;

  int anchor_interval() const { return anchor_interval_; }

 private:
  int anchor_interval_;
};

}  // namespace kvserve::transforms

#endif  // KVSERVE_TRANSFORMS_DELTA_H_
