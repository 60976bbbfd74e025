// Copyright kvserve authors. Warp-per-row building blocks shared by the
// encode and decode kernels: a row of head_dim = 32*E values lives in one
// warp, lane l holding channels [l*E, (l+1)*E). Loads and stores of the
// strided KV view (16-byte vectors when the layout allows), the transforms'
// per-row forward/inverse maps (src/transforms/*.cc, operation for operation),
// and bit packing of a row's codes (src/codecs/pack.cc layout).
#ifndef KVSERVE_CUDA_ROWS_CUH_
#define KVSERVE_CUDA_ROWS_CUH_

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/plan.h"

namespace kvserve::cuda {

// A strided KV view on the device (element strides, as KvStrides).
struct DeviceView {
  uint8_t* data;
  int64_t layer, kind, head, token, dim;
  int32_t dtype;       // DType
  int32_t elem_bytes;
  int32_t vec_ok;      // dim stride 1 and every row start aligned to E * elem_bytes
};

KV_DEV float LoadElem(const uint8_t* p, int dtype) {
  switch (dtype) {
    case 0: return *reinterpret_cast<const float*>(p);
    case 1: return HalfBitsToFloat(*reinterpret_cast<const uint16_t*>(p));
    default: return BF16BitsToFloat(*reinterpret_cast<const uint16_t*>(p));
  }
}

KV_DEV void StoreElem(uint8_t* p, int dtype, float v) {
  switch (dtype) {
    case 0: *reinterpret_cast<float*>(p) = v; return;
    case 1: *reinterpret_cast<uint16_t*>(p) = FloatToHalfBits(v); return;
    default: *reinterpret_cast<uint16_t*>(p) = FloatToBF16Bits(v); return;
  }
}

template <int E>
KV_DEV void UnpackHalves(const uint32_t* w, float v[E], int dtype) {
#pragma unroll
  for (int j = 0; j < E; ++j) {
    const uint16_t h = static_cast<uint16_t>(w[j / 2] >> (16 * (j & 1)));
    v[j] = dtype == 1 ? HalfBitsToFloat(h) : BF16BitsToFloat(h);
  }
}

// Loads `bytes` (2..32) bytes at an address aligned to them into words.
template <int kBytes>
KV_DEV void LoadAligned(const uint8_t* p, uint32_t* w) {
  if constexpr (kBytes == 2) {
    w[0] = *reinterpret_cast<const uint16_t*>(p);
  } else if constexpr (kBytes == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (kBytes == 8) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    w[0] = x.x; w[1] = x.y;
  } else if constexpr (kBytes == 16) {
    const uint4 x = *reinterpret_cast<const uint4*>(p);
    w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
  } else {
    const uint4 x = *reinterpret_cast<const uint4*>(p);
    const uint4 y = *reinterpret_cast<const uint4*>(p + 16);
    w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
    w[4] = y.x; w[5] = y.y; w[6] = y.z; w[7] = y.w;
  }
}
template <int kBytes>
KV_DEV void StoreAligned(uint8_t* p, const uint32_t* w) {
  if constexpr (kBytes == 2) {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(w[0]);
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<uint32_t*>(p) = w[0];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else if constexpr (kBytes == 16) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    *reinterpret_cast<uint4*>(p + 16) = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

KV_DEV int64_t RowElemOffset(const DeviceView& v, int layer, int kind, int head, int token) {
  return layer * v.layer + kind * v.kind + head * v.head + token * v.token;
}

// This lane's E values of row (layer, kind, head, token), widened to f32.
template <int E>
KV_DEV void LoadRow(const DeviceView& v, int layer, int kind, int head, int token, float x[E]) {
  const int lane = threadIdx.x & 31;
  const int64_t base = RowElemOffset(v, layer, kind, head, token);
  if (v.vec_ok) {
    const uint8_t* p = v.data + (base + int64_t{lane} * E) * v.elem_bytes;
    if (v.dtype == 0) {
      uint32_t w[E];
      LoadAligned<4 * E>(p, w);
#pragma unroll
      for (int j = 0; j < E; ++j) x[j] = BitsFloat(w[j]);
    } else {
      uint32_t w[(E + 1) / 2];
      LoadAligned<2 * E>(p, w);
      UnpackHalves<E>(w, x, v.dtype);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < E; ++j)
    x[j] = LoadElem(v.data + (base + (int64_t{lane} * E + j) * v.dim) * v.elem_bytes, v.dtype);
}

template <int E>
KV_DEV void StoreRow(const DeviceView& v, int layer, int kind, int head, int token, const float x[E]) {
  const int lane = threadIdx.x & 31;
  const int64_t base = RowElemOffset(v, layer, kind, head, token);
  if (v.vec_ok) {
    uint8_t* p = v.data + (base + int64_t{lane} * E) * v.elem_bytes;
    if (v.dtype == 0) {
      uint32_t w[E];
#pragma unroll
      for (int j = 0; j < E; ++j) w[j] = FloatBits(x[j]);
      StoreAligned<4 * E>(p, w);
    } else {
      uint32_t w[(E + 1) / 2] = {};
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const uint16_t h = v.dtype == 1 ? FloatToHalfBits(x[j]) : FloatToBF16Bits(x[j]);
        w[j / 2] |= static_cast<uint32_t>(h) << (16 * (j & 1));
      }
      StoreAligned<2 * E>(p, w);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < E; ++j)
    StoreElem(v.data + (base + (int64_t{lane} * E + j) * v.dim) * v.elem_bytes, v.dtype, x[j]);
}

// ------------------------------------------------------------ hadamard
// In-place FWHT of the warp's row (format.md §5.4): stage h pairs channels
// j and j + h; stages h < E are inside a lane, the rest across lanes.
template <int E>
KV_DEV void WarpFwht(float v[E]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < E; h *= 2) {
#pragma unroll
    for (int j = 0; j < E; ++j) {
      if ((j & h) == 0) {
        const float a = v[j], b = v[j + h];
        v[j] = FAdd(a, b);
        v[j + h] = FSub(a, b);
      }
    }
  }
#pragma unroll
  for (int m = 1; m < 32; m *= 2) {
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const float other = __shfl_xor_sync(0xffffffffu, v[j], m);
      v[j] = (lane & m) ? FSub(other, v[j]) : FAdd(v[j], other);
    }
  }
}

// Sign-bit masks of this lane's channels from the (layer, kind, head) words.
template <int E>
KV_DEV uint32_t SignBitsOfLane(const uint64_t* words) {
  const int lane = threadIdx.x & 31;
  const int d0 = lane * E;
  const uint64_t w = words[d0 >> 6];
  return static_cast<uint32_t>((w >> (d0 & 63)) & ((uint64_t{1} << E) - 1));
}

template <int E>
KV_DEV void FlipSigns(float v[E], uint32_t signs) {
#pragma unroll
  for (int j = 0; j < E; ++j)
    if ((signs >> j) & 1u) v[j] = BitsFloat(FloatBits(v[j]) ^ 0x80000000u);
}

// ------------------------------------------------------------ packing
// Writes the row's codes (lane l holds codes of channels [l*E, (l+1)*E), b
// bits each) as the pack layout's 32*E*b bits to dst (any alignment).
template <int E>
KV_DEV void PackRow(const uint32_t codes[E], int b, uint8_t* dst) {
  const int lane = threadIdx.x & 31;
  uint64_t chunk = 0;
#pragma unroll
  for (int j = 0; j < E; ++j) chunk |= static_cast<uint64_t>(codes[j]) << (j * b);
  const int cs = E * b;           // bits per lane
  const int words = E * b;        // 32-bit words per row
  const int kmax = (32 + cs - 1) / cs + 1;
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 3u) == 0;
  for (int w0 = 0; w0 < words; w0 += 32) {
    const int w = w0 + lane;
    const int first = w < words ? (32 * w) / cs : 0;
    uint32_t word = 0;
    for (int k = 0; k < kmax; ++k) {
      const int src = first + k;
      const uint64_t val = __shfl_sync(0xffffffffu, chunk, src < 32 ? src : 31);
      if (src < 32 && w < words) {
        const int off = src * cs - 32 * w;
        if (off >= 32) continue;
        if (off >= 0) {
          word |= static_cast<uint32_t>(val << off);
        } else if (-off < 64) {
          word |= static_cast<uint32_t>(val >> (-off));
        }
      }
    }
    if (w < words) {
      uint8_t* p = dst + 4 * w;
      if (aligned) {
        *reinterpret_cast<uint32_t*>(p) = word;
      } else {
        p[0] = static_cast<uint8_t>(word);
        p[1] = static_cast<uint8_t>(word >> 8);
        p[2] = static_cast<uint8_t>(word >> 16);
        p[3] = static_cast<uint8_t>(word >> 24);
      }
    }
  }
}

// Reads this lane's E codes of b bits starting at bit `bit` of `src`.
template <int E>
KV_DEV void UnpackLane(const uint8_t* src, uint64_t bit, int b, uint32_t codes[E]) {
  const uint8_t* p = src + (bit >> 3);
  const int shift = static_cast<int>(bit & 7);
  const int nbytes = (shift + E * b + 7) >> 3;  // <= 9
  uint64_t lo = 0;
  const int nlo = nbytes < 8 ? nbytes : 8;
  for (int i = 0; i < nlo; ++i) lo |= static_cast<uint64_t>(p[i]) << (8 * i);
  uint64_t chunk = lo >> shift;
  if (nbytes > 8) chunk |= static_cast<uint64_t>(p[8]) << (64 - shift);
  const uint32_t mask = (1u << b) - 1u;
#pragma unroll
  for (int j = 0; j < E; ++j) codes[j] = static_cast<uint32_t>(chunk >> (j * b)) & mask;
}

// Little-endian stores/loads at any alignment.
KV_DEV void PutU16(uint8_t* p, uint32_t v) { p[0] = v; p[1] = v >> 8; }
KV_DEV void PutU32(uint8_t* p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
KV_DEV uint32_t GetU16(const uint8_t* p) { return p[0] | (static_cast<uint32_t>(p[1]) << 8); }
KV_DEV uint32_t GetU32(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_ROWS_CUH_
