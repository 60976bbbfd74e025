// Copyright kvserve authors. Encode kernels and their launchers.
//
// Per plan range (one layer, or the whole frame), stream-ordered:
//   0. BeginKernel         (Begin) error block reset, frame header, running
//                          total, rans symbol counts zeroed
//   1. AffineStatsKernel   (affine only) block per (record, head): per-channel
//                          shift/scale -> side bytes + f32 copy for step 2
//   2. RawSpansKernel      block per 32 KiB span of a raw record. pack: the record's
//                          bytes (headers + source bytes) staged per 1 KiB
//                          window in shared memory (cp.async, four windows a
//                          warp in flight), written to the frame with aligned
//                          stores, and each window's XXH3 block terms to the
//                          workspace; rans: source bytes -> workspace
//   3. TilesKernel         persistent blocks, each a pipeline over its tiles'
//                          row blocks: the next row block's source rows are
//                          copied into shared memory (cp.async) while this
//                          one is transformed, its grid params computed and
//                          quantised; pack: codes and params staged in shared
//                          memory and written to the frame with aligned
//                          stores (one pass over the KV); rans: u8 symbols,
//                          symbol counts and params to the workspace
//   4. (rans) RansEncode -> ScanRecords -> Finalize (rans_encode.cu, here)
//   5. RecordHashKernel    block per record: (pack) coded record and segment
//                          headers, then the XXH3 checksum (record_hash.cuh)
// No host synchronisation anywhere; sizes stay on the device.
#include <cub/block/block_scan.cuh>

#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/grid.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_args.cuh"
#include "cuda/raw_window.cuh"
#include "cuda/record_hash.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kThreads = 32 * kBlockWarps;
constexpr int kParamStage = 2048;         // bytes of scales (and of zeros) staged per row block
constexpr int kCodeStage = 4096 + 16;     // codes of one row block: 512 * bits bytes at most
constexpr int kRowStage = 16384;          // source rows of one row block: 4096 elements, f32 at most
constexpr int kWindowSmem = 1088;         // a raw window: 18 + 1024 + 16 bytes, rounded up
constexpr int kWarpWindows = kSpanWindows / kBlockWarps;  // raw windows a warp has in flight
constexpr int kTileBlocksPerSm = 3;       // persistent tile blocks per multiprocessor

template <int D>
struct TileSmem {
  uint32_t stage[2][kRowStage / 4];       // source rows of this and the next row block
  uint32_t codes[kCodeStage / 4];
  uint32_t scales[(kParamStage + 16) / 4];
  uint32_t zeros[(kParamStage + 16) / 4];
  float rows[RowGeo<D>::kRowsPerBlock * D];  // transformed rows (channel statistics)
  float mn[D], mx[D];
  float zero[D], inv[D];
  uint32_t hist[256];  // SymbolCounter
};
struct RawSmem {
  uint32_t win[kBlockWarps][kWarpWindows][kWindowSmem / 4];
};


KV_DEV uint8_t* SideDst(const EncArgs& a, const RecordDesc& rec) {
  return a.direct ? a.frame + rec.static_offset + 24 : a.ws + a.L.params + rec.params_ws;
}
KV_DEV uint8_t* ParamsDst(const EncArgs& a, const RecordDesc& rec) {
  return a.direct ? a.frame + rec.static_offset + 28 + rec.side_bytes
                  : a.ws + a.L.params + rec.params_ws + rec.side_bytes;
}

// Writes scale/zero `v` as the index-th parameter of a staging buffer.
KV_DEV void StageParam(uint32_t* stage, int index, float v, bool f32) {
  if (f32) {
    stage[index] = FloatBits(v);
  } else {
    reinterpret_cast<uint16_t*>(stage)[index] = FloatToHalfBits(v);
  }
}

// The rows of one head of a coded record, loaded and forward-transformed.
// kIdentity: the profile's transform is identity (compiled without the
// other transforms, which keeps the presets' kernels lean).
template <int D, bool kIdentity>
struct RowSource {
  const EncArgs& a;
  RecordDesc rec;
  int head;
  uint32_t signs = 0;
  const float* affine = nullptr;

  KV_DEV RowSource(const EncArgs& args, const RecordDesc& r, int h) : a(args), rec(r), head(h) {
    if (a.c.transform == 2) {
      const uint64_t* words =
          a.t.sign_words + ((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + head) * a.c.sign_words;
      signs = SignBitsOfLane<D>(words);
    }
    if (a.c.transform == 3) affine = reinterpret_cast<const float*>(a.ws + a.L.affine + rec.affine_ws);
  }

  // Row t_rel (chunk-relative) into v, from `staged` (the row's source bytes
  // in shared memory) or else from the view; false in lanes holding a
  // non-finite value. Every lane of the warp must call it (the hadamard is
  // warp-wide).
  KV_DEV bool Load(int t_rel, const uint32_t* staged, float v[kLaneElems]) const {
    if (staged != nullptr) {
      LoadStagedRow<D>(staged, a.src.dtype, v);
    } else {
      LoadRow<D>(a.src, rec.layer, rec.kind, head, rec.token_begin + t_rel, v);
    }
    switch (kIdentity ? 0 : a.c.transform) {
      case 1: {  // delta
        const int anchor_every = a.c.anchor == 0 ? rec.tokens : a.c.anchor;
        const int anchor = t_rel - t_rel % anchor_every;
        if (anchor != t_rel) {
          float base[kLaneElems];
          LoadRow<D>(a.src, rec.layer, rec.kind, head, rec.token_begin + anchor, base);
#pragma unroll
          for (int j = 0; j < kLaneElems; ++j) v[j] = FSub(v[j], base[j]);
        }
        break;
      }
      case 2:  // hadamard
        FlipSigns(v, signs);
        RowFwht<D>(v);
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) v[j] = FMul(v[j], a.c.hadamard_scale);
        break;
      case 3: {  // affine
        const float* shift = affine + head * D + kLaneElems * RowGeo<D>::Part();
        const float* scale = shift + a.c.kv_heads * D;
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) v[j] = FDiv(FSub(v[j], shift[j]), scale[j]);
        break;
      }
      default:
        break;
    }
    bool finite = true;
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) finite = finite && IsFiniteF(v[j]);
    return finite;
  }
};

