// Copyright kvserve authors. Scalar reference and AVX2 paths of the uniform
// quantisation engine; see grid_kernels.h for the normative math.
#include "quantizers/grid_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "kvserve/kv.h"

namespace kvserve::quantizers {
namespace {

std::atomic<GridKernelIsa> g_isa{GridKernelIsa::kAuto};

bool UseAvx2() {
  switch (g_isa.load(std::memory_order_relaxed)) {
    case GridKernelIsa::kScalar:
      return false;
    case GridKernelIsa::kAvx2:
      return CpuHasAvx2();
    case GridKernelIsa::kAuto:
      break;
  }
  return CpuHasAvx2();
}

bool IsFinite(float v) { return std::fabs(v) <= FLT_MAX; }

// Smallest fp16 value >= v (v >= 0, finite); may be +inf.
uint16_t HalfRoundUp(float v) {
  uint16_t h = FloatToHalf(v);
  if (HalfToFloat(h) < v) ++h;  // positive: the next pattern is the next value
  return h;
}

// Largest fp16 value <= v (v finite); may be -inf.
uint16_t HalfRoundDown(float v) {
  uint16_t h = FloatToHalf(v);
  if (HalfToFloat(h) > v) {
    if (h == 0x0000u) {
      h = 0x8001u;  // below +0: the smallest negative
    } else if ((h & 0x8000u) != 0) {
      ++h;  // negative: magnitude grows
    } else {
      --h;  // positive: magnitude shrinks
    }
  }
  return h;
}

// The next storable scale above s (s >= 0, finite).
float NextScaleUp(float s, ScaleDType dtype) {
  if (dtype == ScaleDType::kF32) return std::nextafter(s, INFINITY);
  return HalfToFloat(static_cast<uint16_t>(FloatToHalf(s) + 1));
}

float InverseScale(float s) { return s == 0.0f ? 0.0f : 1.0f / s; }

inline uint8_t EncodeAsym(float x, float zero, float inv, float lm1) {
  float q = (x - zero) * inv;
  q = q > 0.0f ? q : 0.0f;
  q = q < lm1 ? q : lm1;
  return static_cast<uint8_t>(static_cast<int>(std::nearbyint(q)));
}

inline uint8_t EncodeSym(float x, float inv, float h, float lm1) {
  float q = (x * inv) + h;
  q = q > 0.0f ? q : 0.0f;
  q = q < lm1 ? q : lm1;
  return static_cast<uint8_t>(static_cast<int>(std::nearbyint(q)));
}

Status NonFinite() {
  return Status::InvalidArgument("KV values must be finite (found NaN or infinity)");
}

// ------------------------------------------------------------------ scalar

Status QuantizeRunScalar(const GridSpec& spec, const RunShape& shape, const float* x, size_t stride,
                         uint8_t* codes, GridParams* params) {
  const float lm1 = static_cast<float>(spec.levels - 1);
  const float h = lm1 * 0.5f;
  const int dim = shape.dim;
  auto encode_one = [&](float v, const GridParams& p, float inv) {
    return spec.symmetric ? EncodeSym(v, inv, h, lm1) : EncodeAsym(v, p.zero, inv, lm1);
  };
  if (shape.axis == QuantAxis::kToken) {
    const int gc = (shape.group == 0 || shape.group >= dim) ? dim : shape.group;
    const int ng = dim / gc;
    for (int t = 0; t < shape.tokens; ++t) {
      const float* row = x + t * stride;
      uint8_t* out = codes + static_cast<size_t>(t) * dim;
      for (int g = 0; g < ng; ++g) {
        const float* p = row + g * gc;
        float mn = p[0], mx = p[0];
        for (int i = 0; i < gc; ++i) {
          if (!IsFinite(p[i])) return NonFinite();
          mn = p[i] < mn ? p[i] : mn;
          mx = p[i] > mx ? p[i] : mx;
        }
        GridParams& gp = params[static_cast<size_t>(t) * ng + g];
        KVSERVE_RETURN_IF_ERROR(ComputeGridParams(spec, mn, mx, &gp));
        const float inv = InverseScale(gp.scale);
        for (int i = 0; i < gc; ++i) out[g * gc + i] = encode_one(p[i], gp, inv);
      }
    }
    return Status::Ok();
  }
  const int gt = shape.group == 0 ? shape.tokens : shape.group;
  for (int ta = 0; ta < shape.tokens; ta += gt) {
    const int tb = std::min(ta + gt, shape.tokens);
    GridParams* gps = params + static_cast<size_t>(ta / gt) * dim;
    for (int d = 0; d < dim; ++d) {
      float mn = x[ta * stride + d], mx = mn;
      for (int t = ta; t < tb; ++t) {
        const float v = x[t * stride + d];
        if (!IsFinite(v)) return NonFinite();
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
      }
      KVSERVE_RETURN_IF_ERROR(ComputeGridParams(spec, mn, mx, &gps[d]));
    }
    for (int d = 0; d < dim; ++d) {
      const float inv = InverseScale(gps[d].scale);
      for (int t = ta; t < tb; ++t) {
        codes[static_cast<size_t>(t) * dim + d] = encode_one(x[t * stride + d], gps[d], inv);
      }
    }
  }
  return Status::Ok();
}

Status DequantizeRunScalar(const GridSpec& spec, const RunShape& shape, const uint8_t* codes,
                           const GridParams* params, float* x, size_t stride) {
  const float h = static_cast<float>(spec.levels - 1) * 0.5f;
  const int dim = shape.dim;
  int max_code = 0;
  auto decode_one = [&](uint8_t c, const GridParams& p) {
    max_code = c > max_code ? c : max_code;
    return spec.symmetric ? (static_cast<float>(c) - h) * p.scale
                          : p.zero + (static_cast<float>(c) * p.scale);
  };
  if (shape.axis == QuantAxis::kToken) {
    const int gc = (shape.group == 0 || shape.group >= dim) ? dim : shape.group;
    const int ng = dim / gc;
    for (int t = 0; t < shape.tokens; ++t) {
      float* row = x + t * stride;
      const uint8_t* in = codes + static_cast<size_t>(t) * dim;
      for (int d = 0; d < dim; ++d) {
        row[d] = decode_one(in[d], params[static_cast<size_t>(t) * ng + d / gc]);
      }
    }
  } else {
    const int gt = shape.group == 0 ? shape.tokens : shape.group;
    for (int t = 0; t < shape.tokens; ++t) {
      const GridParams* gps = params + static_cast<size_t>(t / gt) * dim;
      float* row = x + t * stride;
      const uint8_t* in = codes + static_cast<size_t>(t) * dim;
      for (int d = 0; d < dim; ++d) row[d] = decode_one(in[d], gps[d]);
    }
  }
  if (max_code >= spec.levels) return Status::Corruption("quantised code out of range");
  return Status::Ok();
}

// -------------------------------------------------------------------- AVX2
// Same operations as the scalar path, eight lanes at a time. Grid params
// are computed by the same scalar ComputeGridParams.

#define KVSERVE_AVX2 __attribute__((target("avx2,f16c")))

KVSERVE_AVX2 inline __m256 EncodeVec(__m256 v, __m256 zero, __m256 inv, __m256 h, __m256 lm1,
                                     bool symmetric) {
  __m256 q = symmetric ? _mm256_add_ps(_mm256_mul_ps(v, inv), h)
                       : _mm256_mul_ps(_mm256_sub_ps(v, zero), inv);
  // maxps/minps return the second operand when the first is NaN, like the
  // scalar `q > 0 ? q : 0`.
  q = _mm256_max_ps(q, _mm256_setzero_ps());
  q = _mm256_min_ps(q, lm1);
  return _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Encodes row[d..d+8) with per-channel zeros[d..] and invs[d..].
KVSERVE_AVX2 inline __m256 EncodeAt(const float* row, const float* zeros, const float* invs,
                                    int d, __m256 h, __m256 lm1, bool symmetric) {
  return EncodeVec(_mm256_loadu_ps(row + d), _mm256_loadu_ps(zeros + d),
                   _mm256_loadu_ps(invs + d), h, lm1, symmetric);
}

KVSERVE_AVX2 inline void Store8Codes(__m256 rounded, uint8_t* out) {
  const __m256i c = _mm256_cvttps_epi32(rounded);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

KVSERVE_AVX2 inline void Store32Codes(__m256 r0, __m256 r1, __m256 r2, __m256 r3, uint8_t* out) {
  const __m256i a = _mm256_packus_epi32(_mm256_cvttps_epi32(r0), _mm256_cvttps_epi32(r1));
  const __m256i b = _mm256_packus_epi32(_mm256_cvttps_epi32(r2), _mm256_cvttps_epi32(r3));
  const __m256i p = _mm256_packus_epi16(a, b);  // lanes: a0 b0 a1 b1 in 4-byte blocks
  const __m256i fixed = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), fixed);
}

KVSERVE_AVX2 inline __m256i Load8Codes(const uint8_t* in) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
}

KVSERVE_AVX2 inline float HMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

KVSERVE_AVX2 inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// Lanes whose |v| is not <= FLT_MAX (NaN or infinity).
KVSERVE_AVX2 inline __m256 NonFiniteMask(__m256 v) {
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  return _mm256_cmp_ps(abs, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ);
}

// The storable scale for computed scales s (finish_scale of the scalar code).
KVSERVE_AVX2 inline __m256 FinishScale8(__m256 s, bool f16) {
  if (f16) return _mm256_cvtph_ps(_mm256_cvtps_ph(s, _MM_FROUND_TO_POS_INF));
  const __m256 tiny = _mm256_and_ps(_mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GT_OQ),
                                    _mm256_cmp_ps(s, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ));
  return _mm256_blendv_ps(s, _mm256_set1_ps(FLT_MIN), tiny);
}

