// Copyright kvserve authors. Raw records (the `raw` quantizer, residual
// windows: format.md §5) moved between the KV view and the frame in
// registers: a warp takes one 1 KiB window (one XXH3 block) of a record, lane
// l the record bytes [32 l, 32 l + 32) of it. The record's 30-byte header
// shifts its data by 30 bytes against the view's 16-byte aligned rows, and
// the record itself sits at any alignment in the frame; both shifts are done
// with funnel shifts and one neighbour-lane shuffle, so every global access
// is an aligned 16-byte vector (bytes at the record's two ends aside) and no
// shared memory is touched. The same registers yield the window's XXH3 block
// terms (record_hash.cuh), so the checksum reads no byte a second time (the
// chain of the terms runs after, in RecordHashKernel / RawChainKernel).
//
// Used for views with vec16 set (dim stride 1, 16-byte aligned rows) and
// data sizes that are a multiple of 16 (always: head_dim >= 32); other views
// take the staged path of encode.cu / decode.cu.
#ifndef KVSERVE_CUDA_RAW_WINDOW_CUH_
#define KVSERVE_CUDA_RAW_WINDOW_CUH_

#include <cstdint>

#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/launch_args.cuh"
#include "cuda/record_hash.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {

// Byte i (< 16) of the four little-endian words w, without a run-time
// array index (which would put w in local memory).
KV_DEV uint32_t ByteOf4(const uint32_t w[4], uint32_t i) {
  const uint32_t x = i < 4 ? w[0] : i < 8 ? w[1] : i < 12 ? w[2] : w[3];
  return (x >> (8 * (i & 3))) & 0xFFu;
}

// Stores the 16 bytes w at record byte o of a record at `rec` (frame memory;
// rec + o is 16-byte aligned), or only its bytes before `len`.
KV_DEV void StoreRecordChunk(uint8_t* rec, uint64_t o, uint64_t len, const uint32_t w[4]) {
  if (o + 16 <= len) {
    *reinterpret_cast<uint4*>(rec + o) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  for (uint32_t i = 0; o + i < len; ++i) rec[o + i] = static_cast<uint8_t>(ByteOf4(w, i));
}

// The 32 view bytes at data offset d (a multiple of 32; both 16-byte chunks
// lie in one row, rows being >= 64 bytes) of a record's data; chunks outside
// [0, count) read as 0 (count is a multiple of 16).
template <int D>
KV_DEV void LoadRawPair(const DeviceView& v, const RecordDesc& rec, int64_t d, uint64_t count, uint32_t w[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = 0;
  if (d < 0 || static_cast<uint64_t>(d) >= count) return;
  const uint4* p = reinterpret_cast<const uint4*>(
      v.data +
      RawChunkElem(v, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, static_cast<uint64_t>(d)) * v.elem_bytes);
  const uint4 a = p[0];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
  if (static_cast<uint64_t>(d) + 16 < count) {
    const uint4 b = p[1];
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
}

// Encode: windows w = first + warp + kWarps k (k < kWindows, w < end) of raw
// record `rec` (data of `count` bytes from view `src`) written to the frame
// at `dst` (any alignment), with the terms of every full block at
// sums[8 w .. 8 w + 8). Every lane of the warp calls it.
template <int D, int kWindows, int kWarps>
KV_DEV void EncodeRawWindows(const DeviceView& src, const RecordDesc& rec, uint64_t count, uint8_t* dst,
                             uint64_t* sums, int first, int end) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t len = 30 + count;
  const uint64_t nb = (len - 1) / 1024;
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(dst) & 15u);
  // Lane l of window w loads the data bytes [base - 32, base) with base =
  // 1024 w + 32 l; lane 31 also [base, base + 32) (the next window's start).
  uint32_t a[kWindows][8], x[kWindows][8] = {};
#pragma unroll
  for (int k = 0; k < kWindows; ++k) {
    const int w = first + warp + kWarps * k;
    if (w >= end) break;
    const int64_t base = int64_t{1024} * w + 32 * lane;
    LoadRawPair<D>(src, rec, base - 32, count, a[k]);
    if (lane == 31) LoadRawPair<D>(src, rec, base, count, x[k]);
  }
#pragma unroll
  for (int k = 0; k < kWindows; ++k) {
    const int w = first + warp + kWarps * k;
    if (w >= end) break;
    const uint64_t base = uint64_t{1024} * w + 32 * lane;
    // y = data [base - 32, base + 16): own pair + the next lane's first chunk.
    uint32_t y[12];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = a[k][j];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t n = __shfl_down_sync(0xffffffffu, a[k][j], 1);
      y[8 + j] = lane == 31 ? x[k][j] : n;
    }
    // Record byte base + i is data byte base + i - 30, y byte i + 2.
    uint32_t r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r[j] = __funnelshift_r(y[j], y[j + 1], 16);
    if (w == 0 && lane == 0) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t h = 0;
        for (int b = 0; b < 4 && 4 * j + b < 30; ++b) h |= RawHeaderByte(rec, count, 4 * j + b) << (8 * b);
        r[j] = j < 7 ? h : (h & 0xFFFFu) | (r[j] & 0xFFFF0000u);
      }
    }
    if (static_cast<uint64_t>(w) < nb) StoreBlockTerms(r, sums + 8 * w);
    if (mis == 0) {
      if (base < len) {
        StoreRecordChunk(dst, base, len, r);
        if (base + 16 < len) StoreRecordChunk(dst, base + 16, len, r + 4);
      }
      continue;
    }
    // Frame-aligned chunks start at record bytes s + 16 m: this lane writes
    // the two starting in [base, base + 32), which reach 16 - mis bytes into
    // the next lane's piece (lane 31: the next window's, from x).
    uint32_t z[12];