// Symbol counts of a tile (rans): small alphabets (bits <= 4) are counted
// from the packed lane word with popcounts and warp reductions into a
// per-warp shared-memory histogram; larger ones with shared-memory atomics
// into one block histogram. Flush adds the tile's counts to the segment's
// histogram in the workspace.
struct SymbolCounter {
  int bits, levels;
  uint32_t* hist;  // [kBlockWarps][16] for bits <= 4, else [256]

  KV_DEV void Zero() {
    const int n = bits <= 4 ? kBlockWarps * 16 : 256;
    for (int v = threadIdx.x; v < n; v += blockDim.x) hist[v] = 0;
  }
  // Every lane of the warp calls it; `active` lanes count their codes.
  KV_DEV void Add(const uint32_t codes[kLaneElems], bool active) {
    if (bits > 4) {
      if (active)
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) atomicAdd(&hist[codes[j]], 1u);
      return;
    }
    uint64_t x = 0, lsb = 0;
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      x |= static_cast<uint64_t>(codes[j]) << (j * bits);
      lsb |= uint64_t{1} << (j * bits);
    }
    // A field equals v iff all its bits of ~(x ^ v * lsb) are set.
    uint32_t* mine = hist + 16 * (threadIdx.x >> 5);
    for (int v = 0; v < levels; ++v) {
      const uint64_t m = ~(x ^ (lsb * static_cast<uint64_t>(v)));
      uint64_t all = m;
      for (int k = 1; k < bits; ++k) all &= m >> k;
      const uint32_t c = __reduce_add_sync(0xffffffffu, active ? static_cast<uint32_t>(__popcll(all & lsb)) : 0u);
      if ((threadIdx.x & 31) == 0) mine[v] += c;
    }
  }
  // Every thread of the block calls it.
  KV_DEV void Flush(uint32_t* seg_hist) {
    __syncthreads();
    for (int v = threadIdx.x; v < levels; v += blockDim.x) {
      uint32_t c = 0;
      if (bits > 4) {
        c = hist[v];
      } else {
        for (int w = 0; w < kBlockWarps; ++w) c += hist[16 * w + v];
      }
      if (c != 0) atomicAdd(&seg_hist[v], c);
    }
  }
};

// The grid search as a call (not inlined): the small-group path runs it up
// to 16 times per row, and 16 inlined copies cost more in instruction-cache
// misses than the calls do.
__device__ __noinline__ uint32_t GridParamsCall(int levels, bool symmetric, bool f16, float mn, float mx,
                                                float* scale, float* zero) {
  return GridParamsFor(levels, symmetric, f16, mn, mx, scale, zero);
}

// Token-axis groups smaller than a lane's 16 channels: GC channels each.
// put(g, scale, zero) stores the lane's g-th group's parameters.
template <int GC, typename Put>
KV_DEV uint32_t EncodeSmallGroups(const float v[kLaneElems], int levels, bool sym, bool f32, float h, float lm1,
                                  uint32_t codes[kLaneElems], Put put) {
  uint32_t st = kDevOk;
#pragma unroll
  for (int g = 0; g < kLaneElems / GC; ++g) {
    float mn = v[g * GC], mx = v[g * GC];
#pragma unroll
    for (int j = g * GC + 1; j < (g + 1) * GC; ++j) {
      mn = v[j] < mn ? v[j] : mn;
      mx = v[j] > mx ? v[j] : mx;
    }
    float scale, zero;
    const uint32_t s = GridParamsCall(levels, sym, !f32, mn, mx, &scale, &zero);
    if (s != kDevOk) {
      st = s;
      scale = 0.0f;
      zero = 0.0f;
    }
    put(g, scale, zero);
    const float inv = InverseScale(scale);
#pragma unroll
    for (int j = g * GC; j < (g + 1) * GC; ++j) codes[j] = EncodeValue(v[j], zero, inv, h, lm1, sym);
  }
  return st;
}

// The jobs of tile `ti`: one per row block of a token-axis tile; a
// channel-axis tile (one token group) is one job; a pruned tile none.
// Row blocks a token-axis job covers: as many as one stage holds.
template <int D>
KV_DEV int BlocksPerJob(const EncArgs& a) {
  const int n = kRowStage / (RowGeo<D>::kRowsPerBlock * D * a.src.elem_bytes);
  return n > 0 ? n : 1;
}

