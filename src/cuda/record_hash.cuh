// Copyright kvserve authors. Record checksums at memory speed: XXH3-64 of a
// record computed by a whole thread block (docs/cuda.md "Checksums"). The
// per-block accumulator terms S_b (xxh3.cuh "parallel form") come from the
// bytes in global memory, 8 blocks at a time, or from a table that the kernel
// which wrote the bytes filled (raw records); the chain of scrambles, the
// tail stripes and the merge run in warp 0.
#ifndef KVSERVE_CUDA_RECORD_HASH_CUH_
#define KVSERVE_CUDA_RECORD_HASH_CUH_

#include <cstdint>

#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/xxh3.cuh"

namespace kvserve::cuda {

__device__ const xxh3::Keys kHashKeys = xxh3::MakeKeys();
__device__ const uint8_t kDeviceSecret[192] = KVSERVE_XXH3_SECRET;

constexpr int kHashThreads = 256;

// Shared memory of BlockHash64.
struct HashSmem {
  uint64_t sums[2][32][8];
};

// Reduces the lane terms c[4] of a warp that covered one 1 KiB block (lane l
// holding bytes [32 l, 32 l + 32)): afterwards lane 0 holds the block's
// terms of acc[0..3] and lane 1 those of acc[4..7].
KV_DEV void WarpReduceBlockTerms(uint64_t c[4]) {
#pragma unroll
  for (int off = 2; off < 32; off <<= 1)
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] += __shfl_xor_sync(0xffffffffu, c[k], off);
}

// The same reduction as a reduce-scatter (half the shuffles and adds):
// afterwards lane l holds the block's term of acc[i] with i = 4 (l & 1) +
// 2 ((l >> 4) & 1) + ((l >> 3) & 1), and returns i; lanes 0, 1, 8, 9, 16,
// 17, 24, 25 hold the eight distinct terms.
KV_DEV int WarpReduceScatterBlockTerms(const uint64_t c[4], uint64_t& term) {
  const int lane = threadIdx.x & 31;
  const bool hi = (lane >> 4) & 1, b = (lane >> 3) & 1;
  // Lanes l and l ^ 16: the lower keeps acc terms 0, 1 of its quarter, the upper 2, 3.
  const uint64_t e0 = (hi ? c[2] : c[0]) + __shfl_xor_sync(0xffffffffu, hi ? c[0] : c[2], 16);
  const uint64_t e1 = (hi ? c[3] : c[1]) + __shfl_xor_sync(0xffffffffu, hi ? c[1] : c[3], 16);
  // Lanes l and l ^ 8: one of the two each.
  uint64_t f = (b ? e1 : e0) + __shfl_xor_sync(0xffffffffu, b ? e0 : e1, 8);
  f += __shfl_xor_sync(0xffffffffu, f, 4);
  f += __shfl_xor_sync(0xffffffffu, f, 2);
  term = f;
  return 4 * (lane & 1) + 2 * hi + b;
}

// True for the lanes that hold distinct terms after WarpReduceScatterBlockTerms.
KV_DEV bool HoldsScatteredTerm() { return (threadIdx.x & 6) == 0; }

// The block terms of a 1 KiB block of which lane l holds bytes [32 l,
// 32 l + 32) in x, reduced over the warp and stored at sums[0 .. 8). Every
// lane of the warp calls it.
KV_DEV void StoreBlockTerms(const uint32_t x[8], uint64_t* sums) {
  const int lane = threadIdx.x & 31;
  uint64_t c[4] = {0, 0, 0, 0};
  xxh3::QuarterStripeTerms(kHashKeys, x, lane >> 1, 4 * (lane & 1), c);
  uint64_t term;
  const int i = WarpReduceScatterBlockTerms(c, term);
  if (HoldsScatteredTerm()) sums[i] = term;
}

// The same for a block staged in shared memory `win` from byte `offset` on.
KV_DEV void StoreStagedBlockTerms(const uint32_t* win, uint32_t offset, uint64_t* sums) {
  const int lane = threadIdx.x & 31;
  uint32_t x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = WordAt(win, offset + 32 * lane + 4 * j);
  StoreBlockTerms(x, sums);
}

