// Copyright kvserve authors. Per-(head, channel) affine smoothing
// (AffineQuant-style): maps every channel's range over the chunk's tokens to
// [-1, 1]. A per-token quantizer then sees channels of equal range, so a
// few outlier channels (common in K) no longer set the step size of a whole
// token; this is what per-channel smoothing buys per-token V quantization and
// K with outlier channels. The cost is 8 side bytes per (head, channel) per
// chunk.
#ifndef KVSERVE_TRANSFORMS_AFFINE_H_
#define KVSERVE_TRANSFORMS_AFFINE_H_

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::transforms {

// Float math (normative, docs/format.md §Transforms/affine). For every head
// h and channel i, over the chunk's tokens t, considering finite values only:
//   mx = max_t x[h][t][i],  mn = min_t x[h][t][i]   (exact; a zero's sign
//                                                     does not affect results)
//   if the channel has no finite value: shift = +0, scale = 1; otherwise
//   shift = (0.5f * mx) + (0.5f * mn);  if shift == 0: shift = +0.0f
//   scale = (0.5f * mx) - (0.5f * mn);  if scale == 0: scale = 1.0f
// (each product, the sum and the difference one fp32 rounding; halving first
// keeps both within the fp32 range for any finite mx, mn).
//   Forward:  y = (x - shift) / scale      (fp32 sub, then IEEE fp32 div)
//   Inverse:  x = (y * scale) + shift      (fp32 mul, then fp32 add; no FMA)
// Non-finite inputs stay non-finite (NaN bits unspecified).
//
// Side bytes, exactly 8 * heads * dim of them, little-endian IEEE binary32:
//   shift[h][i] for h in [0, heads), i in [0, dim)   (row-major)
//   scale[h][i] for h in [0, heads), i in [0, dim)
// Inverse rejects, with Corruption and before touching x, a side buffer of
// any other length, a non-finite shift, and a scale that is not finite or
// not > 0.
//
// Thread safety: stateless; safe to share across threads.
class AffineTransform final : public pipeline::Transform {
 public:
  // Normalizes every (head, channel) as specified and appends its shift and
  // scale to `side`. InvalidArgument for an empty/null tensor.
  Status Forward(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteWriter& side) const override;
  // Reads shift/scale from `side` (which must hold exactly the side bytes)
  // and undoes Forward up to rounding. Corruption as listed above, with x
  // untouched; never reads outside `side`.
  Status Inverse(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteReader& side) const override;

  // Side bytes Forward writes for a tensor of `heads` x `dim`.
  static size_t SideBytes(int heads, int dim) {
    return static_cast<size_t>(heads) * static_cast<size_t>(dim) * 8;
  }
};

}  // namespace kvserve::transforms

#endif  // KVSERVE_TRANSFORMS_AFFINE_H_