template <int D>
KV_DEV int TileJobs(const EncArgs& a, int64_t ti) {
  const TileDesc tile = a.t.tiles[ti];
  const RunDesc run = a.t.runs[tile.run];
  if (run.levels == 0) return 0;
  if (run.axis != 0) return 1;
  constexpr int RPB = RowGeo<D>::kRowsPerBlock;
  const int rows_per_job = RPB * BlocksPerJob<D>(a);
  return (tile.row_end - tile.row_begin + rows_per_job - 1) / rows_per_job;
}

// Whether job (ti, it) reads its rows from shared memory: the view allows
// 16-byte copies, and the tile's statistics need its rows only once (every
// token-axis job; a channel-axis tile of one row block).
template <int D>
KV_DEV bool JobIsStaged(const EncArgs& a, const TileDesc& tile, const RunDesc& run) {
  constexpr int RPB = RowGeo<D>::kRowsPerBlock;
  return a.src.vec16 && (run.axis == 0 || tile.row_end - tile.row_begin <= RPB);
}

// Issues the async copies of job (ti, it)'s source rows into `stage`.
template <int D>
KV_DEV void PrefetchJob(const EncArgs& a, int64_t ti, int it, uint32_t* stage) {
  constexpr int RPB = RowGeo<D>::kRowsPerBlock;
  const TileDesc tile = a.t.tiles[ti];
  const RunDesc run = a.t.runs[tile.run];
  if (!JobIsStaged<D>(a, tile, run)) return;
  const RecordDesc rec = a.t.records[run.record];
  const int span = run.axis == 0 ? RPB * BlocksPerJob<D>(a) : RPB;
  const int r0 = it * span;
  const int rows = tile.row_end - tile.row_begin - r0 < span ? tile.row_end - tile.row_begin - r0 : span;
  const int row_bytes = D * a.src.elem_bytes;
  const int chunks_per_row = row_bytes / 16;
  const int first = rec.token_begin + run.begin + tile.row_begin + r0;
  for (int c = threadIdx.x; c < rows * chunks_per_row; c += kThreads) {
    const int r = c / chunks_per_row, k = c % chunks_per_row;
    const uint8_t* src =
        a.src.data + RowElemOffset(a.src, rec.layer, rec.kind, run.head, first + r) * a.src.elem_bytes + 16 * k;
    CpAsync16(stage + (r * row_bytes + 16 * k) / 4, src);
  }
}

