// Copyright kvserve authors. Encode kernels and their launchers.
//
// Per plan range (one layer, or the whole frame), stream-ordered:
//   1. AffineStatsKernel   (affine only) block per (record, head): per-channel
//                          shift/scale -> side bytes + f32 copy for step 2
//   2. EncodeTilesKernel   block per tile of a run: gather + forward transform
//                          + grid params + quantise; params and codes go
//                          straight into the frame (pack: "direct", one pass)
//                          or into the workspace (rans)
//   3. RawTilesKernel      block per 32 rows of a raw record: source bytes
//   4. RansEncodeKernel    (rans) warp per segment: histogram, the format's
//                          NormalizeFrequencies, 32-lane interleaved encode in
//                          reverse, packed fallback
//   5. ScanRecordsKernel   (rans) record offsets: exclusive scan of sizes
//   6. FinalizeKernel      warp per record: record/segment headers, staged
//                          payload copy (rans), XXH3 checksum
// No host synchronisation anywhere; sizes stay on the device.
#include <cub/block/block_scan.cuh>

#include "cuda/common.cuh"
#include "cuda/grid.cuh"
#include "cuda/kernels.h"
#include "cuda/rows.cuh"
#include "cuda/xxh3.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kWarps = 8;                    // warps per tile block
constexpr int kRowsPerWarp = kTileRows / kWarps;
constexpr int kRansWarps = 4;                // warps (segments) per rANS block
constexpr int kFinalizeWarps = 4;

__device__ const uint8_t kSecretBytes[192] = KVSERVE_XXH3_SECRET;

struct EncArgs {
  FrameConsts c;
  DeviceTables t;
  DeviceView src;
  uint8_t* ws;
  uint8_t* frame;
  WorkspaceLayout L;
  int direct;
};

KV_DEV uint32_t* ErrorBlock(const EncArgs& a) { return reinterpret_cast<uint32_t*>(a.ws + a.L.error); }
KV_HD uint64_t* RunningTotal(uint8_t* ws, const WorkspaceLayout& L) {
  return reinterpret_cast<uint64_t*>(ws + L.error + 32);
}

KV_DEV uint8_t* SideDst(const EncArgs& a, const RecordDesc& rec) {
  return a.direct ? a.frame + rec.static_offset + 24 : a.ws + a.L.params + rec.params_ws;
}
KV_DEV uint8_t* ParamsDst(const EncArgs& a, const RecordDesc& rec) {
  return a.direct ? a.frame + rec.static_offset + 28 + rec.side_bytes
                  : a.ws + a.L.params + rec.params_ws + rec.side_bytes;
}

KV_DEV void PutParam(uint8_t* p, float v, bool f32) {
  if (f32) {
    PutU32(p, FloatBits(v));
  } else {
    PutU16(p, FloatToHalfBits(v));
  }
}

// The forward-transformed row t_rel (chunk-relative) of head `head` of `rec`.
// Returns false in lanes holding a non-finite value.
template <int E>
KV_DEV bool TransformedRow(const EncArgs& a, const RecordDesc& rec, int head, int t_rel,
                           uint32_t signs, const float* affine, float v[E]) {
  const int lane = threadIdx.x & 31;
  LoadRow<E>(a.src, rec.layer, rec.kind, head, rec.token_begin + t_rel, v);
  switch (a.c.transform) {
    case 1: {  // delta
      const int anchor_every = a.c.anchor == 0 ? rec.tokens : a.c.anchor;
      const int anchor = t_rel - t_rel % anchor_every;
      if (anchor != t_rel) {
        float base[E];
        LoadRow<E>(a.src, rec.layer, rec.kind, head, rec.token_begin + anchor, base);
#pragma unroll
        for (int j = 0; j < E; ++j) v[j] = FSub(v[j], base[j]);
      }
      break;
    }
    case 2:  // hadamard
      FlipSigns<E>(v, signs);
      WarpFwht<E>(v);
#pragma unroll
      for (int j = 0; j < E; ++j) v[j] = FMul(v[j], a.c.hadamard_scale);
      break;
    case 3: {  // affine
      const int D = 32 * E;
      const float* shift = affine + head * D + lane * E;
      const float* scale = shift + a.c.kv_heads * D;
#pragma unroll
      for (int j = 0; j < E; ++j) v[j] = FDiv(FSub(v[j], shift[j]), scale[j]);
      break;
    }
    default:
      break;
  }
  bool finite = true;
#pragma unroll
  for (int j = 0; j < E; ++j) finite = finite && IsFiniteF(v[j]);
  return finite;
}

