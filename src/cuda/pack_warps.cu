// Copyright kvserve authors. The warp kernels of pack frames: one warp per
// coded tile, encode and decode, for the plans BuildPlan marks `pack_warps`
// (identity transform, head_dim 128, channel-axis tiles of at most 32 rows
// with an even bit width, token-axis groups of 16, 32, 64 or 128 channels)
// on views with 16-byte rows of bf16 or f16. The tile kernels (encode.cu,
// decode.cu) cover everything; these do the same arithmetic (grid.cuh,
// operation for operation, so frames and decoded values are the same) with
// fewer instructions:
//   * a warp's shared memory is its own, so no block barrier is ever taken;
//   * encode: a warp starts from its tile's flat PackJob (plan.h; jobs are
//     ordered by code path, so a launch runs one path after another) and
//     copies the tile's rows into its shared memory with cp.async: a key
//     tile's (channel axis, at most 32 rows) all at once, a value tile's
//     (token axis) in 16-row chunks, two in flight;
//   * a key tile is 4 channels per lane: per-channel min/max on packed
//     bf16x2/f16x2 pairs in the lane, 4 grid searches, then the codes; a
//     value tile is 8 lanes per row, 16 channels per lane, 4 rows per warp
//     instruction, each group's grid search done by one lane;
//   * the bit width is a template parameter (one switch per tile), so the
//     packing is constant shifts (encode: shift-adds, RoundingBias), and the
//     grid search is one out-of-line copy per grid and parameter type
//     (inlined per channel it overflowed the instruction cache);
//   * codes and parameters pass through the warp's shared-memory stage, so
//     the frame gets aligned 16-byte stores at any frame offset; decode
//     stages a tile's codes and parameters with cp.async at their offsets;
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

constexpr int kD = 128;       // head_dim of the warp kernel
constexpr int kWarps = 8;     // warps (tiles) per decode block
constexpr int kKeyRows = 32;  // channel-axis tile rows at most

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

// Two 16-bit values per word, NaN-propagating minimum / maximum of each
// half (PTX min.NaN / max.NaN on f16x2 or bf16x2): exact, so the widened
// result is the minimum / maximum of the widened values, and NaN exactly
// when an input was. The sign of a zero may differ from a float comparison;
// the grid search adds 0 first, which makes both zeros +0.
template <bool kF16>
KV_DEV uint32_t Min2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t r;
  if (kF16) {
    asm("min.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else {
    asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
#else
  uint32_t r = 0;
  for (int j = 0; j < 2; ++j) {
    const float x = Widen<kF16>(a, j), y = Widen<kF16>(b, j);
    const uint32_t h = (x != x || y != y) ? 0x7fffu : ((y < x ? b : a) >> (16 * j)) & 0xffffu;
    r |= h << (16 * j);
  }
  return r;
#endif
}
template <bool kF16>
KV_DEV uint32_t Max2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t r;
  if (kF16) {
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  } else {
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  }
  return r;
#else
  uint32_t r = 0;
  for (int j = 0; j < 2; ++j) {
    const float x = Widen<kF16>(a, j), y = Widen<kF16>(b, j);
    const uint32_t h = (x != x || y != y) ? 0x7fffu : ((x < y ? b : a) >> (16 * j)) & 0xffffu;
    r |= h << (16 * j);
  }
  return r;
#endif
}

// EncodeValue (grid.cuh) of a value x of the group whose parameters these
// are, as the low B bits of the returned word. The clamps to [0, levels - 1]
// are left out: they never bind for such x. The search starts from a scale
// >= RN(range / lm1) (asymmetric; RN(amax / h) symmetric) and only raises
// it, and 0 <= RN(x - zero) <= range (x >= min >= zero), so
// q = RN(RN(x - zero) * inv) is in [0, lm1 (1 + 4 eps)] (symmetric:
// q = RN(RN(x * inv) + h) in [-h 4 eps, lm1 + h 4 eps]), far from the
// rounding boundaries -0.5 and lm1 + 0.5. The rounding is an add of
// 1.5 * 2^23, whose result holds the code in its low bits; for the
// asymmetric grid the CPU's formula has no "+ h" and none is done here.
template <bool kSym>
KV_DEV uint32_t CodeBits(float x, float zero, float inv, float h) {
  const float q = kSym ? FAdd(FMul(x, inv), h) : FMul(FSub(x, zero), inv);
  return FloatBits(FAdd(q, 12582912.0f));
}