// One job: job `it` of tile `ti` (token axis: BlocksPerJob row blocks from
// row block it * BlocksPerJob), its source rows in `stage` when JobIsStaged
// (a channel-axis tile of several row blocks reads its rows from the view
// twice: statistics, then codes).
template <int D, bool kIdentity>
KV_DEV void EncodeJob(const EncArgs& a, int64_t ti, int it, const uint32_t* stage, TileSmem<D>& sm) {
  using G = RowGeo<D>;
  constexpr int RPB = G::kRowsPerBlock;
  const int warp = threadIdx.x >> 5;
  const int sub = G::Sub(), part = G::Part();
  const TileDesc tile = a.t.tiles[ti];
  const RunDesc run = a.t.runs[tile.run];
  const RecordDesc rec = a.t.records[run.record];
  const SegmentDesc seg = a.t.segments[run.segment];
  uint32_t* err = ErrorBlock(a.ws, a.L);
  const RowSource<D, kIdentity> src(a, rec, run.head);
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int ssz = f32 ? 4 : 2;
  uint8_t* scales = ParamsDst(a, rec) + run.params_rel;
  uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * ssz;
  const int b = run.bits;
  const int row_bytes = D * b / 8;
  const int stage_row_words = D * a.src.elem_bytes / 4;
  uint8_t* code_dst = a.frame + seg.static_coded_offset;  // direct only
  uint8_t* sym_dst = a.ws + a.L.symbols + seg.sym_ws;     // staged only
  const float lm1 = static_cast<float>(run.levels - 1);
  const float h = FMul(lm1, 0.5f);
  const int rows = tile.row_end - tile.row_begin;
  const int iters = (rows + RPB - 1) / RPB;
  const int r_local = warp * G::kRowsPerWarp + sub;  // row within a row block
  const bool count_symbols = !a.direct;
  SymbolCounter counter{b, run.levels, sm.hist};
  if (count_symbols) {
    counter.Zero();
    __syncthreads();
  }
  // Row r (tile-relative) of row block `block`, transformed. Lanes past the
  // tile's rows load the block's first row (every lane must take part).
  // `stage_first`: the first row block in the stage.
  int stage_first = 0;
  auto load = [&](int block, int r, float v[kLaneElems]) {
    const int rr = r < rows ? r : block * RPB;
    const uint32_t* staged = stage != nullptr ? stage + (rr - stage_first * RPB) * stage_row_words : nullptr;
    return src.Load(run.begin + tile.row_begin + rr, staged, v);
  };
  // Every lane of the warp calls it (the symbol count is warp-wide).
  auto emit = [&](const uint32_t codes[kLaneElems], int r, bool active) {
    if (a.direct) {
      if (active) PackLane(codes, b, reinterpret_cast<uint8_t*>(sm.codes) + r_local * row_bytes + part * 2 * b);
    } else {
      if (active) {
        uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) w[j / 4] |= codes[j] << (8 * (j & 3));
        *reinterpret_cast<uint4*>(sym_dst + static_cast<int64_t>(tile.row_begin + r) * D + kLaneElems * part) =
            make_uint4(w[0], w[1], w[2], w[3]);
      }
      counter.Add(codes, active);
    }
  };
  // After a row block's emits and a barrier: the block's codes to the frame.
  auto flush_codes = [&](int block) {
    if (!a.direct) return;
    const int r0 = block * RPB;
    const int n = (rows - r0 < RPB ? rows - r0 : RPB) * row_bytes;
    StoreFromSmem(code_dst + static_cast<int64_t>(tile.row_begin + r0) * row_bytes, sm.codes, 0, n, threadIdx.x,
                  kThreads);
  };

  if (run.axis == 0) {
    // Token axis: groups of gc channels inside each row; this job is row
    // blocks [it * BlocksPerJob, ...) of the tile.
    const int gc = run.group;
    const int gpr = D / gc;
    const bool stage_params = RPB * gpr * ssz <= kParamStage;
    const int per_job = BlocksPerJob<D>(a);
    stage_first = it * per_job;
    for (int blk = stage_first; blk < stage_first + per_job && blk < iters; ++blk) {
    const int r = blk * RPB + r_local;
    const bool active = r < rows;
    float v[kLaneElems];
    const bool finite = load(blk, r, v);
    if (active && !finite) RecordError(err, kDevNonFinite, run.record, 0);
    uint32_t codes[kLaneElems];
    const int64_t row_group0 = static_cast<int64_t>(tile.row_begin + r) * gpr;  // first group of the row
    auto put = [&](int g_in_row, float scale, float zero) {
      if (!active) return;
      if (stage_params) {
        const int idx = r_local * gpr + g_in_row;
        StageParam(sm.scales, idx, scale, f32);
        if (!sym) StageParam(sm.zeros, idx, zero, f32);
      } else {
        PutParam(scales + (row_group0 + g_in_row) * ssz, scale, f32);
        if (!sym) PutParam(zeros + (row_group0 + g_in_row) * ssz, zero, f32);
      }
    };
    if (gc >= kLaneElems) {
      const int lanes_per_group = gc / kLaneElems;
      float mn = v[0], mx = v[0];
#pragma unroll
      for (int j = 1; j < kLaneElems; ++j) {
        mn = v[j] < mn ? v[j] : mn;
        mx = v[j] > mx ? v[j] : mx;
      }
      for (int off = 1; off < lanes_per_group; off <<= 1) {
        const float omn = __shfl_xor_sync(0xffffffffu, mn, off);
        const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
        mn = omn < mn ? omn : mn;
        mx = omx > mx ? omx : mx;
      }
      float scale, zero;
      const uint32_t st = GridParamsFor(run.levels, sym, !f32, mn, mx, &scale, &zero);
      if (st != kDevOk) {
        if (active) RecordError(err, st, run.record, 1);
        scale = 0.0f;
        zero = 0.0f;
      }
      if (part % lanes_per_group == 0) put(part / lanes_per_group, scale, zero);
      const float inv = InverseScale(scale);
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) codes[j] = EncodeValue(v[j], zero, inv, h, lm1, sym);
    } else {
      const int per_lane = kLaneElems / gc;
      auto lane_put = [&](int g, float scale, float zero) { put(part * per_lane + g, scale, zero); };
      uint32_t st;
      switch (gc) {
        case 1: st = EncodeSmallGroups<1>(v, run.levels, sym, f32, h, lm1, codes, lane_put); break;
        case 2: st = EncodeSmallGroups<2>(v, run.levels, sym, f32, h, lm1, codes, lane_put); break;
        case 4: st = EncodeSmallGroups<4>(v, run.levels, sym, f32, h, lm1, codes, lane_put); break;
        default: st = EncodeSmallGroups<8>(v, run.levels, sym, f32, h, lm1, codes, lane_put); break;
      }
      if (st != kDevOk && active) RecordError(err, st, run.record, 1);
    }
    emit(codes, r, active);
    __syncthreads();
    flush_codes(blk);
    if (stage_params) {
      const int r0 = blk * RPB;
      const int groups = (rows - r0 < RPB ? rows - r0 : RPB) * gpr;
      const int64_t g0 = static_cast<int64_t>(tile.row_begin + r0) * gpr;
      StoreFromSmem(scales + g0 * ssz, sm.scales, 0, groups * ssz, threadIdx.x, kThreads);
      if (!sym) StoreFromSmem(zeros + g0 * ssz, sm.zeros, 0, groups * ssz, threadIdx.x, kThreads);
    }
    __syncthreads();  // the staging buffers are reused by the next row block
    }
    if (count_symbols) counter.Flush(SegHist(a.ws, a.L, seg));
    return;
  }

  // Channel axis: this tile is one token group; per-channel statistics over
  // its rows, then the codes. Rows go through shared memory for the
  // statistics (a row block at a time, folded by one thread per channel),
  // which keeps the per-lane state at one row.
  const float inf = __int_as_float(0x7f800000);
  for (int d = threadIdx.x; d < D; d += kThreads) {
    sm.mn[d] = inf;
    sm.mx[d] = -inf;
  }
  float held[kLaneElems];
  bool finite = true;
  for (int blk = 0; blk < iters; ++blk) {
    const int r = blk * RPB + r_local;
    const bool active = r < rows;
    float v[kLaneElems];
    const bool ok = load(blk, r, v);
    finite = finite && (ok || !active);
    float* dst = sm.rows + r_local * D + kLaneElems * part;
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      dst[j] = active ? v[j] : inf;
      held[j] = v[j];  // kept when the tile is one row block
    }
    __syncthreads();
    const int block_rows = rows - blk * RPB < RPB ? rows - blk * RPB : RPB;
    for (int d = threadIdx.x; d < D; d += kThreads) {
      float lo = sm.mn[d], hi = sm.mx[d];
      for (int k = 0; k < block_rows; ++k) {
        const float x = sm.rows[k * D + d];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
      }
      sm.mn[d] = lo;
      sm.mx[d] = hi;
    }
    __syncthreads();
  }
  if (!finite) RecordError(err, kDevNonFinite, run.record, 0);
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float scale = 0.0f, zero = 0.0f;
    const uint32_t st = GridParamsFor(run.levels, sym, !f32, sm.mn[d], sm.mx[d], &scale, &zero);
    if (st != kDevOk) {
      RecordError(err, st, run.record, 2);
      scale = 0.0f;
      zero = 0.0f;
    }
    StageParam(sm.scales, d, scale, f32);
    if (!sym) StageParam(sm.zeros, d, zero, f32);
    sm.zero[d] = zero;
    sm.inv[d] = InverseScale(scale);
  }
  __syncthreads();
  {
    const int64_t g0 = static_cast<int64_t>(tile.row_begin / run.group) * D;
    StoreFromSmem(scales + g0 * ssz, sm.scales, 0, D * ssz, threadIdx.x, kThreads);
    if (!sym) StoreFromSmem(zeros + g0 * ssz, sm.zeros, 0, D * ssz, threadIdx.x, kThreads);
  }
  // The channels' zero points and inverse scales stay in shared memory.
  const float* zero = sm.zero + kLaneElems * part;
  const float* inv = sm.inv + kLaneElems * part;
  auto encode_block = [&](int blk, const float v[kLaneElems]) {
    const int r = blk * RPB + r_local;
    uint32_t codes[kLaneElems];
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) codes[j] = EncodeValue(v[j], zero[j], inv[j], h, lm1, sym);
    emit(codes, r, r < rows);
    __syncthreads();
    flush_codes(blk);
    __syncthreads();  // the codes buffer is reused by the next row block
  };
  if (iters == 1) {
    encode_block(0, held);
  } else {
    for (int blk = 0; blk < iters; ++blk) {
      float v[kLaneElems];
      load(blk, blk * RPB + r_local, v);
      encode_block(blk, v);
    }
  }
  if (count_symbols) counter.Flush(SegHist(a.ws, a.L, seg));
}

