// Copyright kvserve authors. Randomized Walsh-Hadamard rotation along
// head_dim (QuaRot): spreads outlier channels over all channels so that a
// per-token quantizer sees a flatter distribution. Orthogonal up to rounding.
#ifndef KVSERVE_TRANSFORMS_HADAMARD_H_
#define KVSERVE_TRANSFORMS_HADAMARD_H_

#include <cstdint>

#include "kvserve/kv.h"
#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::transforms {

// Float math (normative, docs/format.md §Transforms/hadamard). d = head_dim
// must be a power of two (1 <= d); other sizes are rejected with
// InvalidArgument (a known limitation: no non-power-of-two Hadamard).
//
// Signs: s_i = -1 iff bit (i % 64) of HadamardSignWord(seed, layer, kind,
// head, i / 64) is 1, where head is the head index within the chunk tensor.
// Multiplying by s_i = -1 is a sign-bit flip (exact).
//
// Scale: c = HadamardScale(d) = (float)(1.0 / sqrt((double)d)).
//
// FWHT(v), in place, in this order (every a+b, a-b one fp32 add/sub):
//   for (h = 1; h < d; h *= 2)
//     for (i = 0; i < d; i += 2*h)
//       for (j = i; j < i + h; ++j) {
//         a = v[j]; b = v[j+h]; v[j] = a + b; v[j+h] = a - b;
//       }
// Butterflies within one stage are independent, so any schedule that
// completes stage h before stage 2h gives the same bits.
//
//   Forward, per (head, token) row:  v_i = s_i * x_i;  FWHT(v);  y_i = v_i * c
//   Inverse, per row:                 FWHT(y);  v_i = y_i * c;  x_i = s_i * v_i
//
// No side bytes. The round trip is not exact; for finite inputs its error is
// a few ulps of max|x| times log2(d). Outputs for non-finite inputs are
// non-finite with unspecified bits.
//
// Thread safety: immutable after construction; safe to share across threads.

// Which row kernel to run. kAuto picks AVX2 when the CPU has it and d >= 8.
// Both produce identical bits (tested).
enum class KernelPath : uint8_t { kAuto = 0, kScalar = 1, kAvx2 = 2 };

// True when this build and CPU can run the AVX2 kernels.
bool Avx2Available();

// The splitmix64 finalizer (Steele, Lea, Flood 2014):
//   z += 0x9E3779B97F4A7C15;
//   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//   z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//   return z ^ (z >> 31);          (all arithmetic mod 2^64)
uint64_t SplitMix64(uint64_t z);

// Sign bits for dims [64*word, 64*word + 64) of (layer, kind, head):
//   key = SplitMix64(seed);
//   key = SplitMix64(key ^ layer);
//   key = SplitMix64(key ^ kind);        kind: 0 = K, 1 = V
//   key = SplitMix64(key ^ head);
//   return SplitMix64(key + word);       (mod 2^64)
// layer, head, word are non-negative and zero-extended to 64 bits.
uint64_t HadamardSignWord(uint64_t seed, int layer, KvKind kind, int head, int word);

// (float)(1.0 / sqrt((double)d)). For d = 4^k this is 2^-k exactly; for
// d = 2 * 4^k it is 2^-k * 0x1.6a09e6p-1 (bits 0x3F3504F3 at k = 0).
float HadamardScale(int d);

class HadamardTransform final : public pipeline::Transform {
 public:
  explicit HadamardTransform(uint64_t seed, KernelPath path = KernelPath::kAuto)
      : seed_(seed), path_(path) {}

  // Rotates every (head, token) row as specified above, using
  // info.layer and info.kind for the signs. Returns InvalidArgument (x
  // untouched) if x.dim is not a power of two or the tensor is empty/null;
  // NotSupported if kAvx2 was requested on a CPU without AVX2. Writes no side
  // bytes.
  Status Forward(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteWriter& side) const override;
  // Undoes Forward (up to rounding). Corruption if `side` is not empty (x
  // untouched); otherwise errors as for Forward.
  Status Inverse(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                 pipeline::ByteReader& side) const override;

  // Row-local whenever head_dim is a power of two (and the requested
  // kernel can run here).
  bool RowLocal(int head_dim) const override;
  // Rotates `count` rows of head `head` exactly as Forward / Inverse do.
  void TransformRows(const pipeline::ChunkInfo& info, int head, float* rows, int count,
                     bool inverse) const override;

  uint64_t seed() const { return seed_; }

 private:
  Status Apply(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
               bool inverse) const;
  // Rotates `count` rows of `d` floats of one head; `mask` holds its signs.
  void ApplyRows(float* rows, int count, int d, const uint32_t* mask, bool use_avx2,
                 bool inverse) const;
  // Whether the AVX2 row kernel runs for rows of d floats (d a power of two).
  bool UseAvx2(int d) const;

  uint64_t seed_;
  KernelPath path_;
};

}  // namespace kvserve::transforms

#endif  // KVSERVE_TRANSFORMS_HADAMARD_H_
