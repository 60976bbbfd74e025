// Copyright kvserve authors. Byte-stream helpers of the CUDA kernels: frames
// are byte streams whose fields sit at any alignment, while the memory system
// wants 16-byte aligned accesses. These helpers move bytes between global
// memory at any alignment and 4-byte aligned shared-memory staging buffers
// with aligned 16-byte loads and stores only (plus byte accesses at the two
// ends of a range), realigning with funnel shifts.
//
// Bounds: a load helper never touches global memory outside [lo, hi) (the
// buffer the caller owns); aligned words that straddle a bound are read byte
// by byte. Store helpers write exactly the bytes asked for.
#ifndef KVSERVE_CUDA_BYTES_CUH_
#define KVSERVE_CUDA_BYTES_CUH_

#include <cstdint>

#include "cuda/common.cuh"

namespace kvserve::cuda {

// Bytes [k, k+4) of a 4-byte aligned word array, little-endian, any k. Reads
// words k/4 and k/4 + 1: the array must be readable one word past the bytes.
KV_DEV uint32_t WordAt(const uint32_t* w, uint32_t k) {
  const uint32_t i = k >> 2;
  return __funnelshift_r(w[i], w[i + 1], (k & 3u) * 8u);
}
KV_DEV uint32_t ByteAt(const uint32_t* w, uint32_t k) { return (w[k >> 2] >> ((k & 3u) * 8u)) & 0xFFu; }
KV_DEV uint64_t U64At(const uint32_t* w, uint32_t k) {
  return static_cast<uint64_t>(WordAt(w, k)) | (static_cast<uint64_t>(WordAt(w, k + 4)) << 32);
}

// The 16 bytes at `a` (16-byte aligned), reading only bytes inside [lo, hi);
// bytes outside read as 0.
KV_DEV void Load16Guarded(const uint8_t* a, const uint8_t* lo, const uint8_t* hi, uint32_t w[4]) {
  if (a >= lo && a + 16 <= hi) {
    const uint4 v = *reinterpret_cast<const uint4*>(a);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) w[j] = 0;
  for (int i = 0; i < 16; ++i)
    if (a + i >= lo && a + i < hi) w[i >> 2] |= static_cast<uint32_t>(a[i]) << (8 * (i & 3));
}

// kWords little-endian words of the bytes at p (any alignment), from aligned
// 16-byte loads inside [lo, hi) (bytes outside read as 0). kWords is 2, 4 or 8.
template <int kWords>
KV_DEV void LoadUnaligned(const uint8_t* p, const uint8_t* lo, const uint8_t* hi, uint32_t out[kWords]) {
  constexpr int kChunks = (kWords + 3) / 4 + 1;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(addr & ~uintptr_t{15});
  const uint32_t off = static_cast<uint32_t>(addr & 15u);
  uint32_t w[4 * kChunks + 1];
#pragma unroll
  for (int c = 0; c < kChunks - 1; ++c) Load16Guarded(base + 16 * c, lo, hi, w + 4 * c);
  if (off != 0) {
    Load16Guarded(base + 16 * (kChunks - 1), lo, hi, w + 4 * (kChunks - 1));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[4 * (kChunks - 1) + j] = 0;
  }
  w[4 * kChunks] = 0;
  // Shift by the byte offset inside a word, then select the word offset with
  // compile-time indices only (a run-time index would spill to local memory).
  const uint32_t sh = (off & 3u) * 8u, wi = off >> 2;
  uint32_t s[4 * kChunks];
#pragma unroll
  for (int j = 0; j < 4 * kChunks; ++j) s[j] = __funnelshift_r(w[j], w[j + 1], sh);
#pragma unroll
  for (int j = 0; j < kWords; ++j)
    out[j] = wi == 0 ? s[j] : wi == 1 ? s[j + 1] : wi == 2 ? s[j + 2] : s[j + 3];
}

// Writes smem bytes [k0, k0 + n) (4-byte aligned array, readable one word
// past them) to dst (any alignment), cooperatively: thread `t` of `nt`
// threads. Aligned 16-byte stores in the middle, byte stores for the
// unaligned ends.
KV_DEV void StoreFromSmem(uint8_t* dst, const uint32_t* src, uint32_t k0, uint32_t n, int t, int nt) {
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(dst) & 15u);
  const uint32_t head = mis == 0 ? 0 : (16 - mis < n ? 16 - mis : n);
  const uint32_t chunks = (n - head) / 16;
  const uint32_t tail = head + 16 * chunks;
  for (uint32_t i = t; i < head; i += nt) dst[i] = static_cast<uint8_t>(ByteAt(src, k0 + i));
  for (uint32_t c = t; c < chunks; c += nt) {
    const uint32_t k = head + 16 * c;
    uint4 v;
    v.x = WordAt(src, k0 + k);
    v.y = WordAt(src, k0 + k + 4);
    v.z = WordAt(src, k0 + k + 8);
    v.w = WordAt(src, k0 + k + 12);
    *reinterpret_cast<uint4*>(dst + k) = v;
  }
  for (uint32_t i = tail + t; i < n; i += nt) dst[i] = static_cast<uint8_t>(ByteAt(src, k0 + i));
}

// smem bytes [0, round_up(n, 16)) = src[0, ...) (src any alignment; global
// reads restricted to [lo, hi)), cooperatively. dst is 16-byte aligned.
KV_DEV void LoadToSmem(uint32_t* dst, const uint8_t* src, uint32_t n, const uint8_t* lo, const uint8_t* hi,
                       int t, int nt) {
  const uint32_t chunks = (n + 15) / 16;
  for (uint32_t c = t; c < chunks; c += nt) {
    uint32_t w[4];
    LoadUnaligned<4>(src + 16 * c, lo, hi, w);
    *reinterpret_cast<uint4*>(dst + 4 * c) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// dst[0, n) = src[0, n), both global and at any alignment, cooperatively;
// src reads restricted to [lo, hi).
KV_DEV void CopyBytes(uint8_t* dst, const uint8_t* src, uint64_t n, const uint8_t* lo, const uint8_t* hi,
                      int t, int nt) {
  const uint64_t mis = reinterpret_cast<uintptr_t>(dst) & 15u;
  const uint64_t head = mis == 0 ? 0 : (16 - mis < n ? 16 - mis : n);
  const uint64_t chunks = (n - head) / 16;
  const uint64_t tail = head + 16 * chunks;
  for (uint64_t i = t; i < head; i += nt) dst[i] = src[i];
  for (uint64_t c = t; c < chunks; c += nt) {
    const uint64_t k = head + 16 * c;
    uint32_t w[4];
    LoadUnaligned<4>(src + k, lo, hi, w);
    *reinterpret_cast<uint4*>(dst + k) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  for (uint64_t i = tail + t; i < n; i += nt) dst[i] = src[i];
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_BYTES_CUH_