// The sum over n codes of 0x4B400000 << (B j) (mod 2^32): CodeBits' words
// are 0x4B400000 + code, so n of them shifted into place and added, minus
// this, are the n codes packed (nothing carries: each code < 2^B). One
// shift-add per code instead of a mask, shift and or.
template <int B, int N>
KV_HD constexpr uint32_t RoundingBias() {
  uint32_t b = 0;
  for (int j = 0; j < N; ++j) b += 0x4B400000u << (B * j);
  return b;
}

// The grid search as a call (a kernel inlining it once per channel or row
// overflows the instruction cache), returned by value so that nothing goes
// through local memory: the parameters and 1 / scale, or zeros and the
// status (kDevNonFinite when min or max is not finite). One copy per grid
// (symmetric or not) and parameter type (f16 or f32): their branches are
// resolved at compile time.
struct GridOut {
  float scale, zero, inv;
  uint32_t status;
};
template <bool kSym, bool kF16Params>
__device__ __noinline__ GridOut GridCallOf(int levels, float mn, float mx) {
  GridOut o{0.0f, 0.0f, 0.0f, kDevNonFinite};
  if (IsFiniteF(mn) && IsFiniteF(mx)) o.status = GridParamsFor(levels, kSym, kF16Params, mn, mx, &o.scale, &o.zero);
  if (o.status != kDevOk) {
    o.scale = 0.0f;
    o.zero = 0.0f;
  }
  o.inv = InverseScale(o.scale);
  return o;
}
template <bool kSym>
KV_DEV GridOut GridCall(int levels, bool f16, float mn, float mx) {
  return f16 ? GridCallOf<kSym, true>(levels, mn, mx) : GridCallOf<kSym, false>(levels, mn, mx);
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

// Parameter `index` of a staged range.
KV_DEV float StagedParam(const uint32_t* params, int index, bool f32) {
  return f32 ? BitsFloat(params[index]) : HalfBitsToFloat(reinterpret_cast<const uint16_t*>(params)[index]);
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

// A tile being encoded: its PackJob (plan.h), with the frame offsets made
// pointers.
struct TileCtx {
  PackJob job;
  int rows;
  uint8_t* scales;  // the tile's first scale in the frame
  uint8_t* zeros;   // ... first zero point
  uint8_t* codes;   // ... first code byte
  int ssz;
  bool f32;
  float h;
  uint32_t* err;
};

// A warp's shared memory in the encode kernel: the source rows of its tile
// (a whole key tile, or two 16-row chunks of a value tile), copied in with
// cp.async so that every row of a chunk is in flight at once, then the
// staging of its codes and parameters.
constexpr int kSrcRows = 32;
constexpr int kChunkRows = 16;  // value tiles: rows per cp.async chunk
struct EncWarpSmem {
  uint4 src[kSrcRows * kD * 2 / 16];
  WarpStage st;
  float inv[kChunkRows * 8];  // value tiles: 1 / scale of each (chunk row, group)
};
constexpr int kEncWarps = 4;  // warps (tiles) per encode block
constexpr size_t kEncSmemBytes = sizeof(EncWarpSmem) * kEncWarps;

// Element offset of row r (tile-relative) of the tile.
KV_DEV int64_t TileRow(const EncArgs& a, const TileCtx& t, int r) {
  return RowElemOffset(a.src, t.job.layer, t.job.kind, t.job.head, t.job.token + r);
}

// v[i] for a run-time i in [0, 4), by selects (an indexed register array
// would go to local memory).
KV_DEV float Pick4(const float v[4], int i) {
  const float lo = (i & 1) ? v[1] : v[0];
  const float hi = (i & 1) ? v[3] : v[2];
  return (i & 2) ? hi : lo;
}

// Issues the cp.async copies of tile rows [r0, r0 + n) (n <= kMax) to dst
// (row r0 + i at dst + 16 i), 16 bytes per lane and copy, and commits them
// as one group (an empty one when n is 0).
template <int kMax>
KV_DEV void FetchRows(const EncArgs& a, const TileCtx& t, uint4* dst, int r0, int n, int lane) {
  const bool flat = a.src.page_base == nullptr;
  const uint8_t* base = flat ? a.src.data + TileRow(a, t, r0) * 2 : nullptr;
  const int64_t stride = a.src.token * 2;
#pragma unroll
  for (int k = 0; k < kMax / 2; ++k) {
    const int c = lane + 32 * k;
    const int i = c >> 4, piece = c & 15;
    if (i < n) {
      const uint8_t* row = flat ? base + i * stride : a.src.data + TileRow(a, t, r0 + i) * 2;
      CpAsync16(dst + c, row + 16 * piece);
    }
  }
  CpAsyncCommit();
}

// Channel axis: the tile is one token group of at most 32 rows, all in
// shared memory before any is read. Lane l holds channels [4 l, 4 l + 4):
// per-channel min/max on packed pairs, 4 grid searches, then the codes.
template <bool kF16, bool kSym, int B>
KV_DEV void PackKeyTile(const EncArgs& a, const TileCtx& t, EncWarpSmem& sm) {
  const int lane = threadIdx.x & 31;
  WarpStage& st = sm.st;
  FetchRows<kSrcRows>(a, t, sm.src, 0, t.rows, lane);
  CpAsyncWait<0>();
  __syncwarp();
  const uint2* rows = reinterpret_cast<const uint2*>(sm.src) + lane;  // row r at rows[32 r]
  uint32_t mn0 = rows[0].x, mn1 = rows[0].y, mx0 = mn0, mx1 = mn1;
#pragma unroll 4
  for (int r = 1; r < t.rows; ++r) {
    const uint2 w = rows[32 * r];
    mn0 = Min2<kF16>(mn0, w.x);
    mn1 = Min2<kF16>(mn1, w.y);
    mx0 = Max2<kF16>(mx0, w.x);
    mx1 = Max2<kF16>(mx1, w.y);
  }
  float zero[4], inv[4];
  uint32_t bad = kDevOk;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const GridOut g = GridCall<kSym>(t.job.levels, !t.f32, Widen<kF16>(j < 2 ? mn0 : mn1, j & 1),
                                     Widen<kF16>(j < 2 ? mx0 : mx1, j & 1));
    if (g.status != kDevOk) bad = g.status;
    StageParamBits(st.params, 4 * lane + j, g.scale, t.f32);
    if (!kSym) StageParamBits(st.params + kZerosAt / 4, 4 * lane + j, g.zero, t.f32);
    zero[j] = g.zero;
    inv[j] = g.inv;
  }
  if (bad != kDevOk) RecordError(t.err, bad, t.job.record, bad == kDevNonFinite ? 0 : 2);
  constexpr int kRowBytes = kD * B / 8;
  uint8_t* codes = reinterpret_cast<uint8_t*>(st.codes) + lane * (B / 2);
#pragma unroll 4
  for (int r = 0; r < t.rows; ++r) {
    const uint2 w = rows[32 * r];
    uint32_t v = 0u - RoundingBias<B, 4>();
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v += CodeBits<kSym>(Widen<kF16>(j < 2 ? w.x : w.y, j & 1), zero[j], inv[j], t.h) << (B * j);
    uint8_t* p = codes + r * kRowBytes;
    if (B == 2) {
      *p = static_cast<uint8_t>(v);
    } else if (B == 4) {
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
    } else if (B == 8) {
      *reinterpret_cast<uint32_t*>(p) = v;
    } else {
#pragma unroll
      for (int k = 0; k < B / 2; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
    }
  }
  __syncwarp();
  StoreFromSmem(t.scales, st.params, 0, kD * t.ssz, lane, 32);
  if (!kSym) StoreFromSmem(t.zeros, st.params, kZerosAt, kD * t.ssz, lane, 32);
  StoreFromSmem(t.codes, st.codes, 0, t.rows * kRowBytes, lane, 32);
}

// Token axis: groups of run.group (>= 16) channels within a row. The rows
// come in 16-row chunks, two in flight (cp.async into alternating halves of
// the source buffer). Lane (sub, part) holds channels [16 part, 16 part + 16)
// of chunk rows 4 i + sub. Codes and parameters collect in the stage over as
// many rows as it holds (a whole 64-row tile for kivi-2's values) before
// they are stored.
template <bool kF16, bool kSym, int B>
KV_DEV void PackValueTile(const EncArgs& a, const TileCtx& t, EncWarpSmem& sm) {
  const int lane = threadIdx.x & 31;
  const int sub = lane >> 3, part = lane & 7;
  WarpStage& st = sm.st;
  const int lpg_shift = t.job.group == 16 ? 0 : t.job.group == 32 ? 1 : t.job.group == 64 ? 2 : 3;
  const int lanes_per_group = 1 << lpg_shift;
  const int gpr = 8 >> lpg_shift;  // groups per row
  constexpr int kRowBytes = kD * B / 8;
  constexpr uint32_t kMask = (1u << B) - 1u;
  // Rows the stage holds: codes in 4 KiB, each parameter array in 512 bytes.
  constexpr int kCodeRows = kKeyRows * kD / kRowBytes / kChunkRows * kChunkRows;
  const int param_rows = static_cast<int>(kZerosAt) / (gpr * t.ssz) / kChunkRows * kChunkRows;
  const int stage_rows = kCodeRows < param_rows ? kCodeRows : param_rows;
  constexpr int kSlot = kChunkRows * kD * 2 / 16;  // uint4 per chunk
  const int chunks = (t.rows + kChunkRows - 1) / kChunkRows;
  auto fetch = [&](int c) {
    const int r0 = c * kChunkRows;
    const int n = c < chunks ? (t.rows - r0 < kChunkRows ? t.rows - r0 : kChunkRows) : 0;
    FetchRows<kChunkRows>(a, t, sm.src + (c & 1) * kSlot, r0, n, lane);
  };
  uint32_t bad = kDevOk;
  int f0 = 0;  // first row of the stage
  // Iterations -2 and -1 only issue chunks 0 and 1 (one copy of the fetch).
  for (int c = -2; c < chunks; ++c) {
    const int r0 = c * kChunkRows;
    if (c >= 0) {
      CpAsyncWait<1>();  // chunk c is in; c + 1 may still be in flight
      __syncwarp();
      const uint4* slot = sm.src + (c & 1) * kSlot;
      // Each row's group minimum and maximum, in every lane of the group.
      float mn[4], mx[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rl = 4 * i + sub;
        const uint4 w0 = slot[rl * 16 + 2 * part], w1 = slot[rl * 16 + 2 * part + 1];
        const uint32_t m2 = Min2<kF16>(Min2<kF16>(Min2<kF16>(w0.x, w0.y), Min2<kF16>(w0.z, w0.w)),
                                       Min2<kF16>(Min2<kF16>(w1.x, w1.y), Min2<kF16>(w1.z, w1.w)));
        const uint32_t M2 = Max2<kF16>(Max2<kF16>(Max2<kF16>(w0.x, w0.y), Max2<kF16>(w0.z, w0.w)),
                                       Max2<kF16>(Max2<kF16>(w1.x, w1.y), Max2<kF16>(w1.z, w1.w)));
        mn[i] = MinNaN(Widen<kF16>(m2, 0), Widen<kF16>(m2, 1));
        mx[i] = MaxNaN(Widen<kF16>(M2, 0), Widen<kF16>(M2, 1));
#pragma unroll
        for (int off = 1; off < 8; off <<= 1) {
          if (off < lanes_per_group) {
            mn[i] = MinNaN(mn[i], __shfl_xor_sync(0xffffffffu, mn[i], off));
            mx[i] = MaxNaN(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], off));
          }
        }
      }
      // The grid searches, each done once: lane q of a group searches rows
      // q, q + L, ... (L = lanes per group; rows 0-3 by lanes 0-3 when
      // L = 8) and stages their parameters; the codes read them back.
      const int q = part & (lanes_per_group - 1);
      const int calls = lpg_shift >= 2 ? 1 : 4 >> lpg_shift;
      const int step = lpg_shift >= 2 ? 4 : lanes_per_group;
#pragma unroll 1
      for (int k = 0; k < calls; ++k) {
        const int i = (q & 3) + k * step;
        const GridOut g = GridCall<kSym>(t.job.levels, !t.f32, Pick4(mn, i), Pick4(mx, i));
        const int rl = 4 * i + sub;
        if (g.status != kDevOk && r0 + rl < t.rows) bad = g.status;
        if (q < 4) {
          const int gi = (r0 - f0 + rl) * gpr + (part >> lpg_shift);
          StageParamBits(st.params, gi, g.scale, t.f32);
          if (!kSym) StageParamBits(st.params + kZerosAt / 4, gi, g.zero, t.f32);
          sm.inv[rl * gpr + (part >> lpg_shift)] = g.inv;
        }
      }
      __syncwarp();
      // The codes, each row with its group's parameters (one copy of the
      // loop body: the instruction cache).
#pragma unroll 1
      for (int i = 0; i < 4; ++i) {
        const int rl = 4 * i + sub;   // row within the chunk
        const int rs = r0 - f0 + rl;  // ... within the stage
        const float zero = kSym ? 0.0f : StagedParam(st.params + kZerosAt / 4, rs * gpr + (part >> lpg_shift), t.f32);
        const float inv = sm.inv[rl * gpr + (part >> lpg_shift)];
        const uint4 w0 = slot[rl * 16 + 2 * part], w1 = slot[rl * 16 + 2 * part + 1];
        const uint32_t u[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        uint32_t pw[B / 2 + 1];
#pragma unroll
        if (32 % B == 0) {  // no code straddles two words: pack by adding (RoundingBias)
          constexpr int kPerWord = 32 / B;
#pragma unroll
          for (int k2 = 0; k2 <= B / 2; ++k2) pw[k2] = 0u - RoundingBias<B, kPerWord>();
#pragma unroll
          for (int j = 0; j < 16; ++j)
            pw[j / kPerWord] += CodeBits<kSym>(Widen<kF16>(u[j / 2], j & 1), zero, inv, t.h) << (B * (j % kPerWord));
        } else {
#pragma unroll
          for (int k2 = 0; k2 <= B / 2; ++k2) pw[k2] = 0;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const uint32_t code = CodeBits<kSym>(Widen<kF16>(u[j / 2], j & 1), zero, inv, t.h) & kMask;
            const int bit = j * B;
            pw[bit / 32] |= code << (bit % 32);
            if (bit % 32 + B > 32) pw[bit / 32 + 1] |= code >> (32 - bit % 32);
          }
        }
        uint8_t* p = reinterpret_cast<uint8_t*>(st.codes) + rs * kRowBytes + part * 2 * B;
        if (B % 2 == 0) {
#pragma unroll
          for (int q2 = 0; q2 < B / 2; ++q2) reinterpret_cast<uint32_t*>(p)[q2] = pw[q2];
        } else {
#pragma unroll
          for (int q2 = 0; q2 < B; ++q2)
            reinterpret_cast<uint16_t*>(p)[q2] = static_cast<uint16_t>(pw[q2 / 2] >> (16 * (q2 & 1)));
        }
      }
      __syncwarp();  // every lane is done with the chunk's slot
    }
    fetch(c + 2);
    if (c < 0) continue;
    const int staged_end = r0 + kChunkRows < t.rows ? r0 + kChunkRows : t.rows;
    if (staged_end == t.rows || staged_end - f0 + kChunkRows > stage_rows) {
      const int n = staged_end - f0;
      const int64_t g0 = static_cast<int64_t>(f0) * gpr;
      StoreFromSmem(t.scales + g0 * t.ssz, st.params, 0, n * gpr * t.ssz, lane, 32);
      if (!kSym) StoreFromSmem(t.zeros + g0 * t.ssz, st.params, kZerosAt, n * gpr * t.ssz, lane, 32);
      StoreFromSmem(t.codes + static_cast<int64_t>(f0) * kRowBytes, st.codes, 0, n * kRowBytes, lane, 32);
      __syncwarp();  // the stage is reused by the next chunk
      f0 = staged_end;
    }
  }
  CpAsyncWait<0>();  // the (empty) groups past the last chunk
  if (bad != kDevOk) RecordError(t.err, bad, t.job.record, bad == kDevNonFinite ? 0 : 1);
}

