// Copyright kvserve authors. The warp kernels of pack frames: one warp per
// coded tile, encode and decode, for the plans BuildPlan marks `pack_warps`
// (identity transform, head_dim 128, channel-axis tiles of at most 32 rows
// with an even bit width, token-axis groups of 16, 32, 64 or 128 channels)
// on views with 16-byte rows of bf16 or f16. The tile kernels (encode.cu,
// decode.cu) cover everything; these do the same arithmetic (grid.cuh,
// operation for operation, so frames and decoded values are the same) with
// fewer instructions:
//   * source rows go from global memory straight to registers, and no block
//     barrier is ever taken (a warp's staging buffer is its own);
//   * a key tile (channel axis) is one warp, 4 channels per lane over the
//     tile's rows: per-channel min/max in the lane without shuffles, the 4
//     grid searches in the lane, then the codes from a second read of the
//     rows (L1/L2), which keeps the kernel at 3 blocks per SM;
//   * a value tile (token axis) is 8 lanes per row, 16 channels per lane, 4
//     rows per warp instruction, 8 (encode) or 16 (decode) rows in flight
//     per warp;
//   * the bit width is a template parameter (one switch per tile), so the
//     packing is constant shifts, and the grid search is one out-of-line
//     copy (inlined per channel it overflowed the instruction cache);
//   * codes and parameters pass through the warp's shared-memory stage, so
//     the frame gets aligned 16-byte stores at any frame offset;
//   * NaN-propagating min/max carry non-finite detection; codes are
//     rounded, and widened on decode, with one float add each (exact below
//     2^22); bf16 outputs are narrowed two at a time (cvt.rn.bf16x2.f32).
// Headers and checksums stay with the record kernels, raw records with the
// raw-window kernels.
#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/grid.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_args.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kD = 128;           // head_dim of the warp kernel
constexpr int kWarps = 8;         // warps (tiles) per block
constexpr int kKeyRows = 32;      // channel-axis tile rows at most
constexpr int kValueBatch = 16;   // token-axis rows a warp loads before computing (decode)
constexpr int kEncodeBatch = 8;   // ... (encode, which needs more registers per row)

// min / max that return NaN when either input is NaN (PTX min.NaN, max.NaN):
// a group's min and max are then finite exactly when all its values are.
KV_DEV float MinNaN(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? a + b : (b < a ? b : a);
#endif
}
KV_DEV float MaxNaN(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? a + b : (a < b ? b : a);
#endif
}

// Element j (0 or 1) of a word of two 16-bit values, widened.
template <bool kF16>
KV_DEV float Widen(uint32_t w, int j) {
  if (kF16) return HalfBitsToFloat(static_cast<uint16_t>(w >> (16 * j)));
  return BitsFloat(j == 0 ? w << 16 : w & 0xFFFF0000u);
}

// EncodeValue (grid.cuh) for finite x with finite params, as one formula
// for both grids: ((x - z) * inv + h) with (z, h) = (0, h) when symmetric
// and (zero, 0) otherwise (x - 0 is x, and a product + 0 differs from the
// product only for -0, which the clamp makes 0 either way); the clamps as
// min/max, the rounding as an add of 1.5 * 2^23 (q is in [0, 255]).
KV_DEV uint32_t CodeOf(float x, float z, float inv, float h, float lm1) {
  float q = FAdd(FMul(FSub(x, z), inv), h);
  q = fminf(fmaxf(q, 0.0f), lm1);
  return FloatBits(FAdd(q, 12582912.0f)) - 0x4B400000u;
}

// The grid search as a call (a kernel inlining it once per channel or row
// overflows the instruction cache), returned by value so that nothing goes
// through local memory: the parameters and 1 / scale, or zeros and the
// status (kDevNonFinite when min or max is not finite).
struct GridOut {
  float scale, zero, inv;
  uint32_t status;
};
__device__ __noinline__ GridOut GridCall(int levels, bool sym, bool f16, float mn, float mx) {
  GridOut o{0.0f, 0.0f, 0.0f, kDevNonFinite};
  if (IsFiniteF(mn) && IsFiniteF(mx)) o.status = GridParamsFor(levels, sym, f16, mn, mx, &o.scale, &o.zero);
  if (o.status != kDevOk) {
    o.scale = 0.0f;
    o.zero = 0.0f;
  }
  o.inv = InverseScale(o.scale);
  return o;
}

