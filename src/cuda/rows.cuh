// Copyright kvserve authors. Row building blocks shared by the encode and
// decode kernels. A row (one token of one head, head_dim = D values) is held
// by D/16 consecutive lanes of a warp, 16 consecutive channels per lane, so a
// warp holds 32/(D/16) rows at once and per-row work (group statistics, grid
// parameters) is shared by several rows per instruction. Loads and stores of
// the strided KV view (two or four 16-byte vectors per lane when the layout
// allows), the transforms' per-row maps (src/transforms/*.cc, operation for
// operation), and packing of a lane's 16 codes (src/codecs/pack.cc layout).
#ifndef KVSERVE_CUDA_ROWS_CUH_
#define KVSERVE_CUDA_ROWS_CUH_

#include <cstdint>

#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/plan.h"

namespace kvserve::cuda {

inline constexpr int kLaneElems = 16;  // channels per lane
inline constexpr int kBlockWarps = 8;  // warps of the tile kernels

// The lane geometry of head_dim D (32, 64, 128 or 256).
template <int D>
struct RowGeo {
  static constexpr int kLanesPerRow = D / kLaneElems;
  static constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  static constexpr int kRowsPerBlock = kBlockWarps * kRowsPerWarp;
  KV_DEV static int Sub() { return (threadIdx.x & 31) / kLanesPerRow; }   // row within the warp
  KV_DEV static int Part() { return (threadIdx.x & 31) % kLanesPerRow; }  // 16-channel slice
};

// A strided KV view on the device (element strides, as KvStrides).
// Paged views (kvserve/paged.h) set page_base: row (layer, kind, head,
// token) then starts at element page_base[2 layer + kind] +
// block_table[token / block_size] * block + (token % block_size) * token +
// head * head of data (layer and kind strides unused).
struct DeviceView {
  uint8_t* data;
  int64_t layer, kind, head, token, dim;
  int32_t dtype;       // DType
  int32_t elem_bytes;
  int32_t vec16;       // dim stride 1 and every row start 16-byte aligned
  int32_t block_size;  // paged: token slots per block
  int32_t block_shift; // paged: log2(block_size) when a power of two, else -1
  int32_t pad0;
  int64_t block;       // paged: element stride from block b to b + 1
  const int64_t* page_base;   // paged: [2 * layers] element offsets from data; null otherwise
  const int32_t* block_table; // paged: block ids in token order
};

KV_DEV float LoadElem(const uint8_t* p, int dtype) {
  switch (dtype) {
    case 0: return *reinterpret_cast<const float*>(p);
    case 1: return HalfBitsToFloat(*reinterpret_cast<const uint16_t*>(p));
    default: return BF16BitsToFloat(*reinterpret_cast<const uint16_t*>(p));
  }
}

KV_DEV uint32_t EncodeElemBits(int dtype, float v) {
  return dtype == 0 ? FloatBits(v) : dtype == 1 ? FloatToHalfBits(v) : FloatToBF16Bits(v);
}

KV_DEV void StoreElem(uint8_t* p, int dtype, float v) {
  if (dtype == 0) {
    *reinterpret_cast<float*>(p) = v;
  } else {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(EncodeElemBits(dtype, v));
  }
}

KV_DEV int64_t RowElemOffset(const DeviceView& v, int layer, int kind, int head, int token) {
  if (v.page_base != nullptr) {
    const int b = v.block_shift >= 0 ? token >> v.block_shift : token / v.block_size;
    const int slot = token - b * v.block_size;
    return v.page_base[2 * layer + kind] + int64_t{v.block_table[b]} * v.block + int64_t{slot} * v.token +
           int64_t{head} * v.head;
  }
  return layer * v.layer + kind * v.kind + head * v.head + token * v.token;
}

// This lane's 16 values (channels [16 part, 16 part + 16)) of row (layer,
// kind, head, token), widened to f32.
template <int D>
KV_DEV void LoadRow(const DeviceView& v, int layer, int kind, int head, int token, float x[kLaneElems]) {
  const int part = RowGeo<D>::Part();
  const int64_t base = RowElemOffset(v, layer, kind, head, token) + int64_t{kLaneElems} * part * v.dim;
  if (v.vec16) {
    const uint4* p = reinterpret_cast<const uint4*>(v.data + base * v.elem_bytes);
    if (v.dtype == 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 w = p[q];
        x[4 * q] = BitsFloat(w.x);
        x[4 * q + 1] = BitsFloat(w.y);
        x[4 * q + 2] = BitsFloat(w.z);
        x[4 * q + 3] = BitsFloat(w.w);
      }
    } else {
      const uint4 w0 = p[0], w1 = p[1];
      const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) {
        const uint16_t h = static_cast<uint16_t>(w[j / 2] >> (16 * (j & 1)));
        x[j] = v.dtype == 1 ? HalfBitsToFloat(h) : BF16BitsToFloat(h);
      }
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kLaneElems; ++j) x[j] = LoadElem(v.data + (base + j * v.dim) * v.elem_bytes, v.dtype);
}