// ComputeGridParams for eight groups at once. Lanes that would need the
// scalar function's cover-fixing loop (or report an error) are recomputed by
// it, so every lane equals ComputeGridParams exactly. F16C's directed
// conversions (round down / up) are the fp16 rounding the scalar code gets
// by round-to-nearest plus a one-step fix-up.
KVSERVE_AVX2 Status ComputeGridParams8(const GridSpec& spec, __m256 vmin, __m256 vmax,
                                       GridParams* out, float* zeros, float* invs) {
  const __m256 zero_ps = _mm256_setzero_ps();
  const __m256 mn = _mm256_add_ps(vmin, zero_ps);
  const __m256 mx = _mm256_add_ps(vmax, zero_ps);
  const float lm1f = static_cast<float>(spec.levels - 1);
  const __m256 lm1 = _mm256_set1_ps(lm1f);
  const bool f16 = spec.scale_dtype == ScaleDType::kF16;
  __m256 zero, scale, slow;
  if (!spec.symmetric) {
    zero = f16 ? _mm256_cvtph_ps(_mm256_cvtps_ph(mn, _MM_FROUND_TO_NEG_INF)) : mn;
    const __m256 range = _mm256_sub_ps(mx, zero);
    scale = FinishScale8(_mm256_div_ps(range, lm1), f16);
    const __m256 step = _mm256_mul_ps(lm1, scale);
    const __m256 top = _mm256_add_ps(zero, step);
    slow = _mm256_cmp_ps(top, mx, _CMP_LT_OQ);
    slow = _mm256_or_ps(slow, _mm256_or_ps(NonFiniteMask(zero), NonFiniteMask(range)));
    slow = _mm256_or_ps(slow, _mm256_or_ps(NonFiniteMask(scale), NonFiniteMask(step)));
    slow = _mm256_or_ps(slow, NonFiniteMask(top));
  } else {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 amax = _mm256_max_ps(_mm256_andnot_ps(sign, mn), _mm256_andnot_ps(sign, mx));
    const __m256 h = _mm256_set1_ps(lm1f * 0.5f);
    zero = zero_ps;
    scale = FinishScale8(_mm256_div_ps(amax, h), f16);
    const __m256 top = _mm256_mul_ps(h, scale);
    slow = _mm256_cmp_ps(top, amax, _CMP_LT_OQ);
    slow = _mm256_or_ps(slow, _mm256_or_ps(NonFiniteMask(scale), NonFiniteMask(top)));
  }
  const __m256 is_zero = _mm256_cmp_ps(scale, zero_ps, _CMP_EQ_OQ);
  const __m256 inv = _mm256_blendv_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), scale), zero_ps, is_zero);
  alignas(32) float s8[8], z8[8], i8[8], mn8[8], mx8[8];
  _mm256_store_ps(s8, scale);
  _mm256_store_ps(z8, zero);
  _mm256_store_ps(i8, inv);
  const int slow_lanes = _mm256_movemask_ps(slow);
  if (slow_lanes != 0) {
    _mm256_store_ps(mn8, vmin);
    _mm256_store_ps(mx8, vmax);
  }
  for (int j = 0; j < 8; ++j) {
    if ((slow_lanes >> j) & 1) {
      KVSERVE_RETURN_IF_ERROR(ComputeGridParams(spec, mn8[j], mx8[j], &out[j]));
      i8[j] = InverseScale(out[j].scale);
    } else {
      out[j].scale = s8[j];
      out[j].zero = z8[j];
    }
    zeros[j] = out[j].zero;
    invs[j] = i8[j];
  }
  return Status::Ok();
}