// The f16 bits of v, a value f16 represents exactly (the grid search's f16
// scales and zero points are): the exponent rebased, or for f16 subnormals
// v * 2^24, without the general conversion's rounding branches.
KV_DEV uint32_t ExactHalfBits(float v) {
  const uint32_t x = FloatBits(v);
  const uint32_t a = x & 0x7fffffffu;
  const uint32_t sub = static_cast<uint32_t>(FMul(BitsFloat(a), 16777216.0f));
  return ((x >> 16) & 0x8000u) | (a >= 0x38800000u ? (a >> 13) - 0x1C000u : sub);
}

// A warp's staging buffers: its codes and parameters go to the frame from
// here with aligned 16-byte stores (StoreFromSmem), whatever the frame
// offsets' alignment.
struct WarpStage {
  uint32_t codes[kKeyRows * kD / 4 + 4];  // 32 rows of 8-bit codes at most
  uint32_t params[2 * 128 + 4];           // scales at byte 0, zeros at byte 512
};
constexpr uint32_t kZerosAt = 512;

KV_DEV void StageParamBits(uint32_t* params, uint32_t index, float v, bool f32) {
  if (f32) {
    params[index] = FloatBits(v);
  } else {
    reinterpret_cast<uint16_t*>(params)[index] = static_cast<uint16_t>(ExactHalfBits(v));
  }
}

// N codes of B bits, code j at bit j * B, as ceil(N B / 32) words.
template <int B, int N>
KV_DEV void PackBits(const uint32_t codes[N], uint32_t w[(N * B + 31) / 32]) {
#pragma unroll
  for (int k = 0; k < (N * B + 31) / 32; ++k) w[k] = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int bit = j * B;
    w[bit / 32] |= codes[j] << (bit % 32);
    if (bit % 32 + B > 32) w[bit / 32 + 1] |= codes[j] >> (32 - bit % 32);
  }
}

struct TileCtx {
  RunDesc run;
  RecordDesc rec;
  int head;
  int row_begin, rows;   // run-relative
  uint8_t* scales;       // the run's scales in the frame, then its zeros
  uint8_t* zeros;
  uint8_t* codes;        // the segment's codes in the frame
  int ssz;
  bool f32, sym;
  float lm1, h;
  uint32_t* err;
};

// Element offset of row r (tile-relative) of the tile.
KV_DEV int64_t TileRow(const EncArgs& a, const TileCtx& t, int r) {
  return RowElemOffset(a.src, t.rec.layer, t.rec.kind, t.head, t.rec.token_begin + t.run.begin + t.row_begin + r);
}