template <int E>
KV_DEV void EmitCodes(const EncArgs& a, const uint32_t codes[E], int bits, uint8_t* code_base,
                      int t_run) {
  const int lane = threadIdx.x & 31;
  constexpr int D = 32 * E;
  if (a.direct) {
    PackRow<E>(codes, bits, code_base + static_cast<int64_t>(t_run) * (D / 8) * bits);
  } else {
    uint32_t w[(E + 3) / 4] = {};
#pragma unroll
    for (int j = 0; j < E; ++j) w[j / 4] |= codes[j] << (8 * (j & 3));
    uint8_t* p = code_base + static_cast<int64_t>(t_run) * D + lane * E;
    if constexpr (E == 1) {
      *p = static_cast<uint8_t>(w[0]);
    } else {
      StoreAligned<E>(p, w);
    }
  }
}

template <int E>
__global__ void __launch_bounds__(256) EncodeTilesKernel(EncArgs a, int64_t tile_begin) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const TileDesc tile = a.t.tiles[tile_begin + blockIdx.x];
  const RunDesc run = a.t.runs[tile.run];
  if (run.levels == 0) return;  // pruned: nothing to code
  const RecordDesc rec = a.t.records[run.record];
  const SegmentDesc seg = a.t.segments[run.segment];
  uint32_t* err = ErrorBlock(a);

  uint32_t signs = 0;
  if (a.c.transform == 2) {
    const uint64_t* words =
        a.t.sign_words + ((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + run.head) *
                             a.c.sign_words;
    signs = SignBitsOfLane<E>(words);
  }
  const float* affine = a.c.transform == 3
                            ? reinterpret_cast<const float*>(a.ws + a.L.affine + rec.affine_ws)
                            : nullptr;
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int ssz = f32 ? 4 : 2;
  uint8_t* scales = ParamsDst(a, rec) + run.params_rel;
  uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * ssz;
  uint8_t* code_base = a.direct ? a.frame + seg.static_coded_offset : a.ws + a.L.symbols + seg.sym_ws;
  const float lm1 = static_cast<float>(run.levels - 1);
  const float h = FMul(lm1, 0.5f);
  const int rows = tile.row_end - tile.row_begin;

  if (run.axis == 0) {
    // Token axis: groups of `gc` channels inside each row.
    const int gc = run.group;
    const int groups_per_row = D / gc;
    for (int r = warp; r < rows; r += kWarps) {
      const int t_run = tile.row_begin + r;
      float v[E];
      const bool finite = TransformedRow<E>(a, rec, run.head, run.begin + t_run, signs, affine, v);
      if (!__all_sync(0xffffffffu, finite)) {
        if (lane == 0) RecordError(err, kDevNonFinite, run.record, 0);
        return;
      }
      uint32_t codes[E];
      if (gc >= E) {
        float mn = v[0], mx = v[0];
#pragma unroll
        for (int j = 1; j < E; ++j) {
          mn = v[j] < mn ? v[j] : mn;
          mx = v[j] > mx ? v[j] : mx;
        }
        const int lanes_per_group = gc / E;
        for (int off = 1; off < lanes_per_group; off <<= 1) {
          const float omn = __shfl_xor_sync(0xffffffffu, mn, off);
          const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
          mn = omn < mn ? omn : mn;
          mx = omx > mx ? omx : mx;
        }
        float scale, zero;
        const uint32_t st = GridParamsFor(run.levels, sym, !f32, mn, mx, &scale, &zero);
        if (st != kDevOk) {
          RecordError(err, st, run.record, 1);
          scale = 0.0f;
          zero = 0.0f;
        }
        const int64_t gi = static_cast<int64_t>(t_run) * groups_per_row + (lane * E) / gc;
        if ((lane % lanes_per_group) == 0) {
          PutParam(scales + gi * ssz, scale, f32);
          if (!sym) PutParam(zeros + gi * ssz, zero, f32);
        }
        const float inv = InverseScale(scale);
#pragma unroll
        for (int j = 0; j < E; ++j) codes[j] = EncodeValue(v[j], zero, inv, h, lm1, sym);
      } else {
        // Several groups inside a lane.
        for (int g0 = 0; g0 < E; g0 += gc) {
          float mn = v[g0], mx = v[g0];
          for (int j = g0 + 1; j < g0 + gc; ++j) {
            mn = v[j] < mn ? v[j] : mn;
            mx = v[j] > mx ? v[j] : mx;
          }
          float scale, zero;
          const uint32_t st = GridParamsFor(run.levels, sym, !f32, mn, mx, &scale, &zero);
          if (st != kDevOk) {
            RecordError(err, st, run.record, 1);
            scale = 0.0f;
            zero = 0.0f;
          }
          const int64_t gi = static_cast<int64_t>(t_run) * groups_per_row + (lane * E + g0) / gc;
          PutParam(scales + gi * ssz, scale, f32);
          if (!sym) PutParam(zeros + gi * ssz, zero, f32);
          const float inv = InverseScale(scale);
          for (int j = g0; j < g0 + gc; ++j) codes[j] = EncodeValue(v[j], zero, inv, h, lm1, sym);
        }
      }
      EmitCodes<E>(a, codes, run.bits, code_base, t_run);
    }
    return;
  }

  // Channel axis: this tile is one token group; per-channel statistics over
  // its rows, then the codes.
  __shared__ float s_mn[kWarps][D], s_mx[kWarps][D];
  __shared__ float s_zero[D], s_inv[D];
  const bool in_registers = rows <= kTileRows;
  float held[kRowsPerWarp][E];
  float mn[E], mx[E];
#pragma unroll
  for (int j = 0; j < E; ++j) {
    mn[j] = __int_as_float(0x7f800000);
    mx[j] = __int_as_float(0xff800000);
  }
  bool finite = true;
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kWarps;
      if (r < rows) {
        finite = TransformedRow<E>(a, rec, run.head, run.begin + tile.row_begin + r, signs, affine,
                                   held[i]) && finite;
#pragma unroll
        for (int j = 0; j < E; ++j) {
          mn[j] = held[i][j] < mn[j] ? held[i][j] : mn[j];
          mx[j] = held[i][j] > mx[j] ? held[i][j] : mx[j];
        }
      }
    }
  } else {
    for (int r = warp; r < rows; r += kWarps) {
      float v[E];
      finite = TransformedRow<E>(a, rec, run.head, run.begin + tile.row_begin + r, signs, affine, v) &&
               finite;
#pragma unroll
      for (int j = 0; j < E; ++j) {
        mn[j] = v[j] < mn[j] ? v[j] : mn[j];
        mx[j] = v[j] > mx[j] ? v[j] : mx[j];
      }
    }
  }
  if (!finite) RecordError(err, kDevNonFinite, run.record, 0);