#pragma unroll
    for (int j = 0; j < 8; ++j) z[j] = r[j];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t n = __shfl_down_sync(0xffffffffu, r[j], 1);
      z[8 + j] = lane == 31 ? __funnelshift_r(x[k][j], x[k][j + 1], 16) : n;
    }
    const uint32_t s = 16 - mis;
    uint32_t c[8];
    ShiftBytes<8>(z, s, c);
    if (base + s < len) {
      StoreRecordChunk(dst, base + s, len, c);
      if (base + s + 16 < len) StoreRecordChunk(dst, base + s + 16, len, c + 4);
    }
    if (w == 0 && lane == 0)  // the record's first bytes, before its first aligned chunk
      for (uint32_t i = 0; i < s && i < len; ++i) dst[i] = static_cast<uint8_t>(ByteOf4(r, i));
  }
}

// Decode: windows as for EncodeRawWindows of raw record `rec` at `src` (any
// alignment; reads restricted to [lo, hi)) into view `out`, the block terms
// of every full block at sums[8 w ..), and the keep mask's rows set through
// keep(row) (row = data offset / (D * elem_bytes)). Every lane calls it.
template <int D, int kWindows, int kWarps, typename Keep>
KV_DEV void DecodeRawWindows(const DeviceView& out, const RecordDesc& rec, uint64_t count, const uint8_t* src,
                             const uint8_t* lo, const uint8_t* hi, uint64_t* sums, int first, int end, Keep keep) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint64_t len = 30 + count;
  const uint64_t nb = (len - 1) / 1024;
  const int row_shift = RowShift(out, D);
  uint32_t r[kWindows][8], prev[kWindows];
#pragma unroll
  for (int k = 0; k < kWindows; ++k) {
    const int w = first + warp + kWarps * k;
    if (w >= end) break;
    const uint64_t base = uint64_t{1024} * w + 32 * lane;
    LoadUnaligned<8>(src + base, lo, hi, r[k]);
    prev[k] = 0;
    if (lane == 0 && w > 0) {
      uint32_t t[2];
      LoadUnaligned<2>(src + base - 8, lo, hi, t);
      prev[k] = t[1];
    }
  }
#pragma unroll
  for (int k = 0; k < kWindows; ++k) {
    const int w = first + warp + kWarps * k;
    if (w >= end) break;
    const int64_t base = int64_t{1024} * w + 32 * lane;
    if (static_cast<uint64_t>(w) < nb) StoreBlockTerms(r[k], sums + 8 * w);
    // v = record bytes [base - 4, base + 32); data byte e is record byte
    // e + 30: the chunks at e = base - 32 and base - 16 are v bytes [2, 34).
    uint32_t v[9];
    const uint32_t up = __shfl_up_sync(0xffffffffu, r[k][7], 1);
    v[0] = lane == 0 ? prev[k] : up;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j + 1] = r[k][j];
    uint32_t d[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) d[j] = __funnelshift_r(v[j], v[j + 1], 16);
    const int64_t e = base - 32;  // a multiple of 32
    if (e < 0 || static_cast<uint64_t>(e) >= count) continue;
    uint4* p = reinterpret_cast<uint4*>(
        out.data +
        RawChunkElem(out, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, static_cast<uint64_t>(e)) * out.elem_bytes);
    p[0] = make_uint4(d[0], d[1], d[2], d[3]);
    if (static_cast<uint64_t>(e) + 16 < count) p[1] = make_uint4(d[4], d[5], d[6], d[7]);
    // Rows are multiples of 32 bytes: one starts in [e, e + 32) only at e.
    if ((static_cast<uint64_t>(e) & ((uint64_t{1} << row_shift) - 1)) == 0) keep(static_cast<uint64_t>(e) >> row_shift);
  }
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_RAW_WINDOW_CUH_
