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

// out[j] = bytes [s + 4 j, s + 4 j + 4) of the little-endian word array x,
// for s in [0, 16); x holds kOut + 4 words. The byte offset inside a word is
// a funnel shift, the word offset a select with compile-time indices only (a
// run-time index would put x in local memory).
template <int kOut>
KV_DEV void ShiftBytes(const uint32_t* x, uint32_t s, uint32_t out[kOut]) {
  const uint32_t sh = (s & 3u) * 8u, wi = s >> 2;
  uint32_t t[kOut + 3];
#pragma unroll
  for (int j = 0; j < kOut + 3; ++j) t[j] = __funnelshift_r(x[j], x[j + 1], sh);
#pragma unroll
  for (int j = 0; j < kOut; ++j) out[j] = wi == 0 ? t[j] : wi == 1 ? t[j + 1] : wi == 2 ? t[j + 2] : t[j + 3];
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
  ShiftBytes<kWords>(w, off, out);
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

// ------------------------------------------------------------ async copies
// Asynchronous 16-byte global -> shared copies (cp.async.cg, sm_80+): a
// thread issues copies, commits them as a group, and waits for all but the
// newest `kPending` groups; the data are visible to the other threads of the
// block after that wait and a barrier. `src_bytes` < 16 reads only that many
// bytes and zero-fills the rest of the 16 (0 reads nothing). On the host
// simulator the copy happens at once.
KV_DEV void CpAsync16(void* smem_dst, const void* global_src, uint32_t src_bytes = 16) {
#if defined(__CUDA_ARCH__)
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(global_src), "r"(src_bytes)
               : "memory");
#else
  std::memset(smem_dst, 0, 16);
  if (src_bytes > 0) std::memcpy(smem_dst, global_src, src_bytes);
#endif
}
KV_DEV void CpAsyncCommit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int kPending>
KV_DEV void CpAsyncWait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// 16 bytes of shared memory at `smem_dst` from global `g`: its first
// `bytes` (<= 16) bytes, the rest zero. A whole chunk goes through cp.async;
// a partial one (the end of a range) is copied byte by byte, so nothing past
// the range's end is read (cp.async with a smaller source size still counts
// as a 16-byte read for the memory checker).
KV_DEV void CopyChunk16(void* smem_dst, const uint8_t* g, uint32_t bytes) {
  if (bytes == 16) {
    CpAsync16(smem_dst, g);
    return;
  }
  uint8_t* d = static_cast<uint8_t*>(smem_dst);
#pragma unroll
  for (uint32_t i = 0; i < 16; ++i) d[i] = i < bytes ? g[i] : 0;
}

// Issues async copies of the aligned 16-byte chunks covering global bytes
// [src, src + n) into smem (16-byte aligned, room for n + 32 bytes), reading
// only inside [lo, hi) (lo 16-byte aligned). Afterwards (wait + barrier)
// byte k of the range is at smem byte (src & 15) + k: read it with WordAt /
// ByteAt at that offset. Cooperative: thread t of nt. Returns the offset.
KV_DEV uint32_t StageAsync(uint32_t* smem, const uint8_t* src, uint32_t n, const uint8_t* lo, const uint8_t* hi,
                           int t, int nt) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(a & ~uintptr_t{15});
  const uint32_t off = static_cast<uint32_t>(a & 15u);
  const uint32_t chunks = (off + n + 15) / 16;
  for (uint32_t c = t; c < chunks; c += nt) {
    const uint8_t* g = base + 16 * c;
    const int64_t avail = hi - g;
    const uint32_t bytes = avail >= 16 ? 16u : avail > 0 ? static_cast<uint32_t>(avail) : 0u;
    CopyChunk16(smem + 4 * c, g, bytes);
  }
  return off;
}

// A warp's read-ahead ring over a byte range in global memory: kSlots
// slots of 1 KiB in shared memory hold consecutive 1 KiB pieces of the
// range (aligned to 16 bytes at `base`), filled with cp.async two pieces
// ahead of the reader. The warp calls Start once, then, before each read
// step (or group of steps), Ensure(g) with the furthest byte it reads; g's
// piece moves at most one piece per call, and the reader reads nothing
// before the piece preceding g's. Piece n sits in slot n mod kSlots at its
// natural byte order, so a forward ring's byte at offset o from `base` is
// slots[o mod (kSlots * kSlotBytes)] and a backward ring's piece n is slot
// n mod kSlots (the readers index `slots` directly). Bytes
// outside [lo, hi) read as 0. Backward (kForward false) rings serve readers
// that move towards lower addresses from `base`.
template <bool kForward>
struct WarpRing {
  static constexpr int kSlots = 4;
  static constexpr int kSlotBytes = 1024;
  uint8_t* slots;          // kSlots * kSlotBytes bytes of shared memory, 16-byte aligned
  const uint8_t* base;     // piece 0 starts here (forward) / ends here (backward)
  const uint8_t* lo;
  const uint8_t* hi;
  int64_t ready = 0;       // pieces [0, ready) are complete
  int64_t issued = 0;      // pieces [0, issued) were requested

  KV_DEV const uint8_t* PieceStart(int64_t n) const {
    return kForward ? base + n * kSlotBytes : base - (n + 1) * kSlotBytes;
  }
  KV_DEV void Issue() {
    const int lane = threadIdx.x & 31;
    uint8_t* dst = slots + (issued % kSlots) * kSlotBytes;
    const uint8_t* src = PieceStart(issued);
    for (int c = lane; c < kSlotBytes / 16; c += 32) {
      const uint8_t* g = src + 16 * c;
      const int64_t from = lo - g, avail = hi - g;
      uint32_t bytes = avail >= 16 ? 16u : avail > 0 ? static_cast<uint32_t>(avail) : 0u;
      if (from > 0) bytes = 0;  // a piece before lo (backward rings) reads nothing
      CopyChunk16(dst + 16 * c, g, bytes);
    }
    CpAsyncCommit();
    ++issued;
  }
  // base: 16-byte aligned; forward rings read [base, ...), backward ones
  // (..., base).
  KV_DEV void Start(const uint8_t* b, const uint8_t* l, const uint8_t* h) {
    base = b;
    lo = l;
    hi = h;
    ready = 0;
    issued = 0;
    Issue();
    Issue();
    Issue();
    CpAsyncWait<2>();
    __syncwarp();
    ready = 1;
  }
  // Makes the bytes up to (forward) / down to (backward) g readable.
  KV_DEV void Ensure(const uint8_t* g) {
    const int64_t piece = kForward ? (g - base) / kSlotBytes : (base - 1 - g) / kSlotBytes;
    if (piece < ready) return;
    CpAsyncWait<1>();
    __syncwarp();
    ready = issued - 1;
    Issue();
  }
};

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_BYTES_CUH_