// Channel axis: the tile is one token group. Lane l holds channels
// [4 l, 4 l + 4) of every row; B (even) bits per code.
template <bool kF16, int B>
KV_DEV void PackKeyTile(const EncArgs& a, const TileCtx& t, WarpStage& st) {
  const int lane = threadIdx.x & 31;
  // Two passes over the rows (the second from L1/L2): statistics, then
  // codes. Holding the rows in registers instead halves the warps an SM runs.
  const uint8_t* row0 = a.src.data + TileRow(a, t, 0) * 2 + 8 * lane;
  const bool flat = a.src.page_base == nullptr;
  const int64_t stride = a.src.token * 2;
  auto load = [&](int r) {
    return *reinterpret_cast<const uint2*>(flat ? row0 + r * stride : a.src.data + TileRow(a, t, r) * 2 + 8 * lane);
  };
  float mn[4], mx[4];
  {
    const uint2 w0 = load(0);
#pragma unroll
    for (int j = 0; j < 4; ++j) mn[j] = mx[j] = Widen<kF16>(j < 2 ? w0.x : w0.y, j & 1);
  }
#pragma unroll 8
  for (int r = 1; r < t.rows; ++r) {
    const uint2 w = load(r);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float x = Widen<kF16>(j < 2 ? w.x : w.y, j & 1);
      mn[j] = MinNaN(mn[j], x);
      mx[j] = MaxNaN(mx[j], x);
    }
  }
  float zero[4], inv[4];
  const float h = t.sym ? t.h : 0.0f;
  uint32_t bad = kDevOk;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const GridOut g = GridCall(t.run.levels, t.sym, !t.f32, mn[j], mx[j]);
    if (g.status != kDevOk) bad = g.status;
    StageParamBits(st.params, 4 * lane + j, g.scale, t.f32);
    if (!t.sym) StageParamBits(st.params + kZerosAt / 4, 4 * lane + j, g.zero, t.f32);
    zero[j] = g.zero;
    inv[j] = g.inv;
  }
  if (bad != kDevOk) RecordError(t.err, bad, t.run.record, bad == kDevNonFinite ? 0 : 2);
  constexpr int kRowBytes = kD * B / 8;
  uint8_t* codes = reinterpret_cast<uint8_t*>(st.codes) + lane * (B / 2);
#pragma unroll 8
  for (int r = 0; r < t.rows; ++r) {
    const uint2 w = load(r);
    uint32_t c[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) c[j] = CodeOf(Widen<kF16>(j < 2 ? w.x : w.y, j & 1), zero[j], inv[j], h, t.lm1);
    uint32_t v[1];
    PackBits<B, 4>(c, v);
    uint8_t* p = codes + r * kRowBytes;
    if (B == 2) {
      *p = static_cast<uint8_t>(v[0]);
    } else if (B == 4) {
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v[0]);
    } else if (B == 8) {
      *reinterpret_cast<uint32_t*>(p) = v[0];
    } else {
#pragma unroll
      for (int k = 0; k < B / 2; ++k) p[k] = static_cast<uint8_t>(v[0] >> (8 * k));
    }
  }
  __syncwarp();
  const int64_t g0 = static_cast<int64_t>(t.row_begin / t.run.group) * kD;
  StoreFromSmem(t.scales + g0 * t.ssz, st.params, 0, kD * t.ssz, lane, 32);
  if (!t.sym) StoreFromSmem(t.zeros + g0 * t.ssz, st.params, kZerosAt, kD * t.ssz, lane, 32);
  StoreFromSmem(t.codes + static_cast<int64_t>(t.row_begin) * kRowBytes, st.codes, 0, t.rows * kRowBytes, lane, 32);
}