// A persistent block's tiles first, first + stride, ... < end, as a
// pipeline of jobs: while job k runs on stage k & 1, job k + 1's rows are
// copied into the other stage.
template <int D, bool kIdentity>
KV_DEV void EncodeTiles(const EncArgs& a, int64_t first, int64_t end, int64_t stride, TileSmem<D>& sm) {
  int64_t ti = first;
  while (ti < end && TileJobs<D>(a, ti) == 0) ti += stride;
  int it = 0;
  if (ti < end) PrefetchJob<D>(a, ti, it, sm.stage[0]);
  CpAsyncCommit();
  for (int k = 0; ti < end; ++k) {
    int64_t next_ti = ti;
    int next_it = it + 1;
    if (next_it >= TileJobs<D>(a, ti)) {
      next_it = 0;
      next_ti = ti + stride;
      while (next_ti < end && TileJobs<D>(a, next_ti) == 0) next_ti += stride;
    }
    if (next_ti < end) PrefetchJob<D>(a, next_ti, next_it, sm.stage[(k + 1) & 1]);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const TileDesc tile = a.t.tiles[ti];
    const bool staged = JobIsStaged<D>(a, tile, a.t.runs[tile.run]);
    EncodeJob<D, kIdentity>(a, ti, it, staged ? sm.stage[k & 1] : nullptr, sm);
    __syncthreads();
    ti = next_ti;
    it = next_it;
  }
  CpAsyncWait<0>();
}