// kSym: spec.symmetric as a compile-time constant, so the element loops
// carry no branch on it.
template <bool kSym>
KVSERVE_AVX2 Status QuantizeRunAvx2(const GridSpec& spec, const RunShape& shape, const float* x,
                                    size_t stride, uint8_t* codes, GridParams* params) {
  const float lm1f = static_cast<float>(spec.levels - 1);
  const __m256 lm1 = _mm256_set1_ps(lm1f);
  const __m256 h = _mm256_set1_ps(lm1f * 0.5f);
  constexpr bool sym = kSym;
  const int dim = shape.dim;
  if (shape.axis == QuantAxis::kToken) {
    const int gc = (shape.group == 0 || shape.group >= dim) ? dim : shape.group;
    const int ng = dim / gc;
    // Groups in group order (token-major), eight at a time: reduce each to
    // its min / max, compute the eight grids at once (ComputeGridParams8,
    // identical to ComputeGridParams per lane), then encode each group.
    const size_t groups = static_cast<size_t>(shape.tokens) * ng;
    alignas(32) float mins[8], maxs[8], zeros[8], invs[8];
    for (size_t g0 = 0; g0 < groups; g0 += 8) {
      const int batch = static_cast<int>(std::min<size_t>(8, groups - g0));
      for (int j = 0; j < 8; ++j) {
        // Pad a short batch by repeating its first group; the padding
        // lanes' results are discarded.
        const size_t g = g0 + (j < batch ? j : 0);
        const float* p = x + (g / ng) * stride + (g % ng) * gc;
        __m256 vmin = _mm256_loadu_ps(p), vmax = vmin, bad = _mm256_setzero_ps();
        for (int i = 0; i < gc; i += 8) {
          const __m256 v = _mm256_loadu_ps(p + i);
          vmin = _mm256_min_ps(vmin, v);
          vmax = _mm256_max_ps(vmax, v);
          bad = _mm256_or_ps(bad, NonFiniteMask(v));
        }
        if (_mm256_movemask_ps(bad) != 0) {
          // The scalar order: the earlier groups' grid errors come first.
          for (int k = 0; k < j; ++k) {
            GridParams unused;
            KVSERVE_RETURN_IF_ERROR(ComputeGridParams(spec, mins[k], maxs[k], &unused));
          }
          return NonFinite();
        }
        mins[j] = HMin(vmin);
        maxs[j] = HMax(vmax);
      }
      GridParams gp8[8];
      KVSERVE_RETURN_IF_ERROR(ComputeGridParams8(spec, _mm256_load_ps(mins), _mm256_load_ps(maxs),
                                                 gp8, zeros, invs));
      for (int j = 0; j < batch; ++j) {
        const size_t g = g0 + j;
        params[g] = gp8[j];
        const float* p = x + (g / ng) * stride + (g % ng) * gc;
        uint8_t* o = codes + (g / ng) * dim + (g % ng) * gc;
        const __m256 zero = _mm256_set1_ps(zeros[j]);
        const __m256 inv = _mm256_set1_ps(invs[j]);
        int i = 0;
        for (; i + 32 <= gc; i += 32) {
          Store32Codes(EncodeVec(_mm256_loadu_ps(p + i), zero, inv, h, lm1, sym),
                       EncodeVec(_mm256_loadu_ps(p + i + 8), zero, inv, h, lm1, sym),
                       EncodeVec(_mm256_loadu_ps(p + i + 16), zero, inv, h, lm1, sym),
                       EncodeVec(_mm256_loadu_ps(p + i + 24), zero, inv, h, lm1, sym), o + i);
        }
        for (; i < gc; i += 8) {
          Store8Codes(EncodeVec(_mm256_loadu_ps(p + i), zero, inv, h, lm1, sym), o + i);
        }
      }
    }
    return Status::Ok();
  }
  const int gt = shape.group == 0 ? shape.tokens : shape.group;
  // Per-channel zero and 1/scale of the current token group; on the stack
  // for every head_dim a frame allows.
  float stack_buf[2 * 1024];
  std::vector<float> heap_buf;
  float* zeros = stack_buf;
  if (dim > 1024) {
    heap_buf.resize(2 * static_cast<size_t>(dim));
    zeros = heap_buf.data();
  }
  float* invs = zeros + dim;
  for (int ta = 0; ta < shape.tokens; ta += gt) {
    const int tb = std::min(ta + gt, shape.tokens);
    GridParams* gps = params + static_cast<size_t>(ta / gt) * dim;
    for (int d = 0; d < dim; d += 8) {
      __m256 vmin = _mm256_loadu_ps(x + ta * stride + d), vmax = vmin;
      __m256 bad = _mm256_setzero_ps();
      for (int t = ta; t < tb; ++t) {
        const __m256 v = _mm256_loadu_ps(x + t * stride + d);
        vmin = _mm256_min_ps(vmin, v);
        vmax = _mm256_max_ps(vmax, v);
        bad = _mm256_or_ps(bad, NonFiniteMask(v));
      }
      if (_mm256_movemask_ps(bad) != 0) return NonFinite();
      KVSERVE_RETURN_IF_ERROR(ComputeGridParams8(spec, vmin, vmax, &gps[d], &zeros[d], &invs[d]));
    }
    for (int t = ta; t < tb; ++t) {
      const float* row = x + t * stride;
      uint8_t* out = codes + static_cast<size_t>(t) * dim;
      int d = 0;
      for (; d + 32 <= dim; d += 32) {
        Store32Codes(EncodeAt(row, zeros, invs, d, h, lm1, sym),
                     EncodeAt(row, zeros, invs, d + 8, h, lm1, sym),
                     EncodeAt(row, zeros, invs, d + 16, h, lm1, sym),
                     EncodeAt(row, zeros, invs, d + 24, h, lm1, sym), out + d);
      }
      for (; d < dim; d += 8) Store8Codes(EncodeAt(row, zeros, invs, d, h, lm1, sym), out + d);
    }
  }
  return Status::Ok();
}