#pragma unroll
  for (int j = 0; j < E; ++j) {
    s_mn[warp][lane * E + j] = mn[j];
    s_mx[warp][lane * E + j] = mx[j];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float lo = s_mn[0][d], hi = s_mx[0][d];
    for (int w = 1; w < kWarps; ++w) {
      lo = s_mn[w][d] < lo ? s_mn[w][d] : lo;
      hi = s_mx[w][d] > hi ? s_mx[w][d] : hi;
    }
    float scale = 0.0f, zero = 0.0f;
    const uint32_t st = GridParamsFor(run.levels, sym, !f32, lo, hi, &scale, &zero);
    if (st != kDevOk) {
      RecordError(err, st, run.record, 2);
      scale = 0.0f;
      zero = 0.0f;
    }
    const int64_t gi = static_cast<int64_t>(tile.row_begin / run.group) * D + d;
    PutParam(scales + gi * ssz, scale, f32);
    if (!sym) PutParam(zeros + gi * ssz, zero, f32);
    s_zero[d] = zero;
    s_inv[d] = InverseScale(scale);
  }
  __syncthreads();
  float zero[E], inv[E];
#pragma unroll
  for (int j = 0; j < E; ++j) {
    zero[j] = s_zero[lane * E + j];
    inv[j] = s_inv[lane * E + j];
  }
  auto encode_row = [&](const float v[E], int r) {
    uint32_t codes[E];
#pragma unroll
    for (int j = 0; j < E; ++j) codes[j] = EncodeValue(v[j], zero[j], inv[j], h, lm1, sym);
    EmitCodes<E>(a, codes, run.bits, code_base, tile.row_begin + r);
  };
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kWarps;
      if (r < rows) encode_row(held[i], r);
    }
  } else {
    for (int r = warp; r < rows; r += kWarps) {
      float v[E];
      TransformedRow<E>(a, rec, run.head, run.begin + tile.row_begin + r, signs, affine, v);
      encode_row(v, r);
    }
  }
}

