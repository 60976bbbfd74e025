// Copyright kvserve authors. Exact division of 32-bit rANS states by a symbol
// frequency through a multiply and a shift (Granlund and Montgomery's
// round-up method with a 33-bit intermediate): for 1 <= f < 2^31,
// s = ceil(log2 f), m = floor(2^32 (2^s - f) / f) + 1, and
// floor(x / f) = (umulhi(x, m) + x) >> s for every 32-bit x. Host and device,
// so the host test can check it exhaustively against division.
#ifndef KVSERVE_CUDA_RANS_MAGIC_CUH_
#define KVSERVE_CUDA_RANS_MAGIC_CUH_

#include <cstdint>

#include "cuda/common.cuh"

namespace kvserve::cuda {

struct RansDivisor {
  uint32_t magic;
  uint32_t shift;
};

KV_HD RansDivisor MakeRansDivisor(uint32_t f) {
  uint32_t s = 0;
  while ((uint64_t{1} << s) < f) ++s;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << s) - f)) / f + 1;
  return RansDivisor{static_cast<uint32_t>(m), s};
}

KV_HD uint32_t MulHi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

KV_HD uint32_t RansDivide(uint32_t x, RansDivisor d) {
  return static_cast<uint32_t>((static_cast<uint64_t>(MulHi32(x, d.magic)) + x) >> d.shift);
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_RANS_MAGIC_CUH_