// Eight scales (field 0) or zeros (field 1) of params[0..8) as one vector.
KVSERVE_AVX2 inline __m256 LoadField8(const GridParams* params, int field) {
  const float* f = reinterpret_cast<const float*>(params);
  const __m256 a = _mm256_loadu_ps(f);      // s0 z0 s1 z1 | s2 z2 s3 z3
  const __m256 b = _mm256_loadu_ps(f + 8);  // s4 z4 s5 z5 | s6 z6 s7 z7
  const __m256 picked = field == 0 ? _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))
                                   : _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  // picked = x0 x1 x4 x5 | x2 x3 x6 x7
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(picked), 0xD8));
}

KVSERVE_AVX2 inline __m256 DecodeVec(__m256i c, __m256 scale, __m256 zero, __m256 h,
                                     bool symmetric) {
  const __m256 cf = _mm256_cvtepi32_ps(c);
  return symmetric ? _mm256_mul_ps(_mm256_sub_ps(cf, h), scale)
                   : _mm256_add_ps(zero, _mm256_mul_ps(cf, scale));
}

template <bool kSym>
KVSERVE_AVX2 Status DequantizeRunAvx2(const GridSpec& spec, const RunShape& shape,
                                      const uint8_t* codes, const GridParams* params, float* x,
                                      size_t stride) {
  const __m256 h = _mm256_set1_ps(static_cast<float>(spec.levels - 1) * 0.5f);
  constexpr bool sym = kSym;
  const int dim = shape.dim;
  __m256i max_code = _mm256_setzero_si256();
  if (shape.axis == QuantAxis::kToken) {
    const int gc = (shape.group == 0 || shape.group >= dim) ? dim : shape.group;
    const int ng = dim / gc;
    for (int t = 0; t < shape.tokens; ++t) {
      float* row = x + t * stride;
      const uint8_t* in = codes + static_cast<size_t>(t) * dim;
      for (int g = 0; g < ng; ++g) {
        const GridParams& gp = params[static_cast<size_t>(t) * ng + g];
        const __m256 scale = _mm256_set1_ps(gp.scale), zero = _mm256_set1_ps(gp.zero);
        for (int i = g * gc; i < (g + 1) * gc; i += 8) {
          const __m256i c = Load8Codes(in + i);
          max_code = _mm256_max_epi32(max_code, c);
          _mm256_storeu_ps(row + i, DecodeVec(c, scale, zero, h, sym));
        }
      }
    }
  } else {
    const int gt = shape.group == 0 ? shape.tokens : shape.group;
    // Per-channel scales and zeros of the current token group, on the
    // stack for every head_dim a frame allows.
    float stack_buf[2 * 1024];
    std::vector<float> heap_buf;
    float* scales = stack_buf;
    if (dim > 1024) {
      heap_buf.resize(2 * static_cast<size_t>(dim));
      scales = heap_buf.data();
    }
    float* zeros = scales + dim;
    for (int ta = 0; ta < shape.tokens; ta += gt) {
      const int tb = std::min(ta + gt, shape.tokens);
      const GridParams* gps = params + static_cast<size_t>(ta / gt) * dim;
      for (int d = 0; d < dim; d += 8) {
        _mm256_storeu_ps(scales + d, LoadField8(gps + d, 0));
        _mm256_storeu_ps(zeros + d, LoadField8(gps + d, 1));
      }
      for (int t = ta; t < tb; ++t) {
        float* row = x + t * stride;
        const uint8_t* in = codes + static_cast<size_t>(t) * dim;
        for (int d = 0; d < dim; d += 8) {
          const __m256i c = Load8Codes(in + d);
          max_code = _mm256_max_epi32(max_code, c);
          _mm256_storeu_ps(row + d, DecodeVec(c, _mm256_loadu_ps(scales + d),
                                              _mm256_loadu_ps(zeros + d), h, sym));
        }
      }
    }
  }
  const __m256i over = _mm256_cmpgt_epi32(max_code, _mm256_set1_epi32(spec.levels - 1));
  if (_mm256_movemask_epi8(over) != 0) return Status::Corruption("quantised code out of range");
  return Status::Ok();
}

