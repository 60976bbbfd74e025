// Copyright kvserve authors. The uniform quantisation engine shared by every
// quantizer: stored grid parameters (scale, zero) for a group of values, and
// the element loops that map a run of [token][dim] values to codes and back.
// Not a public header.
//
// The float math is normative (docs/format.md §Quantisation): every
// operation is one IEEE-754 binary32 operation with round-to-nearest-even,
// in the order written below, with no fused multiply-add. The AVX2 paths
// produce bit-identical codes, params and reconstructions to the scalar
// reference; GridKernelIsa selects which one runs.
//
// Grid of a group with L levels (Lm1 = float(L - 1), h = Lm1 * 0.5f):
//   asymmetric: value(c) = zero + (float(c) * scale)
//   symmetric:  value(c) = (float(c) - h) * scale
// Encoding of x (inv = scale == 0 ? 0 : 1.0f / scale):
//   asymmetric: q = (x - zero) * inv
//   symmetric:  q = (x * inv) + h
//   q = q > 0 ? q : 0;  q = q < Lm1 ? q : Lm1;  code = round-half-even(q)
//
// Thread safety: all functions are reentrant.
#ifndef KVSERVE_QUANTIZERS_GRID_KERNELS_H_
#define KVSERVE_QUANTIZERS_GRID_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvserve/profile.h"
#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::quantizers {

// How a group's values map to codes.
struct GridSpec {
  int levels = 256;  // 2..256
  bool symmetric = false;
  ScaleDType scale_dtype = ScaleDType::kF16;
};

// Stored grid of one group, already rounded to the storage dtype (so a
// float here equals what the decoder reads back). zero is 0 when symmetric.
struct GridParams {
  float scale = 0.0f;
  float zero = 0.0f;
};

// Computes the stored grid of a group whose minimum is `min_value` and
// maximum `max_value` (both finite, min <= max). Guarantees, with values
// computed exactly as the decoder does:
//   asymmetric: zero <= min_value and zero + (Lm1 * scale) >= max_value;
//   symmetric:  h * scale >= max(|min_value|, |max_value|);
// so every x in [min, max] reconstructs within scale / 2 (plus the rounding
// of the reconstruction itself). scale == 0 exactly when the group is
// constant and (asymmetric) its value is representable in the storage dtype,
// or (symmetric) all values are zero. Returns InvalidArgument when a value
// is too large for the storage dtype (|x| > 65504 for f16 zero points, or a
// range whose scale overflows), Internal if the grid cannot be made to
// cover (a bug).
Status ComputeGridParams(const GridSpec& spec, float min_value, float max_value, GridParams* out);

// Bytes one group's params occupy in a chunk's params: (symmetric ? 1 : 2)
// values of 2 (f16) or 4 (f32) bytes.
size_t ParamBytesPerGroup(const GridSpec& spec);

// Appends params of `count` groups: all scales in group order, then (if
// asymmetric) all zeros in group order, each little-endian f16 or f32.
void WriteGridParams(const GridSpec& spec, const GridParams* params, size_t count,
                     pipeline::ByteWriter& out);

// Reads what WriteGridParams wrote for `count` groups. Corruption if the
// bytes run out, or a scale is negative or not finite, or a zero is not
// finite.
Status ReadGridParams(const GridSpec& spec, size_t count, pipeline::ByteReader& in,
                      GridParams* params);

// Layout of the statistics of a run of `tokens` rows of `dim` values.
//   kToken:   one group per (token, channel group of `group` channels),
//             group 0 = dim; `group` must divide dim. Group index =
//             token * (dim / group) + channel / group.
//   kChannel: one group per (token group of `group` tokens, channel), group
//             0 = tokens; the last token group may be shorter. Group index =
//             (token / group) * dim + channel.
struct RunShape {
  int tokens = 0;
  int dim = 0;
  QuantAxis axis = QuantAxis::kToken;
  int group = 0;
  // Number of groups; 0 if the shape is invalid (see ValidRunShape).
  size_t NumGroups() const;
};
// True when tokens >= 1, dim >= 1, group >= 0 and (kToken) group divides dim.
bool ValidRunShape(const RunShape& shape);

enum class GridKernelIsa : uint8_t { kAuto = 0, kScalar = 1, kAvx2 = 2 };
// Forces an implementation for tests and benchmarks (kAuto: AVX2 when the
// CPU has AVX2 and F16C). Process-wide; not for concurrent use with
// quantisation running on other threads.
void SetGridKernelIsaForTesting(GridKernelIsa isa);
// True when the AVX2 path can run on this CPU.
bool CpuHasAvx2();

// Quantizes `x` (rows of `shape.dim` floats, row stride `row_stride`) into
// codes[token * dim + channel] and params[group]. `params` must hold
// shape.NumGroups() entries. InvalidArgument if any value is not finite (a
// KV cache must be finite) or ComputeGridParams rejects a group.
Status QuantizeRun(const GridSpec& spec, const RunShape& shape, const float* x, size_t row_stride,
                   uint8_t* codes, GridParams* params);

// Reconstructs rows from codes and params (as QuantizeRun wrote them).
// Corruption if a code is >= spec.levels (values are then unspecified but
// no memory outside the arguments is touched).
Status DequantizeRun(const GridSpec& spec, const RunShape& shape, const uint8_t* codes,
                     const GridParams* params, float* x, size_t row_stride);

}  // namespace kvserve::quantizers

#endif  // KVSERVE_QUANTIZERS_GRID_KERNELS_H_