// Token axis: groups of run.group (>= 16) channels within a row. Lane
// (sub, part) holds channels [16 part, 16 part + 16) of rows 4 i + sub.
// Codes and parameters collect in the stage over as many batches as it
// holds (a whole 64-row tile for kivi-2's values) before they are stored.
template <bool kF16, int B>
KV_DEV void PackValueTile(const EncArgs& a, const TileCtx& t, WarpStage& st) {
  const int lane = threadIdx.x & 31;
  const int sub = lane >> 3, part = lane & 7;
  const int lpg_shift = t.run.group == 16 ? 0 : t.run.group == 32 ? 1 : t.run.group == 64 ? 2 : 3;
  const int lanes_per_group = 1 << lpg_shift;
  const int gpr = 8 >> lpg_shift;  // groups per row
  constexpr int kRowBytes = kD * B / 8;
  // Rows the stage holds: codes in 4 KiB, each parameter array in 512 bytes.
  constexpr int kCodeRows = kKeyRows * kD / kRowBytes / kEncodeBatch * kEncodeBatch;
  const int param_rows = static_cast<int>(kZerosAt) / (gpr * t.ssz) / kEncodeBatch * kEncodeBatch;
  const int stage_rows = kCodeRows < param_rows ? kCodeRows : param_rows;
  const float h = t.sym ? t.h : 0.0f;
  const uint8_t* row0 = a.src.data + TileRow(a, t, 0) * 2 + 32 * part;
  const bool flat = a.src.page_base == nullptr;
  const int64_t stride = a.src.token * 2;
  uint32_t bad = kDevOk;
  int f0 = 0;  // first row of the stage
  for (int r0 = 0; r0 < t.rows; r0 += kEncodeBatch) {
    uint4 w[kEncodeBatch / 4][2];
#pragma unroll
    for (int k = 0; k < kEncodeBatch / 4; ++k) {
      int r = r0 + 4 * k + sub;
      r = r < t.rows ? r : 0;
      const uint4* p = reinterpret_cast<const uint4*>(flat ? row0 + r * stride : a.src.data + TileRow(a, t, r) * 2 + 32 * part);
      w[k][0] = p[0];
      w[k][1] = p[1];
    }
#pragma unroll
    for (int k = 0; k < kEncodeBatch / 4; ++k) {
      const int rl = 4 * k + sub;  // row within the batch
      const int rs = r0 - f0 + rl;  // ... within the stage
      const bool active = r0 + rl < t.rows;
      const uint32_t u[8] = {w[k][0].x, w[k][0].y, w[k][0].z, w[k][0].w, w[k][1].x, w[k][1].y, w[k][1].z, w[k][1].w};
      float v[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j] = Widen<kF16>(u[j / 2], j & 1);
      float mn = v[0], mx = v[0];
#pragma unroll
      for (int j = 1; j < 16; ++j) {
        mn = MinNaN(mn, v[j]);
        mx = MaxNaN(mx, v[j]);
      }
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) {
        if (off < lanes_per_group) {
          mn = MinNaN(mn, __shfl_xor_sync(0xffffffffu, mn, off));
          mx = MaxNaN(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        }
      }
      const GridOut g = GridCall(t.run.levels, t.sym, !t.f32, mn, mx);
      if (g.status != kDevOk && active) bad = g.status;
      if ((part & (lanes_per_group - 1)) == 0) {
        const int gi = rs * gpr + (part >> lpg_shift);
        StageParamBits(st.params, gi, g.scale, t.f32);
        if (!t.sym) StageParamBits(st.params + kZerosAt / 4, gi, g.zero, t.f32);
      }
      uint32_t c[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) c[j] = CodeOf(v[j], g.zero, g.inv, h, t.lm1);
      uint32_t pw[B / 2 + 1];
      PackBits<B, 16>(c, pw);
      uint8_t* p = reinterpret_cast<uint8_t*>(st.codes) + rs * kRowBytes + part * 2 * B;
      if (B % 2 == 0) {
#pragma unroll
        for (int q = 0; q < B / 2; ++q) reinterpret_cast<uint32_t*>(p)[q] = pw[q];
      } else {
#pragma unroll
        for (int q = 0; q < B; ++q) reinterpret_cast<uint16_t*>(p)[q] = static_cast<uint16_t>(pw[q / 2] >> (16 * (q & 1)));
      }
    }
    const int staged_end = r0 + kEncodeBatch < t.rows ? r0 + kEncodeBatch : t.rows;
    if (staged_end == t.rows || staged_end - f0 + kEncodeBatch > stage_rows) {
      __syncwarp();
      const int n = staged_end - f0;
      const int64_t g0 = static_cast<int64_t>(t.row_begin + f0) * gpr;
      StoreFromSmem(t.scales + g0 * t.ssz, st.params, 0, n * gpr * t.ssz, lane, 32);
      if (!t.sym) StoreFromSmem(t.zeros + g0 * t.ssz, st.params, kZerosAt, n * gpr * t.ssz, lane, 32);
      StoreFromSmem(t.codes + static_cast<int64_t>(t.row_begin + f0) * kRowBytes, st.codes, 0, n * kRowBytes, lane, 32);
      __syncwarp();  // the stage is reused by the next batch
      f0 = staged_end;
    }
  }
  if (bad != kDevOk) RecordError(t.err, bad, t.run.record, bad == kDevNonFinite ? 0 : 1);
}