// The AVX2 loops need whole 8-lane vectors per group.
bool Avx2Fits(const RunShape& shape) {
  if (shape.axis == QuantAxis::kToken) {
    const int gc = (shape.group == 0 || shape.group >= shape.dim) ? shape.dim : shape.group;
    return gc % 8 == 0;
  }
  return shape.dim % 8 == 0;
}

// fp16 params <-> GridParams, eight groups per step. Stored params are
// always finite, and for finite values F16C's RNE conversion equals
// FloatToHalf (and fp16 -> fp32 is exact either way); a batch holding a
// non-finite value takes the scalar conversion instead, so the bytes never
// differ.

// Writes the fp16 bits of field `field` of params[0..count) to out.
KVSERVE_AVX2 void StoreHalfFieldAvx2(const GridParams* params, size_t count, int field,
                                     uint8_t* out) {
  static_assert(sizeof(GridParams) == 2 * sizeof(float));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = LoadField8(params + i, field);
    if (_mm256_movemask_ps(NonFiniteMask(v)) == 0) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      continue;
    }
    for (size_t j = i; j < i + 8; ++j) {
      const uint16_t h = FloatToHalf(field == 0 ? params[j].scale : params[j].zero);
      std::memcpy(out + 2 * j, &h, 2);
    }
  }
  for (; i < count; ++i) {
    const uint16_t h = FloatToHalf(field == 0 ? params[i].scale : params[i].zero);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

// Reads fp16 scales (and, unless `zeros` is null, zeros) of `count` groups
// into params. Returns 0, or 1 if a scale is negative or not finite, or 2
// if a zero is not finite (scales checked first, like the scalar path).
KVSERVE_AVX2 int LoadHalfParamsAvx2(const uint8_t* scales, const uint8_t* zeros, size_t count,
                                    GridParams* params) {
  const __m256 zero_ps = _mm256_setzero_ps();
  const __m256 max_ps = _mm256_set1_ps(FLT_MAX);
  __m256 bad_scale = zero_ps, bad_zero = zero_ps;
  float* f = reinterpret_cast<float*>(params);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 s =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 2 * i)));
    bad_scale = _mm256_or_ps(bad_scale, _mm256_or_ps(_mm256_cmp_ps(s, zero_ps, _CMP_NGE_UQ),
                                                     _mm256_cmp_ps(s, max_ps, _CMP_NLE_UQ)));
    __m256 z = zero_ps;
    if (zeros != nullptr) {
      z = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zeros + 2 * i)));
      bad_zero = _mm256_or_ps(bad_zero, NonFiniteMask(z));
    }
    const __m256 lo = _mm256_unpacklo_ps(s, z);  // s0 z0 s1 z1 | s4 z4 s5 z5
    const __m256 hi = _mm256_unpackhi_ps(s, z);  // s2 z2 s3 z3 | s6 z6 s7 z7
    _mm256_storeu_ps(f + 2 * i, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(f + 2 * i + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
  int bad = _mm256_movemask_ps(bad_scale) != 0 ? 1 : 0;
  for (; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, scales + 2 * i, 2);
    params[i].scale = _cvtsh_ss(h);
    if (!IsFinite(params[i].scale) || params[i].scale < 0.0f) bad = 1;
    params[i].zero = 0.0f;
    if (zeros != nullptr) {
      std::memcpy(&h, zeros + 2 * i, 2);
      params[i].zero = _cvtsh_ss(h);
      if (!IsFinite(params[i].zero)) bad_zero = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    }
  }
  if (bad) return 1;
  return _mm256_movemask_ps(bad_zero) != 0 ? 2 : 0;
}

}  // namespace