// Raw records: the source bytes of each row, [head][token][dim].
template <int E>
__global__ void __launch_bounds__(256) RawTilesKernel(EncArgs a, int64_t tile_begin) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const TileDesc tile = a.t.raw_tiles[tile_begin + blockIdx.x];
  const RecordDesc rec = a.t.records[tile.run];
  const SegmentDesc seg = a.t.segments[rec.first_segment];
  constexpr int D = 32 * E;
  const int es = a.src.elem_bytes;
  uint8_t* dst_base = a.direct ? a.frame + seg.static_coded_offset : a.ws + a.L.symbols + seg.sym_ws;
  for (int r = tile.row_begin + warp; r < tile.row_end; r += kWarps) {
    const int64_t base = RowElemOffset(a.src, rec.layer, rec.kind, tile.head, rec.token_begin + r);
    uint8_t* dst = dst_base + ((static_cast<int64_t>(tile.head) * rec.tokens + r) * D + lane * E) * es;
    if (a.src.vec_ok) {
      const uint8_t* p = a.src.data + (base + lane * E) * es;
      uint32_t w[E];
      const int bytes = E * es;
      if (es == 4) LoadAligned<4 * E>(p, w); else LoadAligned<2 * E>(p, w);
      if ((reinterpret_cast<uintptr_t>(dst) & (bytes - 1)) == 0) {
        if (es == 4) StoreAligned<4 * E>(dst, w); else StoreAligned<2 * E>(dst, w);
      } else {
        for (int i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i & 3)));
      }
    } else {
      for (int j = 0; j < E; ++j) {
        const uint8_t* p = a.src.data + (base + (static_cast<int64_t>(lane) * E + j) * a.src.dim) * es;
        for (int i = 0; i < es; ++i) dst[j * es + i] = p[i];
      }
    }
  }
}

// Affine: per (record, head, channel) shift and scale over the chunk.
__global__ void AffineStatsKernel(EncArgs a, int64_t record_begin) {
  const RecordDesc rec = a.t.records[record_begin + blockIdx.x];
  if (rec.type != 1) return;
  const int head = blockIdx.y, d = threadIdx.x, D = a.c.head_dim, H = a.c.kv_heads;
  const float inf = __int_as_float(0x7f800000);
  float mn = inf, mx = -inf;
  for (int t = 0; t < rec.tokens; ++t) {
    const int64_t e = RowElemOffset(a.src, rec.layer, rec.kind, head, rec.token_begin + t) + d * a.src.dim;
    const float x = LoadElem(a.src.data + e * a.src.elem_bytes, a.src.dtype);
    const bool finite = IsFiniteF(x);
    const float lo = finite ? x : inf, hi = finite ? x : -inf;
    mn = lo < mn ? lo : mn;
    mx = hi > mx ? hi : mx;
  }
  float shift = 0.0f, scale = 1.0f;
  if (!(mn > mx)) {
    const float half_max = FMul(0.5f, mx), half_min = FMul(0.5f, mn);
    shift = FAdd(half_max, half_min);
    if (shift == 0.0f) shift = 0.0f;
    scale = FSub(half_max, half_min);
    if (scale == 0.0f) scale = 1.0f;
  }
  float* affine = reinterpret_cast<float*>(a.ws + a.L.affine + rec.affine_ws);
  affine[head * D + d] = shift;
  affine[H * D + head * D + d] = scale;
  uint8_t* side = SideDst(a, rec);
  PutU32(side + 4 * (head * D + d), FloatBits(shift));
  PutU32(side + 4 * (H * D + head * D + d), FloatBits(scale));
}