template <bool kF16, bool kSym>
KV_DEV void PackTile(const EncArgs& a, const TileCtx& t, EncWarpSmem& sm) {
  if (t.job.axis != 0) {
    switch (t.job.bits) {
      case 2: PackKeyTile<kF16, kSym, 2>(a, t, sm); break;
      case 4: PackKeyTile<kF16, kSym, 4>(a, t, sm); break;
      case 6: PackKeyTile<kF16, kSym, 6>(a, t, sm); break;
      default: PackKeyTile<kF16, kSym, 8>(a, t, sm); break;
    }
    return;
  }
  switch (t.job.bits) {
    case 1: PackValueTile<kF16, kSym, 1>(a, t, sm); break;
    case 2: PackValueTile<kF16, kSym, 2>(a, t, sm); break;
    case 3: PackValueTile<kF16, kSym, 3>(a, t, sm); break;
    case 4: PackValueTile<kF16, kSym, 4>(a, t, sm); break;
    case 5: PackValueTile<kF16, kSym, 5>(a, t, sm); break;
    case 6: PackValueTile<kF16, kSym, 6>(a, t, sm); break;
    case 7: PackValueTile<kF16, kSym, 7>(a, t, sm); break;
    default: PackValueTile<kF16, kSym, 8>(a, t, sm); break;
  }
}

