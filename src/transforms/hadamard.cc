// Copyright kvserve authors.
#include "transforms/hadamard.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "transforms/chunk_check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVSERVE_HAVE_AVX2_KERNELS 1
#else
#define KVSERVE_HAVE_AVX2_KERNELS 0
#endif

namespace kvserve::transforms {
namespace {

constexpr uint32_t kSignBit = 0x80000000u;

bool IsPowerOfTwo(int d) { return d > 0 && (d & (d - 1)) == 0; }

// Sign masks (0 or kSignBit per dim) of one (layer, kind, head).
void FillSignMask(uint64_t seed, int layer, KvKind kind, int head, int d, uint32_t* mask) {
  for (int word = 0; word * 64 < d; ++word) {
    const uint64_t bits = HadamardSignWord(seed, layer, kind, head, word);
    const int end = d < word * 64 + 64 ? d : word * 64 + 64;
    for (int i = word * 64; i < end; ++i) {
      mask[i] = ((bits >> (i & 63)) & 1u) ? kSignBit : 0u;
    }
  }
}

// v_i = s_i * v_i as a sign-bit flip.
inline void FlipSignsScalar(float* v, const uint32_t* mask, int d) {
  for (int i = 0; i < d; ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    u ^= mask[i];
    std::memcpy(&v[i], &u, 4);
  }
}

// The scalar reference of one row; `forward` selects the order of sign flip
// and scaling as specified in hadamard.h.
void RowScalar(float* v, int d, const uint32_t* mask, float c, bool forward) {
  if (forward) FlipSignsScalar(v, mask, d);
  for (int h = 1; h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j];
        const float b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  for (int i = 0; i < d; ++i) v[i] = v[i] * c;
  if (!forward) FlipSignsScalar(v, mask, d);
}

#if KVSERVE_HAVE_AVX2_KERNELS
// Stages h = 1, 2, 4 of the FWHT on one 8-lane block. Every lane computes the
// same a + b or a - b (same operand order) as RowScalar: for lane k of the
// block, `sum` lanes hold v[k] + v[k^h] and `diff` lanes hold v[k^h] - v[k];
// the blend takes sum for lanes whose bit h is 0 (the "a + b" output) and
// diff for the others (a - b with a = v[k-h], b = v[k]).
__attribute__((target("avx2"))) inline __m256 Fwht8(__m256 v) {
  __m256 y = _mm256_permute_ps(v, 0xB1);  // lanes [1,0,3,2 | 5,4,7,6]
  v = _mm256_blend_ps(_mm256_add_ps(v, y), _mm256_sub_ps(y, v), 0xAA);
  y = _mm256_permute_ps(v, 0x4E);  // lanes [2,3,0,1 | 6,7,4,5]
  v = _mm256_blend_ps(_mm256_add_ps(v, y), _mm256_sub_ps(y, v), 0xCC);
  y = _mm256_permute2f128_ps(v, v, 0x01);  // swap 128-bit halves
  v = _mm256_blend_ps(_mm256_add_ps(v, y), _mm256_sub_ps(y, v), 0xF0);
  return v;
}

// Multiply by c, then (inverse only) flip signs: the tail of the row op.
__attribute__((target("avx2"))) inline __m256 Finish(__m256 v, __m256 c,
                                                     const uint32_t* mask, bool forward) {
  v = _mm256_mul_ps(v, c);
  if (!forward) {
    v = _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_loadu_si256(
                             reinterpret_cast<const __m256i*>(mask))));
  }
  return v;
}

// Same bits as RowScalar for d >= 8 (a power of two).
__attribute__((target("avx2"))) void RowAvx2(float* v, int d, const uint32_t* mask,
                                             float c, bool forward) {
  const __m256 cv = _mm256_set1_ps(c);
  // Sign flip (forward) and stages 1, 2, 4, block by block.
  for (int j = 0; j < d; j += 8) {
    __m256 x = _mm256_loadu_ps(v + j);
    if (forward) {
      x = _mm256_xor_ps(x, _mm256_castsi256_ps(_mm256_loadu_si256(
                               reinterpret_cast<const __m256i*>(mask + j))));
    }
    x = Fwht8(x);
    if (d == 8) x = Finish(x, cv, mask + j, forward);
    _mm256_storeu_ps(v + j, x);
  }
  if (d == 8) return;
  // Stages 8 .. d/4 across blocks.
  for (int h = 8; 2 * h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(v + j);
        const __m256 b = _mm256_loadu_ps(v + j + h);
        _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
      }
    }
  }
  // Last stage h = d/2, fused with the scaling (and inverse sign flip).
  const int h = d / 2;
  for (int j = 0; j < h; j += 8) {
    const __m256 a = _mm256_loadu_ps(v + j);
    const __m256 b = _mm256_loadu_ps(v + j + h);
    _mm256_storeu_ps(v + j, Finish(_mm256_add_ps(a, b), cv, mask + j, forward));
    _mm256_storeu_ps(v + j + h, Finish(_mm256_sub_ps(a, b), cv, mask + j + h, forward));
  }
}
#endif  // KVSERVE_HAVE_AVX2_KERNELS

}  // namespace