template <bool kF16>
__global__ void __launch_bounds__(32 * kWarps, 3) PackWarpsKernel(EncArgs a, int64_t tile_begin, int64_t tile_end) {
  __shared__ WarpStage stages[kWarps];
  const int64_t ti = tile_begin + static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (ti >= tile_end) return;
  const TileDesc tile = a.t.tiles[ti];
  TileCtx t;
  t.run = a.t.runs[tile.run];
  if (t.run.levels == 0) return;  // pruned
  t.rec = a.t.records[t.run.record];
  t.head = tile.head;
  t.row_begin = tile.row_begin;
  t.rows = tile.row_end - tile.row_begin;
  t.f32 = a.c.scale_f32 != 0;
  t.sym = a.c.symmetric != 0;
  t.ssz = t.f32 ? 4 : 2;
  t.scales = a.frame + t.rec.static_offset + 28 + t.rec.side_bytes + t.run.params_rel;
  t.zeros = t.scales + static_cast<int64_t>(t.run.ngroups) * t.ssz;
  t.codes = a.frame + a.t.segments[t.run.segment].static_coded_offset;
  t.lm1 = static_cast<float>(t.run.levels - 1);
  t.h = FMul(t.lm1, 0.5f);
  t.err = ErrorBlock(a.ws, a.L);
  WarpStage& st = stages[threadIdx.x >> 5];
  if (t.run.axis != 0) {
    switch (t.run.bits) {
      case 2: PackKeyTile<kF16, 2>(a, t, st); break;
      case 4: PackKeyTile<kF16, 4>(a, t, st); break;
      case 6: PackKeyTile<kF16, 6>(a, t, st); break;
      default: PackKeyTile<kF16, 8>(a, t, st); break;
    }
    return;
  }
  switch (t.run.bits) {
    case 1: PackValueTile<kF16, 1>(a, t, st); break;
    case 2: PackValueTile<kF16, 2>(a, t, st); break;
    case 3: PackValueTile<kF16, 3>(a, t, st); break;
    case 4: PackValueTile<kF16, 4>(a, t, st); break;
    case 5: PackValueTile<kF16, 5>(a, t, st); break;
    case 6: PackValueTile<kF16, 6>(a, t, st); break;
    case 7: PackValueTile<kF16, 7>(a, t, st); break;
    default: PackValueTile<kF16, 8>(a, t, st); break;
  }
}

// ------------------------------------------------------------ decode

// DecodeValue (grid.cuh), the code widened with a float subtract.
KV_DEV float ValueOf(uint32_t code, float scale, float zero, float h, bool sym) {
  const float c = FSub(BitsFloat(0x4B000000u | code), 8388608.0f);
  return sym ? FMul(FSub(c, h), scale) : FAdd(zero, FMul(c, scale));
}

// Two values as the word of two 16-bit output elements (lo first).
template <bool kF16>
KV_DEV uint32_t Narrow(float lo, float hi) {
  if (kF16) return FloatToHalfBits(lo) | (static_cast<uint32_t>(FloatToHalfBits(hi)) << 16);
#ifdef __CUDA_ARCH__
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return FloatToBF16Bits(lo) | (static_cast<uint32_t>(FloatToBF16Bits(hi)) << 16);
#endif
}

// Code j (bits [j B, j B + B)) of the words w.
template <int B>
KV_DEV uint32_t CodeAt(const uint32_t* w, int j) {
  const int bit = j * B;
  uint32_t c = w[bit / 32] >> (bit % 32);
  if (bit % 32 + B > 32) c |= w[bit / 32 + 1] << (32 - bit % 32);
  return c & ((1u << B) - 1u);
}

struct DecTileCtx {
  RunDesc run;
  RecordDesc rec;
  int head;
  int row_begin, rows;
  const uint8_t* scales;
  const uint8_t* zeros;
  const uint8_t* codes;
  int ssz;
  bool f32, sym;
  float h;
  uint32_t* err;
};