// Job ranges of one launch: segment k is jobs [begin[k], begin[k] + (prefix[k + 1]
// - prefix[k])), warps prefix[k].. of the grid.
constexpr int kMaxPaths = 16;  // (axis, bits) code paths
struct JobSegments {
  int64_t begin[kMaxPaths];
  int64_t prefix[kMaxPaths + 1];
  int n;
};

template <bool kF16>
__global__ void __launch_bounds__(32 * kEncWarps, 4) PackWarpsKernel(EncArgs a, JobSegments segs) {
  KV_DYNAMIC_SMEM(smem);
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kEncWarps + (threadIdx.x >> 5);
  if (w >= segs.prefix[segs.n]) return;
  int k = 0;
  while (w >= segs.prefix[k + 1]) ++k;
  const int64_t ti = segs.begin[k] + (w - segs.prefix[k]);
  TileCtx t;
  t.job = a.t.pack_jobs[ti];
  if (t.job.levels == 0) return;  // pruned
  t.rows = t.job.rows;
  t.f32 = a.c.scale_f32 != 0;
  t.ssz = t.f32 ? 4 : 2;
  t.scales = a.frame + t.job.scales;
  t.zeros = a.frame + t.job.zeros;
  t.codes = a.frame + t.job.codes;
  t.h = FMul(static_cast<float>(t.job.levels - 1), 0.5f);
  t.err = ErrorBlock(a.ws, a.L);
  EncWarpSmem& sm = reinterpret_cast<EncWarpSmem*>(smem)[threadIdx.x >> 5];
  if (a.c.symmetric != 0) {
    PackTile<kF16, true>(a, t, sm);
  } else {
    PackTile<kF16, false>(a, t, sm);
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

// A decode warp's staging: a tile's codes, scales and zero points copied
// in with cp.async (every chunk of a batch in flight at once) from their
// frame offsets, whatever their alignment: byte k of each range is at the
// returned offset + k (StageAsync). 32 bytes of slack each.
struct DecStage {
  uint32_t codes[(kKeyRows * kD + 48) / 4];  // 32 rows of 8-bit codes at most
  uint32_t scales[(512 + 48) / 4];
  uint32_t zeros[(512 + 48) / 4];
};
struct DecStaged {
  uint32_t codes, scales, zeros;  // offsets of the ranges' first bytes
};

// Stages `rows` rows of codes from `codes` and `groups` parameters from
// `scales` / `zeros`, and waits for them.
KV_DEV DecStaged StageTile(const DecArgs& a, const DecTileCtx& t, DecStage& st, const uint8_t* codes, int code_bytes,
                           const uint8_t* scales, const uint8_t* zeros, int groups, int lane) {
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  DecStaged o;
  o.codes = StageAsync(st.codes, codes, code_bytes, lo, hi, lane, 32);
  o.scales = StageAsync(st.scales, scales, groups * t.ssz, lo, hi, lane, 32);
  o.zeros = t.sym ? 0 : StageAsync(st.zeros, zeros, groups * t.ssz, lo, hi, lane, 32);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncwarp();
  return o;
}

// Parameter `index` of a range staged at byte offset `off`.
KV_DEV float StagedParamAt(const uint32_t* smem, uint32_t off, int index, bool f32) {
  return f32 ? BitsFloat(WordAt(smem, off + 4 * index))
             : HalfBitsToFloat(static_cast<uint16_t>(WordAt(smem, off + 2 * index)));
}

// Channel axis: lane l writes channels [4 l, 4 l + 4) of every row.
template <bool kF16, int B>
KV_DEV void UnpackKeyTile(const DecArgs& a, const DecTileCtx& t, DecStage& st) {
  const int lane = threadIdx.x & 31;
  constexpr int kRowBytes = kD * B / 8;
  const int64_t g0 = static_cast<int64_t>(t.row_begin / t.run.group) * kD;
  const DecStaged o = StageTile(a, t, st, t.codes + static_cast<int64_t>(t.row_begin) * kRowBytes, t.rows * kRowBytes,
                                t.scales + g0 * t.ssz, t.zeros + g0 * t.ssz, kD, lane);
  float scale[4], zero[4];
  bool ok = true;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    scale[j] = StagedParamAt(st.scales, o.scales, 4 * lane + j, t.f32);
    zero[j] = t.sym ? 0.0f : StagedParamAt(st.zeros, o.zeros, 4 * lane + j, t.f32);
    ok = ok && ParamsOk(scale[j], zero[j]);
  }
  const bool check_codes = t.run.levels != (1 << B);
  constexpr uint32_t kLaneMask = B == 8 ? 0xffffffffu : (1u << (4 * B)) - 1u;  // the lane's B / 2 bytes
#pragma unroll 4
  for (int r = 0; r < t.rows; ++r) {
    uint32_t w[1] = {WordAt(st.codes, o.codes + r * kRowBytes + lane * (B / 2)) & kLaneMask};
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t c = CodeAt<B>(w, j);
      if (check_codes) ok = ok && c < static_cast<uint32_t>(t.run.levels);
      x[j] = ValueOf(c, scale[j], zero[j], t.h, t.sym);
    }
    *reinterpret_cast<uint2*>(OutRow(a, t, r) + 8 * lane) =
        make_uint2(Narrow<kF16>(x[0], x[1]), Narrow<kF16>(x[2], x[3]));
    if (lane == 0) KeepRow(a, t, r, 1);
  }
  if (!ok) RecordError(t.err, kDevCorrupt, static_cast<uint32_t>(t.run.record), kCorCode);
}