// The same 16 values from a row staged in shared memory (its source bytes,
// 16-byte aligned, as LoadRow would read them).
template <int D>
KV_DEV void LoadStagedRow(const uint32_t* row, int dtype, float x[kLaneElems]) {
  const int part = RowGeo<D>::Part();
  if (dtype == 0) {
    const uint4* p = reinterpret_cast<const uint4*>(row) + 4 * part;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 w = p[q];
      x[4 * q] = BitsFloat(w.x);
      x[4 * q + 1] = BitsFloat(w.y);
      x[4 * q + 2] = BitsFloat(w.z);
      x[4 * q + 3] = BitsFloat(w.w);
    }
    return;
  }
  const uint4* p = reinterpret_cast<const uint4*>(row) + 2 * part;
  const uint4 w0 = p[0], w1 = p[1];
  const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
  for (int j = 0; j < kLaneElems; ++j) {
    const uint16_t h = static_cast<uint16_t>(w[j / 2] >> (16 * (j & 1)));
    x[j] = dtype == 1 ? HalfBitsToFloat(h) : BF16BitsToFloat(h);
  }
}

template <int D>
KV_DEV void StoreRow(const DeviceView& v, int layer, int kind, int head, int token,
                     const float x[kLaneElems]) {
  const int part = RowGeo<D>::Part();
  const int64_t base = RowElemOffset(v, layer, kind, head, token) + int64_t{kLaneElems} * part * v.dim;
  if (v.vec16) {
    uint4* p = reinterpret_cast<uint4*>(v.data + base * v.elem_bytes);
    // One branch per row on the dtype (uniform), none per element.
    if (v.dtype == 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        p[q] = make_uint4(FloatBits(x[4 * q]), FloatBits(x[4 * q + 1]), FloatBits(x[4 * q + 2]),
                          FloatBits(x[4 * q + 3]));
      return;
    }
    uint32_t w[8];
    if (v.dtype == 2) {
#pragma unroll
      for (int q = 0; q < 8; ++q) w[q] = FloatToBF16Bits(x[2 * q]) | (FloatToBF16Bits(x[2 * q + 1]) << 16);
    } else {
#pragma unroll
      for (int q = 0; q < 8; ++q) w[q] = FloatToHalfBits(x[2 * q]) | (FloatToHalfBits(x[2 * q + 1]) << 16);
    }
    p[0] = make_uint4(w[0], w[1], w[2], w[3]);
    p[1] = make_uint4(w[4], w[5], w[6], w[7]);
    return;
  }
#pragma unroll
  for (int j = 0; j < kLaneElems; ++j) StoreElem(v.data + (base + j * v.dim) * v.elem_bytes, v.dtype, x[j]);
}

// log2 of a row's bytes (head_dim * elem_bytes, both powers of two).
KV_DEV int RowShift(const DeviceView& v, int head_dim) {
  return (31 - __clz(head_dim)) + (v.elem_bytes == 4 ? 2 : 1);
}

// The element offset in the view of byte offset d (a multiple of 16) of the
// raw-record data of (layer, kind, heads x tokens rows from token_begin):
// the bytes of [head][token][dim] order. A 16-byte piece never crosses a row
// (rows are D * elem_bytes >= 64 bytes, a multiple of 16), so with vec16 the
// piece is 16 contiguous, aligned bytes of the view.
KV_DEV int64_t RawChunkElem(const DeviceView& v, int layer, int kind, int token_begin, int tokens, int head_dim,
                            uint64_t d) {
  // Rows are head_dim * elem_bytes bytes, a power of two: shifts, and one
  // 32-bit division for the head (rows < 2^26).
  const int elem_shift = v.elem_bytes == 4 ? 2 : 1;
  const int row_shift = RowShift(v, head_dim);
  const uint32_t row = static_cast<uint32_t>(d >> row_shift);
  const uint32_t head = row / static_cast<uint32_t>(tokens);
  const int token = static_cast<int>(row - head * static_cast<uint32_t>(tokens));
  const int i = static_cast<int>((d & ((uint64_t{1} << row_shift) - 1)) >> elem_shift);
  return RowElemOffset(v, layer, kind, static_cast<int>(head), token_begin + token) + i * v.dim;
}

// Those 16 bytes as 4 words.
KV_DEV void LoadRawChunk(const DeviceView& v, int layer, int kind, int token_begin, int tokens, int head_dim,
                         uint64_t d, uint32_t w[4]) {
  const int64_t off = RawChunkElem(v, layer, kind, token_begin, tokens, head_dim, d);
  if (v.vec16) {
    const uint4 x = *reinterpret_cast<const uint4*>(v.data + off * v.elem_bytes);
    w[0] = x.x;
    w[1] = x.y;
    w[2] = x.z;
    w[3] = x.w;
    return;
  }
  const int n = 16 / v.elem_bytes;
  for (int j = 0; j < 4; ++j) w[j] = 0;
  for (int j = 0; j < n; ++j) {
    const uint8_t* p = v.data + (off + j * v.dim) * v.elem_bytes;
    const uint32_t bits = v.elem_bytes == 4 ? *reinterpret_cast<const uint32_t*>(p)
                                            : *reinterpret_cast<const uint16_t*>(p);
    if (v.elem_bytes == 4) {
      w[j] = bits;
    } else {
      w[j >> 1] |= bits << (16 * (j & 1));
    }
  }
}