KV_DEV int VarintBytes(uint32_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Warp argmax of freq[0..levels): the largest, lowest index on ties.
KV_DEV int WarpLargest(const uint32_t* freq, int levels) {
  const int lane = threadIdx.x & 31;
  uint32_t best_f = 0;
  int best_s = -1;
  for (int s = lane; s < levels; s += 32) {
    if (best_s < 0 || freq[s] > best_f) {
      best_f = freq[s];
      best_s = s;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const uint32_t of = __shfl_xor_sync(0xffffffffu, best_f, off);
    const int os = __shfl_xor_sync(0xffffffffu, best_s, off);
    if (os >= 0 && (best_s < 0 || of > best_f || (of == best_f && os < best_s))) {
      best_f = of;
      best_s = os;
    }
  }
  return best_s;
}

__global__ void __launch_bounds__(32 * kRansWarps) RansEncodeKernel(EncArgs a, int64_t seg_begin,
                                                                    int64_t seg_end) {
  __shared__ uint32_t s_hist[kRansWarps][256], s_freq[kRansWarps][256], s_cum[kRansWarps][256];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t si = seg_begin + static_cast<int64_t>(blockIdx.x) * kRansWarps + warp;
  if (si >= seg_end) return;
  const SegmentDesc seg = a.t.segments[si];
  const uint64_t count = seg.count;
  const int levels = seg.levels, b = seg.bits, n = a.c.table_bits;
  const uint32_t M = 1u << n;
  const uint8_t* sym = a.ws + a.L.symbols + seg.sym_ws;
  uint8_t* slot = a.ws + a.L.slots + seg.slot_ws;
  const uint64_t cap = 1 + seg.packed_bytes;
  uint32_t* hist = s_hist[warp];
  uint32_t* freq = s_freq[warp];
  uint32_t* cum = s_cum[warp];
  uint32_t* seg_len = reinterpret_cast<uint32_t*>(a.ws + a.L.seg_len);
  uint64_t* seg_off = reinterpret_cast<uint64_t*>(a.ws + a.L.seg_off);

  for (int i = lane; i < 256; i += 32) hist[i] = 0;
  __syncwarp();
  for (uint64_t base = 0; base < count; base += 128) {
    const uint64_t i = base + 4 * lane;
    uint32_t w4 = 0;
    int valid = 0;
    if (i + 4 <= count) {
      w4 = *reinterpret_cast<const uint32_t*>(sym + i);
      valid = 4;
    } else if (i < count) {
      valid = static_cast<int>(count - i);
      for (int k = 0; k < valid; ++k) w4 |= static_cast<uint32_t>(sym[i + k]) << (8 * k);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t sv = k < valid ? (w4 >> (8 * k)) & 255u : 256u + lane;
      const uint32_t peers = __match_any_sync(0xffffffffu, sv);
      if (sv < 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[sv], __popc(peers));
    }
  }
  __syncwarp();

  // NormalizeFrequencies (src/codecs/rans.cc), warp-parallel.
  uint32_t local = 0;
  for (int s = lane; s < levels; s += 32) {
    const uint64_t c = hist[s];
    uint32_t f = 0;
    if (c > 0) {
      const uint64_t q = (c * M + count / 2) / count;
      f = q > 1 ? static_cast<uint32_t>(q) : 1u;
    }
    freq[s] = f;
    local += f;
  }
  for (int off = 16; off > 0; off >>= 1) local += __shfl_xor_sync(0xffffffffu, local, off);
  uint32_t sum = local;
  __syncwarp();
  if (sum < M) {
    const int s = WarpLargest(freq, levels);
    if (lane == 0) freq[s] += M - sum;
    __syncwarp();
  } else {
    while (sum > M) {
      const int s = WarpLargest(freq, levels);
      const uint32_t f = freq[s];
      const uint32_t take = (sum - M) < (f - 1) ? (sum - M) : (f - 1);
      __syncwarp();
      if (lane == 0) freq[s] = f - take;
      __syncwarp();
      sum -= take;
      if (take == 0) break;
    }
  }
  if (lane == 0) {
    uint32_t c = 0;
    for (int s = 0; s < levels; ++s) {
      cum[s] = c;
      c += freq[s];
    }
  }
  __syncwarp();

  // Encode in reverse; lane l codes symbols k = 32 * step + l. The CPU
  // emits words for k descending, so within a step higher lanes go first;
  // the stream is the reverse of the emission order, so emission e lands at
  // slot[cap - 2 (e + 1)] and the stream ends at the slot's end.
  uint32_t x = 1u << 16;
  uint64_t words = 0;
  const int64_t steps = static_cast<int64_t>((count + 31) / 32);
  for (int64_t step = steps - 1; step >= 0; --step) {
    const uint64_t k = static_cast<uint64_t>(step) * 32 + lane;
    const bool active = k < count;
    const uint32_t sv = active ? sym[k] : 0u;
    const uint32_t f = freq[sv], cu = cum[sv];
    const bool emit = active && static_cast<uint64_t>(x) >= (static_cast<uint64_t>(f) << (32 - n));
    const uint32_t mask = __ballot_sync(0xffffffffu, emit);
    if (emit) {
      const uint64_t e = words + __popc(lane == 31 ? 0u : mask >> (lane + 1));
      const int64_t pos = static_cast<int64_t>(cap) - 2 * static_cast<int64_t>(e + 1);
      if (pos >= 0) {
        slot[pos] = static_cast<uint8_t>(x);
        slot[pos + 1] = static_cast<uint8_t>(x >> 8);
      }
      x >>= 16;
    }
    words += __popc(mask);
    if (active) x = ((x / f) << n) + (x % f) + cu;
  }
  const int K = count < 32 ? static_cast<int>(count) : 32;
  uint32_t vbytes = 0;
  for (int s = lane; s < levels; s += 32) vbytes += VarintBytes(freq[s]);
  for (int off = 16; off > 0; off >>= 1) vbytes += __shfl_xor_sync(0xffffffffu, vbytes, off);
  const uint64_t rans_size = 3 + vbytes + 4ull * K + 2 * words;
  __syncwarp();
  if (rans_size < cap) {
    const uint64_t start = cap - rans_size;
    uint8_t* p = slot + start;
    if (lane == 0) {
      p[0] = 0;
      p[1] = static_cast<uint8_t>(levels - 1);
      p[2] = static_cast<uint8_t>(n);
      uint8_t* q = p + 3;
      for (int s = 0; s < levels; ++s) {
        uint32_t v = freq[s];
        while (v >= 0x80) {
          *q++ = static_cast<uint8_t>(v | 0x80);
          v >>= 7;
        }
        *q++ = static_cast<uint8_t>(v);
      }
      seg_len[si] = static_cast<uint32_t>(rans_size);
      seg_off[si] = seg.slot_ws + start;
    }
    if (lane < K) PutU32(p + 3 + vbytes + 4 * lane, x);
  } else {
    if (lane == 0) {
      slot[0] = 1;
      seg_len[si] = static_cast<uint32_t>(cap);
      seg_off[si] = seg.slot_ws;
    }
    for (uint64_t B = lane; B < seg.packed_bytes; B += 32) {
      const uint64_t bit0 = 8 * B;
      const uint64_t i0 = bit0 / b;
      uint64_t i1 = (bit0 + 7) / b;
      if (i1 >= count) i1 = count - 1;
      uint32_t byte = 0;
      for (uint64_t i = i0; i <= i1; ++i) {
        const int64_t sh = static_cast<int64_t>(i * b) - static_cast<int64_t>(bit0);
        const uint32_t v = sym[i];
        byte |= sh >= 0 ? (v << sh) : (v >> (-sh));
      }
      slot[1 + B] = static_cast<uint8_t>(byte);
    }
  }
}

__global__ void __launch_bounds__(1024) ScanRecordsKernel(EncArgs a, int64_t rb, int64_t re) {
  using BlockScan = cub::BlockScan<uint64_t, 1024>;
  __shared__ typename BlockScan::TempStorage temp;
  const uint32_t* seg_len = reinterpret_cast<const uint32_t*>(a.ws + a.L.seg_len);
  uint64_t* rec_off = reinterpret_cast<uint64_t*>(a.ws + a.L.rec_off);
  uint64_t* running = RunningTotal(a.ws, a.L);
  const uint64_t base = *running;
  const int64_t n = re - rb;
  const int64_t per = (n + 1023) / 1024;
  const int64_t i0 = rb + threadIdx.x * per;
  const int64_t i1 = i0 + per < re ? i0 + per : re;
  auto size_of = [&](int64_t r) {
    const RecordDesc rec = a.t.records[r];
    uint64_t s = rec.static_bytes;
    for (int k = 0; k < rec.num_segments; ++k) s += seg_len[rec.first_segment + k];
    return s;
  };
  uint64_t local = 0;
  for (int64_t r = i0; r < i1; ++r) local += size_of(r);
  uint64_t prefix, total;
  BlockScan(temp).ExclusiveSum(local, prefix, total);
  uint64_t at = base + prefix;
  for (int64_t r = i0; r < i1; ++r) {
    rec_off[r] = at;
    at += size_of(r);
  }
  __syncthreads();
  if (threadIdx.x == 0) *running = base + total;
}

__global__ void __launch_bounds__(32 * kFinalizeWarps) FinalizeKernel(EncArgs a, int64_t rb, int64_t re) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = rb + static_cast<int64_t>(blockIdx.x) * kFinalizeWarps + warp;
  if (r >= re) return;
  const RecordDesc rec = a.t.records[r];
  const uint32_t* seg_len = reinterpret_cast<const uint32_t*>(a.ws + a.L.seg_len);
  const uint64_t* seg_off = reinterpret_cast<const uint64_t*>(a.ws + a.L.seg_off);
  const uint64_t off = a.direct ? rec.static_offset
                                : reinterpret_cast<const uint64_t*>(a.ws + a.L.rec_off)[r];
  uint8_t* p = a.frame + off;
  uint64_t coded_total = 0;
  for (int k = 0; k < rec.num_segments; ++k) {
    const int64_t s = rec.first_segment + k;
    coded_total += a.direct ? a.t.segments[s].packed_bytes : seg_len[s];
  }
  const uint64_t body = rec.static_bytes - 24 + coded_total;
  if (lane == 0) {
    p[0] = rec.type;
    p[1] = rec.kind;
    p[2] = 0;
    p[3] = 0;
    PutU32(p + 4, static_cast<uint32_t>(rec.layer));
    PutU32(p + 8, static_cast<uint32_t>(rec.token_begin));
    PutU32(p + 12, static_cast<uint32_t>(rec.tokens));
    PutU32(p + 16, static_cast<uint32_t>(body));
    if (rec.type == 1) {
      PutU32(p + 20, rec.side_bytes);
      PutU32(p + 24 + rec.side_bytes, rec.params_bytes);
      PutU16(p + 28 + rec.side_bytes + rec.params_bytes, rec.num_segments);
    }
  }
  if (!a.direct && rec.type == 1) {
    const uint8_t* staged = a.ws + a.L.params + rec.params_ws;
    for (uint32_t i = lane; i < rec.side_bytes; i += 32) p[24 + i] = staged[i];
    for (uint32_t i = lane; i < rec.params_bytes; i += 32)
      p[28 + rec.side_bytes + i] = staged[rec.side_bytes + i];
  }
  uint64_t prior = 0;
  for (int k = 0; k < rec.num_segments; ++k) {
    const int64_t s = rec.first_segment + k;
    const SegmentDesc seg = a.t.segments[s];
    const uint64_t len = a.direct ? seg.packed_bytes : seg_len[s];
    uint8_t* h = p + seg.hdr_rel + prior;
    if (lane == 0) {
      PutU16(h, static_cast<uint32_t>(seg.levels));
      PutU32(h + 2, static_cast<uint32_t>(seg.count));
      PutU32(h + 6, static_cast<uint32_t>(len));
    }
    if (!a.direct) {
      const uint8_t* src = a.ws + a.L.slots + seg_off[s];
      for (uint64_t i = lane; i < len; i += 32) h[10 + i] = src[i];
    }
    prior += len;
  }
  __syncwarp();
  __threadfence_block();
  const xxh3::Secret secret{kSecretBytes};
  const uint64_t hash = xxh3::WarpHash64(p, 20 + body, secret);
  if (lane == 0) PutU32(p + 20 + body, static_cast<uint32_t>(hash));
}

#ifndef KVSERVE_SIM  // host simulation of the kernels (tests of the kernel logic) stops here
__global__ void SetU64Kernel(uint64_t* dst, uint64_t value) { *dst = value; }
__global__ void CopyU64Kernel(uint64_t* dst, const uint64_t* src) { *dst = *src; }

EncArgs MakeArgs(const EncodeLaunch& e, const DeviceView& src) {
  EncArgs a;
  a.c = e.consts;
  a.t = e.tables;
  a.src = src;
  a.ws = e.workspace;
  a.frame = e.frame;
  a.L = *e.layout;
  a.direct = e.direct ? 1 : 0;
  return a;
}

unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

Status LaunchEncodeBegin(const EncodeLaunch& e, uint64_t header_bytes, CUstream_st* stream) {
  if (cudaMemsetAsync(e.workspace + e.layout->error, 0, 64, stream) != cudaSuccess)
    return LaunchStatus("encode: reset error block");
  SetU64Kernel<<<1, 1, 0, stream>>>(RunningTotal(e.workspace, *e.layout), header_bytes);
  return LaunchStatus("encode: begin");
}

Status LaunchEncodeFinish(const EncodeLaunch& e, uint64_t static_bytes, uint64_t* frame_bytes,
                          CUstream_st* stream) {
  if (frame_bytes == nullptr) return Status::Ok();
  if (e.static_sizes) {
    SetU64Kernel<<<1, 1, 0, stream>>>(frame_bytes, static_bytes);
  } else {
    CopyU64Kernel<<<1, 1, 0, stream>>>(frame_bytes, RunningTotal(e.workspace, *e.layout));
  }
  return LaunchStatus("encode: finish");
}

Status LaunchEncodeRange(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range,
                         CUstream_st* stream) {
  const EncArgs a = MakeArgs(e, src);
  const int64_t records = range.record_end - range.record_begin;
  const int64_t tiles = range.tile_end - range.tile_begin;
  const int64_t raw_tiles = range.raw_tile_end - range.raw_tile_begin;
  const int64_t segments = range.segment_end - range.segment_begin;
  if (records <= 0) return Status::Ok();
  if (a.c.transform == 3) {
    AffineStatsKernel<<<dim3(static_cast<unsigned>(records), a.c.kv_heads), a.c.head_dim, 0, stream>>>(
        a, range.record_begin);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: affine stats"));
  }
  KVSERVE_RETURN_IF_ERROR(KVSERVE_DISPATCH_HEAD_DIM(a.c.head_dim, E, [&] {
    if (tiles > 0)
      EncodeTilesKernel<E><<<static_cast<unsigned>(tiles), 256, 0, stream>>>(a, range.tile_begin);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: tiles"));
    if (raw_tiles > 0)
      RawTilesKernel<E><<<static_cast<unsigned>(raw_tiles), 256, 0, stream>>>(a, range.raw_tile_begin);
    return LaunchStatus("encode: raw tiles");
  }));
  if (!e.direct) {
    if (segments > 0)
      RansEncodeKernel<<<Blocks(segments, kRansWarps), 32 * kRansWarps, 0, stream>>>(
          a, range.segment_begin, range.segment_end);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: rans"));
    ScanRecordsKernel<<<1, 1024, 0, stream>>>(a, range.record_begin, range.record_end);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: scan"));
  }
  FinalizeKernel<<<Blocks(records, kFinalizeWarps), 32 * kFinalizeWarps, 0, stream>>>(
      a, range.record_begin, range.record_end);
  return LaunchStatus("encode: finalize");
}

#else
}  // namespace
#endif  // KVSERVE_SIM

}  // namespace kvserve::cuda