bool Avx2Available() {
#if KVSERVE_HAVE_AVX2_KERNELS
  static const bool available = __builtin_cpu_supports("avx2");
  return available;
#else
  return false;
#endif
}

uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HadamardSignWord(uint64_t seed, int layer, KvKind kind, int head, int word) {
  uint64_t key = SplitMix64(seed);
  key = SplitMix64(key ^ static_cast<uint64_t>(static_cast<uint32_t>(layer)));
  key = SplitMix64(key ^ static_cast<uint64_t>(static_cast<uint8_t>(kind)));
  key = SplitMix64(key ^ static_cast<uint64_t>(static_cast<uint32_t>(head)));
  return SplitMix64(key + static_cast<uint64_t>(static_cast<uint32_t>(word)));
}

float HadamardScale(int d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
}

Status HadamardTransform::Apply(const pipeline::ChunkInfo& info,
                                const pipeline::ChunkTensor& x, bool inverse) const {
  const int d = x.dim;
  if (!IsPowerOfTwo(d)) {
    return Status::InvalidArgument("hadamard: head_dim must be a power of two, got " +
                                   std::to_string(d) +
                                   " (use the affine or identity transform instead)");
  }
  if (path_ == KernelPath::kAvx2 && !Avx2Available()) {
    return Status::NotSupported("hadamard: AVX2 kernel requested but unavailable");
  }
  const bool use_avx2 = UseAvx2(d);
  std::vector<uint32_t> mask(static_cast<size_t>(d));
  for (int head = 0; head < x.heads; ++head) {
    FillSignMask(seed_, info.layer, info.kind, head, d, mask.data());
    ApplyRows(x.row(head, 0), x.tokens, d, mask.data(), use_avx2, inverse);
  }
  return Status::Ok();
}

bool HadamardTransform::UseAvx2(int d) const {
  // Rows shorter than one vector use the scalar kernel.
  return path_ != KernelPath::kScalar && d >= 8 && Avx2Available();
}

void HadamardTransform::ApplyRows(float* rows, int count, int d, const uint32_t* mask,
                                  bool use_avx2, bool inverse) const {
  const bool forward = !inverse;
  const float c = HadamardScale(d);
  for (int t = 0; t < count; ++t) {
    float* row = rows + static_cast<size_t>(t) * d;
#if KVSERVE_HAVE_AVX2_KERNELS
    if (use_avx2) {
      RowAvx2(row, d, mask, c, forward);
      continue;
    }
#endif
    RowScalar(row, d, mask, c, forward);
  }
}

bool HadamardTransform::RowLocal(int head_dim) const {
  return IsPowerOfTwo(head_dim) && (path_ != KernelPath::kAvx2 || Avx2Available());
}

void HadamardTransform::TransformRows(const pipeline::ChunkInfo& info, int head, float* rows,
                                      int count, bool inverse) const {
  const int d = info.head_dim;
  // One head's signs; d <= 1024 (the frame format's limit) keeps this on
  // the stack.
  uint32_t stack_mask[1024];
  std::vector<uint32_t> heap_mask;
  uint32_t* mask = stack_mask;
  if (d > 1024) {
    heap_mask.resize(static_cast<size_t>(d));
    mask = heap_mask.data();
  }
  FillSignMask(seed_, info.layer, info.kind, head, d, mask);
  ApplyRows(rows, count, d, mask, UseAvx2(d), inverse);
}

Status HadamardTransform::Forward(const pipeline::ChunkInfo& info,
                                  const pipeline::ChunkTensor& x,
                                  pipeline::ByteWriter& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "hadamard"));
  return Apply(info, x, /*inverse=*/false);
}

Status HadamardTransform::Inverse(const pipeline::ChunkInfo& info,
                                  const pipeline::ChunkTensor& x,
                                  pipeline::ByteReader& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "hadamard"));
  KVSERVE_RETURN_IF_ERROR(CheckSideSize(side, 0, "hadamard"));
  return Apply(info, x, /*inverse=*/true);
}

}  // namespace kvserve::transforms
