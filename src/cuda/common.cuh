// Copyright kvserve authors. Shared helpers of the CUDA kernels: the exact
// float operations of docs/format.md (one IEEE binary32 rounding per
// operation, no FMA contraction: every kernel file is built with
// -fmad=false and uses these wrappers), dtype loads/stores, the device error
// word, and the DISPATCH macros that turn runtime sizes into template
// constants. Host/device functions here are also compiled for the host so
// tests can compare them with the CPU reference without a GPU.
#ifndef KVSERVE_CUDA_COMMON_CUH_
#define KVSERVE_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kvserve/kv.h"
#include "kvserve/status.h"

#define KV_HD __host__ __device__ __forceinline__
#define KV_DEV __device__ __forceinline__

// Kernel launches: KV_LAUNCH(kernel, grid, block[, smem[, stream]])(args...).
// Under KVSERVE_SIM (src/cuda/sim) the same launch runs on the host
// simulator.
#ifdef KVSERVE_SIM
#define KV_LAUNCH(kernel, ...) ::kvserve::sim::Launcher(__VA_ARGS__).Bind(kernel)
#define KV_DYNAMIC_SMEM(name) uint8_t* name = ::kvserve::sim::DynamicSmem()
#else
#define KV_LAUNCH(kernel, ...) kernel<<<__VA_ARGS__>>>
#define KV_DYNAMIC_SMEM(name) extern __shared__ __align__(16) uint8_t name[]
#endif

namespace kvserve::cuda {

// ------------------------------------------------------------- float ops
KV_HD float FAdd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}
KV_HD float FSub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}
KV_HD float FMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}
KV_HD float FDiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  volatile float r = a / b;
  return r;
#endif
}
KV_HD uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KV_HD float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
KV_HD bool IsFiniteF(float v) { return (FloatBits(v) & 0x7f800000u) != 0x7f800000u; }

// IEEE binary16 <-> binary32, round-to-nearest-even (kvserve::HalfToFloat /
// FloatToHalf on the host).
KV_HD float HalfBitsToFloat(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return ::kvserve::HalfToFloat(h);
#endif
}
// fp32 -> fp16 bits, round-to-nearest-even, in integer arithmetic only (the
// algorithm of kvserve::FloatToHalf). Not __float2half_rn: with nvcc 13 /
// sm_90a, storing the bytes of a cvt.rn.f16.f32 result with two u8 stores
// wrote the low byte of the wrong half of the packed register (seen on the
// H200: every f16 scale's low byte came out 00 or a neighbour's value), so
// no .f16 register ever holds a value that is stored as bytes.
KV_HD uint16_t FloatToHalfBitsInteger(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (absx < 0x38800000u) {
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absx - ((127u - 15u) << 23);
  const uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}
// fp32 -> fp16 bits for values that are stored (scales, zero points,
// outputs): integer arithmetic on the device (see FloatToHalfBitsInteger).
KV_HD uint16_t FloatToHalfBits(float f) {
#ifdef __CUDA_ARCH__
  return FloatToHalfBitsInteger(f);
#else
  return ::kvserve::FloatToHalf(f);
#endif
}
// The same bits for arithmetic only (the grid search's rounding steps): the
// hardware conversion. Its result must never be stored as bytes: with nvcc
// 13 / sm_90a that wrote the wrong byte of the register (seen again on the
// H200 in the random-profile test with unstaged f16 parameters).
KV_HD uint16_t FloatToHalfBitsForMath(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return ::kvserve::FloatToHalf(f);
#endif
}
KV_HD float BF16BitsToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }
KV_HD uint16_t FloatToBF16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ------------------------------------------------------------- the error word
// Layout of the workspace's error block (u32 words).
enum ErrorWord : int { kErrCode = 0, kErrIndex = 1, kErrDetail = 2, kErrFlags = 3 };
// Device error codes (mapped to Status by the host).
enum DeviceError : uint32_t {
  kDevOk = 0,
  kDevNonFinite = 1,      // InvalidArgument: a KV value is NaN or infinite
  kDevGridRange = 2,      // InvalidArgument: range too large for the scale dtype
  kDevCorrupt = 3,        // Corruption (detail names the check)
  kDevInternal = 4,
};
// Corruption details.
enum CorruptDetail : uint32_t {
  kCorLocate = 1, kCorChecksum, kCorRecord, kCorSegment, kCorPacked, kCorRansHeader,
  kCorRansStream, kCorCode, kCorParams, kCorSide, kCorTrailing,
};

KV_DEV void RecordError(uint32_t* err, uint32_t code, uint32_t index, uint32_t detail) {
  if (atomicCAS(&err[kErrCode], 0u, code) == 0u) {
    err[kErrIndex] = index;
    err[kErrDetail] = detail;
  }
}

// ------------------------------------------------------------- dispatch
#define KVSERVE_DISPATCH_HEAD_DIM(head_dim, E, ...)                  \
  [&]() -> ::kvserve::Status {                                       \
    switch (head_dim) {                                              \
      case 32: { constexpr int E = 1; return __VA_ARGS__(); }        \
      case 64: { constexpr int E = 2; return __VA_ARGS__(); }        \
      case 128: { constexpr int E = 4; return __VA_ARGS__(); }       \
      case 256: { constexpr int E = 8; return __VA_ARGS__(); }       \
      default:                                                       \
        return ::kvserve::Status::NotSupported("head_dim");          \
    }                                                                \
  }()

inline Status LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// The current device's multiprocessor count (persistent grids size by it).
inline int MultiprocessorCount() {
  int device = 0, n = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0)
    n = 1;
  return n;
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB the
// limit must be raised explicitly).
template <typename Kernel>
Status AllowDynamicSmem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return Status::Ok();
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) !=
      cudaSuccess)
    return LaunchStatus("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  return Status::Ok();
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_COMMON_CUH_