KV_DEV uint8_t* OutRow(const DecArgs& a, const DecTileCtx& t, int r) {
  const int token = t.rec.token_begin + t.run.begin + t.row_begin + r;
  return a.out.data + RowElemOffset(a.out, t.rec.layer, t.rec.kind, t.head, token) * 2;
}
KV_DEV void KeepRow(const DecArgs& a, const DecTileCtx& t, int r, uint8_t v) {
  KeepMask(a, t.rec.layer, t.rec.kind, t.head, t.rec.token_begin + t.run.begin + t.row_begin + r, v);
}
// Non-finite or negative scales, non-finite zero points: Corruption.
KV_DEV bool ParamsOk(float scale, float zero) { return IsFiniteF(scale) && !(scale < 0.0f) && IsFiniteF(zero); }
// Parameter `index` of a staged range.
KV_DEV float StagedParam(const uint32_t* params, int index, bool f32) {
  return f32 ? BitsFloat(params[index]) : HalfBitsToFloat(reinterpret_cast<const uint16_t*>(params)[index]);
}

// Channel axis: lane l writes channels [4 l, 4 l + 4) of every row.
template <bool kF16, int B>
KV_DEV void UnpackKeyTile(const DecArgs& a, const DecTileCtx& t, WarpStage& st) {
  const int lane = threadIdx.x & 31;
  constexpr int kRowBytes = kD * B / 8;
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  const int64_t g0 = static_cast<int64_t>(t.row_begin / t.run.group) * kD;
  LoadToSmem(st.codes, t.codes + static_cast<int64_t>(t.row_begin) * kRowBytes, t.rows * kRowBytes, lo, hi, lane, 32);
  LoadToSmem(st.params, t.scales + g0 * t.ssz, kD * t.ssz, lo, hi, lane, 32);
  if (!t.sym) LoadToSmem(st.params + kZerosAt / 4, t.zeros + g0 * t.ssz, kD * t.ssz, lo, hi, lane, 32);
  __syncwarp();
  float scale[4], zero[4];
  bool ok = true;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    scale[j] = StagedParam(st.params, 4 * lane + j, t.f32);
    zero[j] = t.sym ? 0.0f : StagedParam(st.params + kZerosAt / 4, 4 * lane + j, t.f32);
    ok = ok && ParamsOk(scale[j], zero[j]);
  }
  const bool check_codes = t.run.levels != (1 << B);
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(st.codes) + lane * (B / 2);
#pragma unroll 4
  for (int r = 0; r < t.rows; ++r) {
    const uint8_t* p = codes + r * kRowBytes;
    uint32_t w[1];
    if (B == 2) {
      w[0] = *p;
    } else if (B == 4) {
      w[0] = *reinterpret_cast<const uint16_t*>(p);
    } else if (B == 8) {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      w[0] = 0;
#pragma unroll
      for (int k = 0; k < B / 2; ++k) w[0] |= static_cast<uint32_t>(p[k]) << (8 * k);
    }
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t c = CodeAt<B>(w, j);
      if (check_codes) ok = ok && c < static_cast<uint32_t>(t.run.levels);
      x[j] = ValueOf(c, scale[j], zero[j], t.h, t.sym);
    }
    *reinterpret_cast<uint2*>(OutRow(a, t, r) + 8 * lane) = make_uint2(Narrow<kF16>(x[0], x[1]), Narrow<kF16>(x[2], x[3]));
    if (lane == 0) KeepRow(a, t, r, 1);
  }
  if (!ok) RecordError(t.err, kDevCorrupt, static_cast<uint32_t>(t.run.record), kCorCode);
}