// A raw record's span: pack frames get the record's bytes (written through
// a 1 KiB shared-memory window per warp and kWarpWindows windows in flight,
// plus each window's XXH3 block terms); rans frames get the data bytes in
// the workspace (and their byte counts).
template <int D>
KV_DEV void EncodeRawSpan(const EncArgs& a, const RawSpan& span, RawSmem& sm, uint32_t* hist_smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const RecordDesc rec = a.t.records[span.record];
  const SegmentDesc seg = a.t.segments[rec.first_segment];
  const uint64_t count = seg.count;
  const int w_end = span.first_window + span.windows;
  if (!a.direct) {
    uint8_t* dst = a.ws + a.L.symbols + seg.sym_ws;
    for (int v = threadIdx.x; v < 256; v += blockDim.x) hist_smem[v] = 0;
    __syncthreads();
    for (int w = span.first_window + warp; w < w_end; w += kBlockWarps)
      for (int c = lane; c < kWindowBytes / 16; c += 32) {
        const uint64_t d = static_cast<uint64_t>(w) * kWindowBytes + 16 * c;
        if (d >= count) break;
        uint32_t x[4];
        LoadRawChunk(a.src, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, d, x);
        *reinterpret_cast<uint4*>(dst + d) = make_uint4(x[0], x[1], x[2], x[3]);
#pragma unroll
        for (int k = 0; k < 16; ++k) atomicAdd(&hist_smem[(x[k >> 2] >> (8 * (k & 3))) & 0xFFu], 1u);
      }
    __syncthreads();
    uint32_t* seg_hist = SegHist(a.ws, a.L, seg);
    for (int v = threadIdx.x; v < 256; v += blockDim.x)
      if (hist_smem[v] != 0) atomicAdd(&seg_hist[v], hist_smem[v]);
    return;
  }
  const uint64_t p = rec.static_offset;
  const uint64_t len = 30 + count;  // hashed bytes: everything before the checksum
  const uint64_t nb = (len - 1) / 1024;
  uint64_t* sums = reinterpret_cast<uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws);
  // Record byte o of window w sits at byte o - 1024 w + 18 of its buffer, so
  // that the 16-byte data chunks (data offset d, record offset d + 30) land
  // aligned: chunk c (d = 1024 w - 32 + 16 c) at byte 16 (c + 1).
#pragma unroll
  for (int k = 0; k < kWarpWindows; ++k) {
    const int w = span.first_window + warp + kBlockWarps * k;
    if (w >= w_end) break;
    uint32_t* win = sm.win[warp][k];
    const int64_t o0 = static_cast<int64_t>(w) * kWindowBytes;
    for (int c = lane; c <= 64; c += 32) {
      const int64_t d = o0 - 32 + 16 * c;
      if (d < 0 || static_cast<uint64_t>(d) >= count) continue;
      if (a.src.vec16) {
        const int64_t e = RawChunkElem(a.src, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, d);
        CpAsync16(win + 4 * (c + 1), a.src.data + e * a.src.elem_bytes);
      } else {
        uint32_t x[4];
        LoadRawChunk(a.src, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, static_cast<uint64_t>(d), x);
        *reinterpret_cast<uint4*>(win + 4 * (c + 1)) = make_uint4(x[0], x[1], x[2], x[3]);
      }
    }
    if (w == 0 && lane < 30)
      reinterpret_cast<uint8_t*>(win)[18 + lane] = static_cast<uint8_t>(RawHeaderByte(rec, count, lane));
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kWarpWindows; ++k) {
    const int w = span.first_window + warp + kBlockWarps * k;
    if (w >= w_end) break;
    const uint32_t* win = sm.win[warp][k];
    const uint64_t o0 = static_cast<uint64_t>(w) * kWindowBytes;
    if (static_cast<uint64_t>(w) < nb) {
      StoreStagedBlockTerms(win, 18, sums + 8 * w);
    }
    const uint64_t left = len - o0;
    const uint32_t n = left < kWindowBytes ? static_cast<uint32_t>(left) : kWindowBytes;
    StoreFromSmem(a.frame + p + o0, win, 18, n, lane, 32);
  }
}

// Blocks per SM the produce kernels are compiled for (register budget:
// 65536 / (256 * blocks) per thread).
#ifndef KVSERVE_CUDA_PRODUCE_MIN_BLOCKS
#define KVSERVE_CUDA_PRODUCE_MIN_BLOCKS 3
#endif

// One raw span per block. Light on registers and shared memory, so many
// blocks per SM keep many windows in flight.
template <int D>
__global__ void __launch_bounds__(kThreads, 6) RawSpansKernel(EncArgs a, int64_t span_begin) {
  KV_DYNAMIC_SMEM(smem);
  __shared__ uint32_t hist[256];
  EncodeRawSpan<D>(a, a.t.raw_spans[span_begin + blockIdx.x], *reinterpret_cast<RawSmem*>(smem), hist);
}

// Pack frames from vec16 views: one raw span per block, its windows moved in
// registers (raw_window.cuh), two per warp in flight; no shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 4) RawWindowsKernel(EncArgs a, int64_t span_begin) {
  const RawSpan span = a.t.raw_spans[span_begin + blockIdx.x];
  const RecordDesc rec = a.t.records[span.record];
  const uint64_t count = a.t.segments[rec.first_segment].count;
  uint64_t* sums = reinterpret_cast<uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws);
  const int end = span.first_window + span.windows;
  for (int f = span.first_window; f < end; f += 2 * kBlockWarps)
    EncodeRawWindows<D, 2, kBlockWarps>(a.src, rec, count, a.frame + rec.static_offset, sums, f, end);
}

