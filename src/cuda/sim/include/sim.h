#pragma once
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct SimDim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local SimDim3 threadIdx, blockIdx;
inline SimDim3 blockDim{256, 1, 1}, gridDim{1, 1, 1};
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
inline cudaError_t cudaGetLastError() { return 0; }
inline const char* cudaGetErrorString(cudaError_t) { return ""; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
template <class F> inline cudaError_t cudaFuncSetAttribute(F, int, int) { return 0; }
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
// Warp machinery: 8 warps of 32 threads.
struct SimBlock {
  std::unique_ptr<std::barrier<>> block;
  std::unique_ptr<std::barrier<>> warp[8];
  uint64_t xch[8][32];
};
inline SimBlock* g_block = nullptr;
inline int SimWarp() { return threadIdx.x >> 5; }
inline void __syncthreads() { g_block->block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_block->warp[SimWarp()]->arrive_and_wait(); }
inline void __threadfence_block() {}
template <class T> T SimShfl(T v, int src) {
  uint64_t bits = 0; memcpy(&bits, &v, sizeof(T));
  const int w = SimWarp();
  g_block->xch[w][threadIdx.x & 31] = bits;
  __syncwarp();
  uint64_t o = g_block->xch[w][src & 31];
  __syncwarp();
  T r; memcpy(&r, &o, sizeof(T)); return r;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return SimShfl(v, src); }
template <class T> T __shfl_xor_sync(unsigned, T v, int m) { return SimShfl(v, (threadIdx.x & 31) ^ m); }
inline unsigned __ballot_sync(unsigned, bool p) {
  unsigned m = 0; for (int l = 0; l < 32; ++l) { bool q = SimShfl(p ? 1 : 0, l); if (q) m |= 1u << l; } return m;
}
inline bool __all_sync(unsigned, bool p) { return __ballot_sync(0, p) == 0xffffffffu; }
inline bool __any_sync(unsigned, bool p) { return __ballot_sync(0, p) != 0; }
inline unsigned __match_any_sync(unsigned, unsigned v) {
  unsigned m = 0; for (int l = 0; l < 32; ++l) if (SimShfl(v, l) == v) m |= 1u << l; return m;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(v); }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { std::atomic_ref<unsigned> a(*p); a.compare_exchange_strong(c, v); return c; }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) { std::atomic_ref<unsigned long long> a(*p); a.compare_exchange_strong(c, v); return c; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, unsigned s) { s &= 31; return s ? (lo >> s) | (hi << (32 - s)) : lo; }
inline uint64_t __umul64hi(uint64_t a, uint64_t b) { return (unsigned __int128)a * b >> 64; }