// Token axis: lane (sub, part) writes channels [16 part, 16 part + 16) of
// rows 4 i + sub.
template <bool kF16, int B>
KV_DEV void UnpackValueTile(const DecArgs& a, const DecTileCtx& t, WarpStage& st) {
  const int lane = threadIdx.x & 31;
  const int sub = lane >> 3, part = lane & 7;
  constexpr int kRowBytes = kD * B / 8;
  const int lanes_per_group = t.run.group / 16;
  const int gpr = kD / t.run.group;
  const bool check_codes = t.run.levels != (1 << B);
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  bool ok = true;
  for (int r0 = 0; r0 < t.rows; r0 += kValueBatch) {
    const int n = t.rows - r0 < kValueBatch ? t.rows - r0 : kValueBatch;
    const int64_t g0 = static_cast<int64_t>(t.row_begin + r0) * gpr;
    __syncwarp();  // the previous batch is done with the stage
    LoadToSmem(st.codes, t.codes + static_cast<int64_t>(t.row_begin + r0) * kRowBytes, n * kRowBytes, lo, hi, lane, 32);
    LoadToSmem(st.params, t.scales + g0 * t.ssz, n * gpr * t.ssz, lo, hi, lane, 32);
    if (!t.sym) LoadToSmem(st.params + kZerosAt / 4, t.zeros + g0 * t.ssz, n * gpr * t.ssz, lo, hi, lane, 32);
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kValueBatch / 4; ++k) {
      const int rl = 4 * k + sub;
      if (rl >= n) continue;
      const int g = rl * gpr + part / lanes_per_group;
      const float scale = StagedParam(st.params, g, t.f32);
      const float zero = t.sym ? 0.0f : StagedParam(st.params + kZerosAt / 4, g, t.f32);
      ok = ok && ParamsOk(scale, zero);
      const uint8_t* p = reinterpret_cast<const uint8_t*>(st.codes) + rl * kRowBytes + part * 2 * B;
      uint32_t w[B / 2 + 1];
      if (B % 2 == 0) {
#pragma unroll
        for (int q = 0; q < B / 2; ++q) w[q] = reinterpret_cast<const uint32_t*>(p)[q];
      } else {
#pragma unroll
        for (int q = 0; q <= B / 2; ++q) w[q] = 0;
#pragma unroll
        for (int q = 0; q < B; ++q) w[q / 2] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[q]) << (16 * (q & 1));
      }
      uint32_t out[8];
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        const uint32_t c0 = CodeAt<B>(w, j), c1 = CodeAt<B>(w, j + 1);
        if (check_codes) ok = ok && c0 < static_cast<uint32_t>(t.run.levels) && c1 < static_cast<uint32_t>(t.run.levels);
        out[j / 2] = Narrow<kF16>(ValueOf(c0, scale, zero, t.h, t.sym), ValueOf(c1, scale, zero, t.h, t.sym));
      }
      uint4* dst = reinterpret_cast<uint4*>(OutRow(a, t, r0 + rl)) + 2 * part;
      dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
      dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
      if (part == 0) KeepRow(a, t, r0 + rl, 1);
    }
  }
  if (!ok) RecordError(t.err, kDevCorrupt, static_cast<uint32_t>(t.run.record), kCorCode);
}

// A pruned run's tile: zeros, keep-mask 0.
KV_DEV void ZeroTile(const DecArgs& a, const DecTileCtx& t) {
  const int lane = threadIdx.x & 31;
  const int sub = lane >> 3, part = lane & 7;
  for (int r = sub; r < t.rows; r += 4) {
    uint4* dst = reinterpret_cast<uint4*>(OutRow(a, t, r)) + 2 * part;
    dst[0] = make_uint4(0, 0, 0, 0);
    dst[1] = make_uint4(0, 0, 0, 0);
    if (part == 0) KeepRow(a, t, r, 0);
  }
}