// Persistent tile blocks, tile_stride of them, taking the tiles
// [tile_begin, tile_end) in turn.
template <int D, bool kIdentity>
__global__ void __launch_bounds__(kThreads, KVSERVE_CUDA_PRODUCE_MIN_BLOCKS)
    TilesKernel(EncArgs a, int64_t tile_begin, int64_t tile_end, int64_t tile_stride) {
  KV_DYNAMIC_SMEM(smem);
  EncodeTiles<D, kIdentity>(a, tile_begin + blockIdx.x, tile_end, tile_stride, *reinterpret_cast<TileSmem<D>*>(smem));
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

__global__ void __launch_bounds__(1024) ScanRecordsKernel(EncArgs a, int64_t rb, int64_t re) {
  using BlockScan = cub::BlockScan<uint64_t, 1024>;
  __shared__ typename BlockScan::TempStorage temp;
  const uint32_t* seg_len = SegLen(a.ws, a.L);
  uint64_t* rec_off = RecOff(a.ws, a.L);
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

// Bytes of a record's body: its static part plus every segment's coded bytes.
KV_DEV uint64_t CodedTotal(const EncArgs& a, const RecordDesc& rec) {
  uint64_t total = 0;
  const uint32_t* seg_len = SegLen(a.ws, a.L);
  for (int k = 0; k < rec.num_segments; ++k) {
    const int64_t s = rec.first_segment + k;
    total += a.direct ? a.t.segments[s].packed_bytes : seg_len[s];
  }
  return total;
}

KV_DEV void WriteRecordHeader(uint8_t* p, const RecordDesc& rec, uint64_t body) {
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
KV_DEV void WriteSegmentHeader(uint8_t* h, const SegmentDesc& seg, uint64_t len) {
  PutU16(h, static_cast<uint32_t>(seg.levels));
  PutU32(h + 2, static_cast<uint32_t>(seg.count));
  PutU32(h + 6, static_cast<uint32_t>(len));
}

// rans frames: the record's headers, staged side/params and codec slots,
// copied into the frame at the scanned offsets (block per record).
__global__ void __launch_bounds__(kThreads) FinalizeKernel(EncArgs a, int64_t rb) {
  const int64_t r = rb + blockIdx.x;
  const RecordDesc rec = a.t.records[r];
  const uint64_t* seg_off = SegOff(a.ws, a.L);
  const uint32_t* seg_len = SegLen(a.ws, a.L);
  uint8_t* p = a.frame + RecOff(a.ws, a.L)[r];
  const uint8_t* ws_lo = a.ws;
  const uint8_t* ws_hi = a.ws + a.L.total;
  const uint64_t body = rec.static_bytes - 24 + CodedTotal(a, rec);
  if (threadIdx.x == 0) WriteRecordHeader(p, rec, body);
  if (rec.type == 1) {
    const uint8_t* staged = a.ws + a.L.params + rec.params_ws;
    CopyBytes(p + 24, staged, rec.side_bytes, ws_lo, ws_hi, threadIdx.x, kThreads);
    CopyBytes(p + 28 + rec.side_bytes, staged + rec.side_bytes, rec.params_bytes, ws_lo, ws_hi, threadIdx.x,
              kThreads);
  }
  uint64_t prior = 0;
  for (int k = 0; k < rec.num_segments; ++k) {
    const int64_t s = rec.first_segment + k;
    const SegmentDesc seg = a.t.segments[s];
    const uint64_t len = seg_len[s];
    uint8_t* h = p + seg.hdr_rel + prior;
    if (threadIdx.x == 0) WriteSegmentHeader(h, seg, len);
    CopyBytes(h + 10, a.ws + a.L.slots + seg_off[s], len, ws_lo, ws_hi, threadIdx.x, kThreads);
    prior += len;
  }
}

// Block per record: (pack) the coded record's headers, then the checksum.
__global__ void __launch_bounds__(kHashThreads) RecordHashKernel(EncArgs a, int64_t rb) {
  __shared__ HashSmem hs;
  const int64_t r = rb + blockIdx.x;
  const RecordDesc rec = a.t.records[r];
  const uint64_t off = a.direct ? rec.static_offset : RecOff(a.ws, a.L)[r];
  uint8_t* p = a.frame + off;
  const uint64_t len = a.direct ? rec.static_len - 4 : rec.static_bytes - 4 + CodedTotal(a, rec);
  if (a.direct && rec.type == 1) {
    if (threadIdx.x == 0) WriteRecordHeader(p, rec, len - 20);
    for (int k = threadIdx.x; k < rec.num_segments; k += blockDim.x) {
      const SegmentDesc seg = a.t.segments[rec.first_segment + k];
      WriteSegmentHeader(a.frame + seg.static_coded_offset - 10, seg, seg.packed_bytes);
    }
    __syncthreads();
  }
  const uint64_t* sums = (a.direct && rec.type == 2)
                             ? reinterpret_cast<const uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws)
                             : nullptr;
  const uint64_t hash = BlockHash64(p, len, a.frame, a.frame + a.frame_cap, sums, hs);
  if (threadIdx.x == 0) PutU32(p + len, static_cast<uint32_t>(hash));
}

// Begin: error block, running total, frame header, symbol counts.
__global__ void __launch_bounds__(kThreads) BeginKernel(EncArgs a, uint64_t header_bytes) {
  if (blockIdx.x == 0) {
    uint32_t* err = ErrorBlock(a.ws, a.L);
    if (threadIdx.x < 8) err[threadIdx.x] = 0;
    if (threadIdx.x == 0) *RunningTotal(a.ws, a.L) = header_bytes;
    CopyBytes(a.frame, a.t.header, header_bytes, a.t.header, a.t.header + header_bytes, threadIdx.x, kThreads);
  }
  uint32_t* hist = reinterpret_cast<uint32_t*>(a.ws + a.L.hist);
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(kThreads) + threadIdx.x; i < a.L.hist_bytes / 4;
       i += static_cast<uint64_t>(gridDim.x) * kThreads)
    hist[i] = 0;
}

__global__ void FinishKernel(uint64_t* dst, const uint64_t* running, uint64_t static_bytes) {
  *dst = running != nullptr ? *running : static_bytes;
}

void Mark(StageEvents* t, const char* name, cudaStream_t stream) {
  if (t == nullptr || t->used >= StageEvents::kMax) return;
  t->names[t->used] = name;
  (void)cudaEventRecord(t->events[t->used++], stream);
}

}  // namespace