bool CpuHasAvx2() { return CpuHasAvx2AndF16c(); }

void SetGridKernelIsaForTesting(GridKernelIsa isa) { g_isa.store(isa); }

Status ComputeGridParams(const GridSpec& spec, float min_value, float max_value, GridParams* out) {
  // Canonical zeros: min/max reductions may return -0 or +0 for equal
  // operands depending on order; -0 + +0 = +0 removes the difference.
  const float mn = min_value + 0.0f;
  const float mx = max_value + 0.0f;
  const float lm1 = static_cast<float>(spec.levels - 1);
  const bool f16 = spec.scale_dtype == ScaleDType::kF16;
  auto finish_scale = [&](float s) {
    if (f16) return HalfToFloat(HalfRoundUp(s));
    return (s > 0.0f && s < FLT_MIN) ? FLT_MIN : s;
  };
  float zero = 0.0f, scale = 0.0f;
  if (!spec.symmetric) {
    zero = f16 ? HalfToFloat(HalfRoundDown(mn)) : mn;
    if (!IsFinite(zero)) {
      return Status::InvalidArgument("value " + std::to_string(mn) +
                                     " is outside the fp16 zero-point range; use scale=f32");
    }
    const float range = mx - zero;
    if (!IsFinite(range)) return Status::InvalidArgument("value range too large to quantise");
    scale = finish_scale(range / lm1);
    for (int iter = 0;; ++iter) {
      if (!IsFinite(scale)) return Status::InvalidArgument("value range too large to quantise");
      const float top = zero + (lm1 * scale);
      if (!(top < mx)) {
        if (!IsFinite(lm1 * scale) || !IsFinite(top)) {
          return Status::InvalidArgument("value range too large to quantise");
        }
        break;
      }
      if (iter == 64) return Status::Internal("quantisation grid does not cover its group");
      scale = NextScaleUp(scale, spec.scale_dtype);
    }
  } else {
    const float amax = std::max(std::fabs(mn), std::fabs(mx));
    const float h = lm1 * 0.5f;
    scale = finish_scale(amax / h);
    for (int iter = 0;; ++iter) {
      if (!IsFinite(scale)) return Status::InvalidArgument("value range too large to quantise");
      const float top = h * scale;
      if (!(top < amax)) {
        if (!IsFinite(top)) return Status::InvalidArgument("value range too large to quantise");
        break;
      }
      if (iter == 64) return Status::Internal("quantisation grid does not cover its group");
      scale = NextScaleUp(scale, spec.scale_dtype);
    }
  }
  out->scale = scale;
  out->zero = zero;
  return Status::Ok();
}