template <bool kF16>
__global__ void __launch_bounds__(32 * kWarps, 3) UnpackWarpsKernel(DecArgs a, int64_t tile_begin, int64_t tile_end) {
  __shared__ WarpStage stages[kWarps];
  if (Failed(a.ws, a.L)) return;
  const int64_t ti = tile_begin + static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (ti >= tile_end) return;
  const TileDesc tile = a.t.tiles[ti];
  DecTileCtx t;
  t.run = a.t.runs[tile.run];
  t.rec = a.t.records[t.run.record];
  t.head = tile.head;
  t.row_begin = tile.row_begin;
  t.rows = tile.row_end - tile.row_begin;
  if (t.run.levels == 0) {
    ZeroTile(a, t);
    return;
  }
  t.f32 = a.c.scale_f32 != 0;
  t.sym = a.c.symmetric != 0;
  t.ssz = t.f32 ? 4 : 2;
  t.scales = a.bytes + RecAux(a.ws, a.L)[2 * t.run.record + 1] + t.run.params_rel;
  t.zeros = t.scales + static_cast<int64_t>(t.run.ngroups) * t.ssz;
  t.codes = a.bytes + SegOff(a.ws, a.L)[t.run.segment];
  t.h = FMul(static_cast<float>(t.run.levels - 1), 0.5f);
  t.err = ErrorBlock(a.ws, a.L);
  WarpStage& st = stages[threadIdx.x >> 5];
  if (t.run.axis != 0) {
    switch (t.run.bits) {
      case 2: UnpackKeyTile<kF16, 2>(a, t, st); break;
      case 4: UnpackKeyTile<kF16, 4>(a, t, st); break;
      case 6: UnpackKeyTile<kF16, 6>(a, t, st); break;
      default: UnpackKeyTile<kF16, 8>(a, t, st); break;
    }
    return;
  }
  switch (t.run.bits) {
    case 1: UnpackValueTile<kF16, 1>(a, t, st); break;
    case 2: UnpackValueTile<kF16, 2>(a, t, st); break;
    case 3: UnpackValueTile<kF16, 3>(a, t, st); break;
    case 4: UnpackValueTile<kF16, 4>(a, t, st); break;
    case 5: UnpackValueTile<kF16, 5>(a, t, st); break;
    case 6: UnpackValueTile<kF16, 6>(a, t, st); break;
    case 7: UnpackValueTile<kF16, 7>(a, t, st); break;
    default: UnpackValueTile<kF16, 8>(a, t, st); break;
  }
}

}  // namespace

bool PackWarpsApply(const EncodeLaunch& e, const DeviceView& src) {
  return e.pack_warps && e.direct && src.vec16 && (src.dtype == 1 || src.dtype == 2) && e.consts.head_dim == kD;
}

Status LaunchPackWarps(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range, CUstream_st* stream) {
  const int64_t tiles = range.tile_end - range.tile_begin;
  if (tiles <= 0) return Status::Ok();
  const EncArgs a = MakeEncArgs(e, src);
  const unsigned blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  if (src.dtype == 1) {
    KV_LAUNCH(PackWarpsKernel<true>, blocks, 32 * kWarps, 0, stream)(a, range.tile_begin, range.tile_end);
  } else {
    KV_LAUNCH(PackWarpsKernel<false>, blocks, 32 * kWarps, 0, stream)(a, range.tile_begin, range.tile_end);
  }
  return LaunchStatus("encode: pack warps");
}

bool UnpackWarpsApply(const DecodeLaunch& d, const DeviceView& out) {
  return d.pack_warps && d.consts.codec == 0 && out.vec16 && (out.dtype == 1 || out.dtype == 2) &&
         d.consts.head_dim == kD;
}

Status LaunchUnpackWarps(const DecodeLaunch& d, const DecArgs& a, CUstream_st* stream) {
  const int64_t tiles = d.range.tile_end - d.range.tile_begin;
  if (tiles <= 0) return Status::Ok();
  const unsigned blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  if (a.out.dtype == 1) {
    KV_LAUNCH(UnpackWarpsKernel<true>, blocks, 32 * kWarps, 0, stream)(a, d.range.tile_begin, d.range.tile_end);
  } else {
    KV_LAUNCH(UnpackWarpsKernel<false>, blocks, 32 * kWarps, 0, stream)(a, d.range.tile_begin, d.range.tile_end);
  }
  return LaunchStatus("decode: unpack warps");
}

}  // namespace kvserve::cuda