Status LaunchEncodeBegin(const EncodeLaunch& e, CUstream_st* stream) {
  const EncArgs a = MakeEncArgs(e, DeviceView{});
  const unsigned blocks = static_cast<unsigned>(std::min<uint64_t>(1 + a.L.hist_bytes / (4 * kThreads), 264));
  KV_LAUNCH(BeginKernel, blocks, kThreads, 0, stream)(a, e.header_bytes);
  return LaunchStatus("encode: begin");
}

Status LaunchEncodeFinish(const EncodeLaunch& e, uint64_t static_bytes, uint64_t* frame_bytes,
                          CUstream_st* stream) {
  if (frame_bytes == nullptr) return Status::Ok();
  KV_LAUNCH(FinishKernel, 1, 1, 0, stream)(frame_bytes, e.static_sizes ? nullptr : RunningTotal(e.workspace, *e.layout),
                                    static_bytes);
  return LaunchStatus("encode: finish");
}

Status LaunchEncodeRange(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range,
                         CUstream_st* stream) {
  const EncArgs a = MakeEncArgs(e, src);
  const int64_t records = range.record_end - range.record_begin;
  const int64_t tiles = range.tile_end - range.tile_begin;
  const int64_t spans = range.raw_span_end - range.raw_span_begin;
  if (records <= 0) return Status::Ok();
  Mark(e.timing, "quantise", stream);
  if (a.c.transform == 3) {
    KV_LAUNCH(AffineStatsKernel, dim3(static_cast<unsigned>(records), a.c.kv_heads), a.c.head_dim, 0, stream)(
        a, range.record_begin);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: affine stats"));
  }
  KVSERVE_RETURN_IF_ERROR(KVSERVE_DISPATCH_HEAD_DIM(a.c.head_dim, E, [&] {
    constexpr int D = 32 * E;
    if (spans > 0 && a.direct && a.src.vec16) {
      KV_LAUNCH(RawWindowsKernel<D>, static_cast<unsigned>(spans), kThreads, 0, stream)(a, range.raw_span_begin);
      KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: raw windows"));
    } else if (spans > 0) {
      auto* kernel = RawSpansKernel<D>;
      KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(kernel, sizeof(RawSmem)));
      KV_LAUNCH(kernel, static_cast<unsigned>(spans), kThreads, sizeof(RawSmem), stream)(a, range.raw_span_begin);
      KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: raw spans"));
    }
    if (PackWarpsApply(e, src)) return LaunchPackWarps(e, src, range, stream);
    const int64_t tile_blocks = std::min<int64_t>(tiles, int64_t{kTileBlocksPerSm} * MultiprocessorCount());
    if (tile_blocks > 0) {
      auto* kernel = a.c.transform == 0 ? TilesKernel<D, true> : TilesKernel<D, false>;
      KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(kernel, sizeof(TileSmem<D>)));
      KV_LAUNCH(kernel, static_cast<unsigned>(tile_blocks), kThreads, sizeof(TileSmem<D>), stream)(
          a, range.tile_begin, range.tile_end, tile_blocks);
    }
    return LaunchStatus("encode: produce");
  }));
  if (!e.direct) {
    Mark(e.timing, "rans", stream);
    KVSERVE_RETURN_IF_ERROR(LaunchRansEncode(e, range, stream));
    Mark(e.timing, "assemble", stream);
    KV_LAUNCH(ScanRecordsKernel, 1, 1024, 0, stream)(a, range.record_begin, range.record_end);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: scan"));
    KV_LAUNCH(FinalizeKernel, static_cast<unsigned>(records), kThreads, 0, stream)(a, range.record_begin);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: finalize"));
  }
  Mark(e.timing, "checksum", stream);
  KV_LAUNCH(RecordHashKernel, static_cast<unsigned>(records), kHashThreads, 0, stream)(a, range.record_begin);
  KVSERVE_RETURN_IF_ERROR(LaunchStatus("encode: checksums"));
  Mark(e.timing, "end", stream);
  return Status::Ok();
}


}  // namespace kvserve::cuda