size_t ParamBytesPerGroup(const GridSpec& spec) {
  return (spec.symmetric ? 1u : 2u) * (spec.scale_dtype == ScaleDType::kF16 ? 2u : 4u);
}

void WriteGridParams(const GridSpec& spec, const GridParams* params, size_t count,
                     pipeline::ByteWriter& out) {
  // Staged in a local buffer and appended once: one resize instead of one
  // per value on the encode hot path.
  thread_local std::vector<uint8_t> bytes;
  bytes.resize(count * ParamBytesPerGroup(spec));
  uint8_t* p = bytes.data();
  const int fields = spec.symmetric ? 1 : 2;
  if (spec.scale_dtype == ScaleDType::kF16) {
    for (int field = 0; field < fields; ++field, p += 2 * count) {
      if (UseAvx2()) {
        StoreHalfFieldAvx2(params, count, field, p);
        continue;
      }
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = FloatToHalf(field == 0 ? params[i].scale : params[i].zero);
        std::memcpy(p + 2 * i, &h, 2);
      }
    }
  } else {
    for (int field = 0; field < fields; ++field, p += 4 * count) {
      for (size_t i = 0; i < count; ++i) {
        std::memcpy(p + 4 * i, field == 0 ? &params[i].scale : &params[i].zero, 4);
      }
    }
  }
  out.PutBytes(bytes.data(), bytes.size());
}