// Stores 16 raw bytes (4 words) at data byte offset d of such a region.
KV_DEV void StoreRawChunk(const DeviceView& v, int layer, int kind, int token_begin, int tokens, int head_dim,
                          uint64_t d, const uint32_t w[4]) {
  const int64_t off = RawChunkElem(v, layer, kind, token_begin, tokens, head_dim, d);
  if (v.vec16) {
    *reinterpret_cast<uint4*>(v.data + off * v.elem_bytes) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  const int n = 16 / v.elem_bytes;
  for (int j = 0; j < n; ++j) {
    uint8_t* p = v.data + (off + j * v.dim) * v.elem_bytes;
    if (v.elem_bytes == 4) {
      *reinterpret_cast<uint32_t*>(p) = w[j];
    } else {
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(w[j >> 1] >> (16 * (j & 1)));
    }
  }
}

// ------------------------------------------------------------ hadamard
// In-place FWHT of the row (format.md §5.4): stage h pairs channels j and
// j + h; stages h < 16 are inside a lane, the rest across the row's lanes.
template <int D>
KV_DEV void RowFwht(float v[kLaneElems]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < kLaneElems; h *= 2) {
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      if ((j & h) == 0) {
        const float a = v[j], b = v[j + h];
        v[j] = FAdd(a, b);
        v[j + h] = FSub(a, b);
      }
    }
  }
#pragma unroll
  for (int m = 1; m < RowGeo<D>::kLanesPerRow; m *= 2) {
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      const float other = __shfl_xor_sync(0xffffffffu, v[j], m);
      v[j] = (lane & m) ? FSub(other, v[j]) : FAdd(v[j], other);
    }
  }
}

// Sign-bit mask of this lane's 16 channels from the (layer, kind, head) words.
template <int D>
KV_DEV uint32_t SignBitsOfLane(const uint64_t* words) {
  const int d0 = kLaneElems * RowGeo<D>::Part();
  return static_cast<uint32_t>((words[d0 >> 6] >> (d0 & 63)) & 0xFFFFu);
}

KV_DEV void FlipSigns(float v[kLaneElems], uint32_t signs) {
#pragma unroll
  for (int j = 0; j < kLaneElems; ++j)
    if ((signs >> j) & 1u) v[j] = BitsFloat(FloatBits(v[j]) ^ 0x80000000u);
}

// ------------------------------------------------------------ packing
// A lane's 16 codes of b bits are 2b bytes of the pack layout (LSB first),
// at byte offset 2b * part of the row: two halves of 8 codes, b bytes each.
KV_DEV void PackLane(const uint32_t codes[kLaneElems], int b, uint8_t* dst) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint64_t v = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) v |= static_cast<uint64_t>(codes[8 * half + j]) << (j * b);
    uint8_t* p = dst + half * b;
    if ((b & 3) == 0) {
      for (int k = 0; k < b / 4; ++k) reinterpret_cast<uint32_t*>(p)[k] = static_cast<uint32_t>(v >> (32 * k));
    } else if ((b & 1) == 0) {
      for (int k = 0; k < b / 2; ++k) reinterpret_cast<uint16_t*>(p)[k] = static_cast<uint16_t>(v >> (16 * k));
    } else {
      for (int k = 0; k < b; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
    }
  }
}

// The inverse: 16 codes from the 2b bytes at byte offset k of a 4-byte
// aligned smem word array.
KV_DEV void UnpackLane(const uint32_t* words, uint32_t k, int b, uint32_t codes[kLaneElems]) {
  const uint32_t mask = (1u << b) - 1u;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint64_t v = U64At(words, k + half * b);
#pragma unroll
    for (int j = 0; j < 8; ++j) codes[8 * half + j] = static_cast<uint32_t>(v >> (j * b)) & mask;
  }
}

// Little-endian stores/loads at any alignment.
KV_DEV void PutU16(uint8_t* p, uint32_t v) { p[0] = v; p[1] = v >> 8; }
KV_DEV void PutU32(uint8_t* p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
// A scale or zero point (f32, or f16 bits) at any alignment.
KV_DEV void PutParam(uint8_t* p, float v, bool f32) {
  if (f32) {
    PutU32(p, FloatBits(v));
  } else {
    PutU16(p, FloatToHalfBits(v));
  }
}
KV_DEV uint32_t GetU16(const uint8_t* p) { return p[0] | (static_cast<uint32_t>(p[1]) << 8); }
KV_DEV uint32_t GetU32(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_ROWS_CUH_