// Lane i (< 8) of the warp gets acc term i from the reduced c[4] of lanes 0, 1.
KV_DEV uint64_t SpreadBlockTerm(const uint64_t c[4]) {
  const int lane = threadIdx.x & 31;
  const int src = (lane >> 2) & 1;
  const uint64_t t0 = __shfl_sync(0xffffffffu, c[0], src), t1 = __shfl_sync(0xffffffffu, c[1], src);
  const uint64_t t2 = __shfl_sync(0xffffffffu, c[2], src), t3 = __shfl_sync(0xffffffffu, c[3], src);
  const int k = lane & 3;
  return k == 0 ? t0 : k == 1 ? t1 : k == 2 ? t2 : t3;
}

// The terms of the 32 bytes at `p` (global, any alignment, inside [lo, hi))
// as the `l`-th 32-byte piece of a block.
KV_DEV void PieceTerms(const uint8_t* p, const uint8_t* lo, const uint8_t* hi, int l, uint64_t c[4]) {
  uint32_t w[8];
  LoadUnaligned<8>(p, lo, hi, w);
#pragma unroll
  for (int k = 0; k < 4; ++k) c[k] = 0;
  xxh3::QuarterStripeTerms(kHashKeys, w, l >> 1, 4 * (l & 1), c);
}

// XXH3-64 of the `len` bytes at `p` (global, inside [lo, hi)), by all
// kHashThreads threads of the block (every thread must call it). `sums`, if
// non-null, holds the terms of every full block b < (len - 1) / 1024 at
// sums[8 b .. 8 b + 8) (written by an earlier kernel); otherwise they are
// computed from the bytes. The result is valid in warp 0.
KV_DEV uint64_t BlockHash64(const uint8_t* p, uint64_t len, const uint8_t* lo, const uint8_t* hi,
                            const uint64_t* sums, HashSmem& smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const xxh3::Keys& keys = kHashKeys;
  if (len <= 240) {
    __shared__ uint8_t s_secret[192];
    for (int i = threadIdx.x; i < 192; i += blockDim.x) s_secret[i] = kDeviceSecret[i];
    __syncthreads();
    return xxh3::Hash64(p, len, xxh3::Secret{s_secret});
  }
  const uint64_t nb = (len - 1) / 1024;
  uint64_t acc = xxh3::InitAcc(lane & 7);
  const int per_round = sums != nullptr ? 32 : 8;
  int parity = 0;
  for (uint64_t r0 = 0; r0 < nb; r0 += per_round, parity ^= 1) {
    if (sums != nullptr) {
      const uint64_t b = r0 + threadIdx.x / 8;
      if (b < nb) smem.sums[parity][threadIdx.x / 8][threadIdx.x % 8] = sums[8 * b + threadIdx.x % 8];
    } else {
      const uint64_t b = r0 + warp;
      if (b < nb) {
        uint64_t c[4];
        PieceTerms(p + 1024 * b + 32 * lane, lo, hi, lane, c);
        uint64_t term;
        const int i = WarpReduceScatterBlockTerms(c, term);
        if (HoldsScatteredTerm()) smem.sums[parity][warp][i] = term;
      }
    }
    __syncthreads();
    if (warp == 0) {
      const uint64_t n = nb - r0 < static_cast<uint64_t>(per_round) ? nb - r0 : per_round;
      for (uint64_t j = 0; j < n; ++j)
        acc = xxh3::ScrambleOne(acc + smem.sums[parity][j][lane & 7], keys.scramble[lane & 7]);
    }
  }
  if (warp != 0) return 0;
  // Stripes of the last, partial block, then the last stripe.
  const uint64_t tail = 1024 * nb;
  const int stripes = static_cast<int>(((len - 1) - tail) / 64);
  uint64_t c[4] = {0, 0, 0, 0};
  if (lane < 2 * stripes) PieceTerms(p + tail + 32 * lane, lo, hi, lane, c);
  WarpReduceBlockTerms(c);
  acc += SpreadBlockTerm(c);
  {
    uint32_t w[2];
    LoadUnaligned<2>(p + len - 64 + 8 * (lane & 7), lo, hi, w);
    const uint64_t data = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
    const uint64_t key = data ^ keys.last[lane & 7];
    acc += (key & 0xFFFFFFFFull) * (key >> 32) + __shfl_xor_sync(0xffffffffu, data, 1);
  }
  uint64_t all[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) all[k] = __shfl_sync(0xffffffffu, acc, k);
  return xxh3::FinishLong(all, keys, len);
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_RECORD_HASH_CUH_