Status ReadGridParams(const GridSpec& spec, size_t count, pipeline::ByteReader& in,
                      GridParams* params) {
  if (in.remaining() / ParamBytesPerGroup(spec) < count) {
    return Status::Corruption("quantiser params truncated");
  }
  std::span<const uint8_t> bytes;
  KVSERVE_RETURN_IF_ERROR(in.GetSpan(count * ParamBytesPerGroup(spec), &bytes));
  const bool f16 = spec.scale_dtype == ScaleDType::kF16;
  const size_t width = f16 ? 2 : 4;
  const uint8_t* scales = bytes.data();
  const uint8_t* zeros = spec.symmetric ? nullptr : scales + width * count;
  int bad = 0;
  if (f16 && UseAvx2()) {
    bad = LoadHalfParamsAvx2(scales, zeros, count, params);
  } else {
    auto get = [&](const uint8_t* at) {
      if (f16) {
        uint16_t h;
        std::memcpy(&h, at, 2);
        return HalfToFloat(h);
      }
      float v;
      std::memcpy(&v, at, 4);
      return v;
    };
    for (size_t i = 0; i < count; ++i) {
      params[i].scale = get(scales + width * i);
      if (!IsFinite(params[i].scale) || params[i].scale < 0.0f) bad = 1;
      params[i].zero = 0.0f;
    }
    if (bad == 0 && zeros != nullptr) {
      for (size_t i = 0; i < count; ++i) {
        params[i].zero = get(zeros + width * i);
        if (!IsFinite(params[i].zero)) bad = 2;
      }
    }
  }
  if (bad == 1) return Status::Corruption("quantiser scale negative or not finite");
  if (bad == 2) return Status::Corruption("quantiser zero not finite");
  return Status::Ok();
}

size_t RunShape::NumGroups() const {
  if (!ValidRunShape(*this)) return 0;
  if (axis == QuantAxis::kToken) {
    return static_cast<size_t>(tokens) * ((group == 0 || group >= dim) ? 1 : dim / group);
  }
  const int gt = group == 0 ? tokens : group;
  return static_cast<size_t>((tokens + gt - 1) / gt) * dim;
}

bool ValidRunShape(const RunShape& shape) {
  if (shape.tokens < 1 || shape.dim < 1 || shape.group < 0) return false;
  if (shape.axis == QuantAxis::kToken && shape.group != 0 && shape.group < shape.dim && shape.dim % shape.group != 0) {
    return false;
  }
  return shape.axis == QuantAxis::kToken || shape.axis == QuantAxis::kChannel;
}

Status QuantizeRun(const GridSpec& spec, const RunShape& shape, const float* x, size_t row_stride,
                   uint8_t* codes, GridParams* params) {
  if (!ValidRunShape(shape) || spec.levels < 2 || spec.levels > 256) {
    return Status::InvalidArgument("invalid quantisation run shape or level count");
  }
  if (UseAvx2() && Avx2Fits(shape)) {
    return spec.symmetric ? QuantizeRunAvx2<true>(spec, shape, x, row_stride, codes, params)
                          : QuantizeRunAvx2<false>(spec, shape, x, row_stride, codes, params);
  }
  return QuantizeRunScalar(spec, shape, x, row_stride, codes, params);
}

Status DequantizeRun(const GridSpec& spec, const RunShape& shape, const uint8_t* codes,
                     const GridParams* params, float* x, size_t row_stride) {
  if (!ValidRunShape(shape) || spec.levels < 2 || spec.levels > 256) {
    return Status::Corruption("invalid quantisation run shape or level count");
  }
  if (UseAvx2() && Avx2Fits(shape)) {
    return spec.symmetric ? DequantizeRunAvx2<true>(spec, shape, codes, params, x, row_stride)
                          : DequantizeRunAvx2<false>(spec, shape, codes, params, x, row_stride);
  }
  return DequantizeRunScalar(spec, shape, codes, params, x, row_stride);
}

}  // namespace kvserve::quantizers