// Token axis: lane (sub, part) writes channels [16 part, 16 part + 16) of
// rows 4 i + sub.
template <bool kF16, int B>
KV_DEV void UnpackValueTile(const DecArgs& a, const DecTileCtx& t, DecStage& st) {
  const int lane = threadIdx.x & 31;
  const int sub = lane >> 3, part = lane & 7;
  constexpr int kRowBytes = kD * B / 8;
  const int lanes_per_group = t.run.group / 16;
  const int gpr = kD / t.run.group;
  const bool check_codes = t.run.levels != (1 << B);
  // Rows per batch: as many as the stage holds (a whole 64-row tile for
  // kivi's and mixhq's values).
  constexpr int kCodeRows = kKeyRows * kD / kRowBytes / 4 * 4;
  const int param_rows = 512 / (gpr * t.ssz) / 4 * 4;
  const int batch = kCodeRows < param_rows ? kCodeRows : param_rows;
  bool ok = true;
  for (int r0 = 0; r0 < t.rows; r0 += batch) {
    const int n = t.rows - r0 < batch ? t.rows - r0 : batch;
    const int64_t g0 = static_cast<int64_t>(t.row_begin + r0) * gpr;
    __syncwarp();  // the previous batch is done with the stage
    const DecStaged o = StageTile(a, t, st, t.codes + static_cast<int64_t>(t.row_begin + r0) * kRowBytes, n * kRowBytes,
                                  t.scales + g0 * t.ssz, t.zeros + g0 * t.ssz, n * gpr, lane);
#pragma unroll 4
    for (int rl = sub; rl < n; rl += 4) {
      const int g = rl * gpr + part / lanes_per_group;
      const float scale = StagedParamAt(st.scales, o.scales, g, t.f32);
      const float zero = t.sym ? 0.0f : StagedParamAt(st.zeros, o.zeros, g, t.f32);
      ok = ok && ParamsOk(scale, zero);
      const uint32_t at = o.codes + rl * kRowBytes + part * 2 * B;
      uint32_t w[B / 2 + 1];
      if (B % 2 == 0) {
#pragma unroll
        for (int q = 0; q < B / 2; ++q) w[q] = WordAt(st.codes, at + 4 * q);
      } else {
#pragma unroll
        for (int q = 0; q <= B / 2; ++q) w[q] = 0;
#pragma unroll
        for (int q = 0; q < B; ++q) w[q / 2] |= (WordAt(st.codes, at + 2 * q) & 0xffffu) << (16 * (q & 1));
      }
      uint32_t out[8];
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        const uint32_t c0 = CodeAt<B>(w, j), c1 = CodeAt<B>(w, j + 1);
        if (check_codes)
          ok = ok && c0 < static_cast<uint32_t>(t.run.levels) && c1 < static_cast<uint32_t>(t.run.levels);
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
  __shared__ DecStage stages[kWarps];
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
  DecStage& st = stages[threadIdx.x >> 5];
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
  if (e.plan == nullptr) return Status::Internal("encode: pack warps without the plan");
  const Plan& p = *e.plan;
  // The whole plan: every job, path after path; one layer: its jobs of each path.
  JobSegments segs{};
  if (range.layer < 0) {
    segs.n = 1;
    segs.begin[0] = 0;
    segs.prefix[1] = static_cast<int64_t>(p.pack_jobs.size());
  } else {
    if (p.pack_paths > kMaxPaths) return Status::Internal("encode: more pack paths than JobSegments holds");
    const int64_t* starts = p.pack_job_starts.data() + range.layer;
    for (int c = 0; c < p.pack_paths; ++c) {
      const int64_t b = starts[c * (p.shape.layers + 1)], end = starts[c * (p.shape.layers + 1) + 1];
      segs.begin[c] = b;
      segs.prefix[c + 1] = segs.prefix[c] + (end - b);
    }
    segs.n = p.pack_paths;
  }
  const int64_t warps = segs.prefix[segs.n];
  if (warps <= 0) return Status::Ok();
  const EncArgs a = MakeEncArgs(e, src);
  const unsigned blocks = static_cast<unsigned>((warps + kEncWarps - 1) / kEncWarps);
  if (src.dtype == 1) {
    KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(PackWarpsKernel<true>, kEncSmemBytes));
    KV_LAUNCH(PackWarpsKernel<true>, blocks, 32 * kEncWarps, kEncSmemBytes, stream)(a, segs);
  } else {
    KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(PackWarpsKernel<false>, kEncSmemBytes));
    KV_LAUNCH(PackWarpsKernel<false>, blocks, 32 * kEncWarps, kEncSmemBytes, stream)(a, segs);
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
    KV_LAUNCH(UnpackWarpsKernel<true>, blocks, 32 * kWarps, 0, stream)
    (a, d.range.tile_begin, d.range.tile_end);
  } else {
    KV_LAUNCH(UnpackWarpsKernel<false>, blocks, 32 * kWarps, 0, stream)
    (a, d.range.tile_begin, d.range.tile_end);
  }
  return LaunchStatus("decode: unpack warps");
}

}  // namespace kvserve::cuda
