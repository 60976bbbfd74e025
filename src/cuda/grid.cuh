// Copyright kvserve authors. The kernel mirror of src/quantizers/
// grid_kernels.cc: ComputeGridParams and the per-element encode/decode,
// operation for operation (docs/format.md §5.3). Host and device.
#ifndef KVSERVE_CUDA_GRID_CUH_
#define KVSERVE_CUDA_GRID_CUH_

#include <cstdint>

#include "cuda/common.cuh"

namespace kvserve::cuda {

inline constexpr float kFltMin = 1.17549435e-38f;

KV_HD uint16_t HalfRoundUp(float v) {  // smallest f16 >= v (v >= 0)
  uint16_t h = FloatToHalfBitsForMath(v);
  if (HalfBitsToFloat(h) < v) ++h;
  return h;
}
KV_HD uint16_t HalfRoundDown(float v) {  // largest f16 <= v
  uint16_t h = FloatToHalfBitsForMath(v);
  if (HalfBitsToFloat(h) > v) {
    if (h == 0x0000u) {
      h = 0x8001u;
    } else if ((h & 0x8000u) != 0) {
      ++h;
    } else {
      --h;
    }
  }
  return h;
}
KV_HD float NextScaleUp(float s, bool f16) {
  if (!f16) return BitsFloat(FloatBits(s) + 1u);  // s >= 0 finite: nextafter(s, +inf)
  return HalfBitsToFloat(static_cast<uint16_t>(FloatToHalfBitsForMath(s) + 1));
}
KV_HD float FinishScale(float s, bool f16) {
  if (f16) return HalfBitsToFloat(HalfRoundUp(s));
  return (s > 0.0f && s < kFltMin) ? kFltMin : s;
}

// Returns kDevOk, kDevGridRange or kDevInternal, exactly when the CPU's
// ComputeGridParams returns OK, InvalidArgument or Internal.
KV_HD uint32_t GridParamsFor(int levels, bool symmetric, bool f16, float min_value, float max_value,
                             float* scale_out, float* zero_out) {
  const float mn = FAdd(min_value, 0.0f);
  const float mx = FAdd(max_value, 0.0f);
  const float lm1 = static_cast<float>(levels - 1);
  float zero = 0.0f, scale = 0.0f;
  if (!symmetric) {
    zero = f16 ? HalfBitsToFloat(HalfRoundDown(mn)) : mn;
    if (!IsFiniteF(zero)) return kDevGridRange;
    const float range = FSub(mx, zero);
    if (!IsFiniteF(range)) return kDevGridRange;
    scale = FinishScale(FDiv(range, lm1), f16);
    for (int iter = 0;; ++iter) {
      if (!IsFiniteF(scale)) return kDevGridRange;
      const float step = FMul(lm1, scale);
      const float top = FAdd(zero, step);
      if (!(top < mx)) {
        if (!IsFiniteF(step) || !IsFiniteF(top)) return kDevGridRange;
        break;
      }
      if (iter == 64) return kDevInternal;
      scale = NextScaleUp(scale, f16);
    }
  } else {
    const float amn = BitsFloat(FloatBits(mn) & 0x7fffffffu);
    const float amx = BitsFloat(FloatBits(mx) & 0x7fffffffu);
    const float amax = amn < amx ? amx : amn;  // std::max(a, b): a < b ? b : a
    const float h = FMul(lm1, 0.5f);
    scale = FinishScale(FDiv(amax, h), f16);
    for (int iter = 0;; ++iter) {
      if (!IsFiniteF(scale)) return kDevGridRange;
      const float top = FMul(h, scale);
      if (!(top < amax)) {
        if (!IsFiniteF(top)) return kDevGridRange;
        break;
      }
      if (iter == 64) return kDevInternal;
      scale = NextScaleUp(scale, f16);
    }
  }
  *scale_out = scale;
  *zero_out = zero;
  return kDevOk;
}

KV_HD float InverseScale(float s) { return s == 0.0f ? 0.0f : FDiv(1.0f, s); }

KV_HD int RoundHalfEven(float q) {
#ifdef __CUDA_ARCH__
  return __float2int_rn(q);
#else
  return static_cast<int>(__builtin_nearbyintf(q));
#endif
}

KV_HD uint32_t EncodeValue(float x, float zero, float inv, float h, float lm1, bool symmetric) {
  float q = symmetric ? FAdd(FMul(x, inv), h) : FMul(FSub(x, zero), inv);
  q = q > 0.0f ? q : 0.0f;
  q = q < lm1 ? q : lm1;
  return static_cast<uint32_t>(RoundHalfEven(q));
}

KV_HD float DecodeValue(uint32_t code, float scale, float zero, float h, bool symmetric) {
  return symmetric ? FMul(FSub(static_cast<float>(code), h), scale)
                   : FAdd(zero, FMul(static_cast<float>(code), scale));
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_GRID_CUH_
