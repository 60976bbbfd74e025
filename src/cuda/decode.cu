// Copyright kvserve authors. Decode kernels and their launcher.
//
// Stream-ordered, for the records of a plan range (a whole frame, or the
// records of one layer as they arrive) in device memory:
//   1. locate             pack: LocateStaticKernel checks every record at its
//                         static offset; rans: LocateScanKernel (candidate
//                         record headers at every byte) + LocateChainKernel
//                         (they must chain in plan order)
//   2. LocateSequential   only if 1 failed (records out of plan order, or
//                         corruption): the reference walk, one thread
//   3. RecordKernel       block per record: body layout against the plan,
//                         segment offsets, and the XXH3 checksum (pack raw
//                         records: step 6)
//   4. (rans) RansDecode  warp per segment -> workspace symbols
//   5. DecodeRawSpans     raw spans: bytes -> output (pack: through 1 KiB
//                         shared-memory windows, cp.async, that also yield
//                         the XXH3 block terms)
//      DecodeTiles        persistent blocks, a pipeline over their tiles' row
//                         blocks: the next block's codes and params are
//                         copied into shared memory (cp.async) while this one
//                         is dequantised, inverse-transformed and stored
//   6. RawChainKernel     (pack) raw records' checksums from the block terms
// Kernels after a recorded error return at once, so a corrupt frame never
// drives reads outside its bytes. Coded records are verified before they are
// decoded; a raw record of a pack frame is copied while it is hashed, so on
// a checksum error its output rows hold the corrupt bytes (Check reports
// Corruption; the output is unspecified then, as for every error).
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
constexpr int kParamStage = 2048;
constexpr int kCodeStage = 4096 + 32;     // a row block's codes (512 * bits bytes) or symbols (4096)
constexpr int kWindowSmem = 1088;
constexpr int kWarpWindows = kSpanWindows / kBlockWarps;
constexpr int kTileBlocksPerSm = 3;

// One pipeline stage: a job's codes (or rANS symbols) and parameters, as
// the aligned 16-byte chunks covering them (read at the recorded offsets).
struct DecStage {
  uint32_t codes[kCodeStage / 4];
  uint32_t scales[(kParamStage + 32) / 4];
  uint32_t zeros[(kParamStage + 32) / 4];
};
constexpr int kMaxJobGroups = kParamStage / 2;  // f16 params a stage holds

template <int D>
struct DecTileSmem {
  DecStage stage[2];
  // The current job's parameters as f32, checked once each (prepared from
  // the stage after its copies landed).
  __align__(16) float scale[kMaxJobGroups];
  __align__(16) float zero[kMaxJobGroups];
};
struct DecRawSmem {
  uint32_t win[kBlockWarps][kWarpWindows][kWindowSmem / 4];
};


KV_DEV uint32_t* Err(const DecArgs& a) { return ErrorBlock(a.ws, a.L); }
KV_DEV bool Failed(const DecArgs& a) { return Failed(a.ws, a.L); }

// SlotIndex (src/pipeline/frame_format.cc) on the device; -1 if none.
KV_DEV int64_t SlotIndex(const FrameConsts& c, uint32_t layer, uint32_t kind, uint32_t type,
                         uint32_t token_begin) {
  if (layer >= static_cast<uint32_t>(c.layers) || kind > 1) return -1;
  const int64_t chunk = c.chunk_tokens, coded = c.coded_tokens;
  const int64_t nc = (coded + chunk - 1) / chunk;
  const int64_t nr = (c.tokens - coded + chunk - 1) / chunk;
  const int64_t index = static_cast<int64_t>(layer) * 2 * (nc + nr) + kind * (nc + nr);
  const int64_t tb = token_begin;
  if (type == 1) {
    if (tb >= coded || tb % chunk != 0) return -1;
    return index + tb / chunk;
  }
  if (type != 2) return -1;
  const int64_t off = tb - coded;
  if (off < 0 || tb >= c.tokens || off % chunk != 0) return -1;
  return index + nc + off / chunk;
}

// The slot (of the range) a record header at `p` names, or -1; checks that
// the record fits the bytes.
KV_DEV int64_t MatchHeader(const DecArgs& a, uint64_t p) {
  if (p < a.records_start || p + 24 > a.bytes_len) return -1;
  const uint8_t* h = a.bytes + p;
  if ((h[0] != 1 && h[0] != 2) || h[1] > 1 || h[2] != 0 || h[3] != 0) return -1;
  const int64_t slot = SlotIndex(a.c, GetU32(h + 4), h[1], h[0], GetU32(h + 8));
  if (slot < 0) return -1;
  const int64_t idx = slot - a.c.record_base;  // the plan's index (a window's plan starts at record_base)
  if (idx < a.rb || idx >= a.re) return -1;
  if (GetU32(h + 12) != static_cast<uint32_t>(a.t.records[idx].tokens)) return -1;
  if (p + 24 + GetU32(h + 16) > a.bytes_len) return -1;
  return idx;
}

// Pack frames: every record where the plan puts it.
__global__ void LocateStaticKernel(DecArgs a) {
  const int64_t r = a.rb + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.re) return;
  const RecordDesc rec = a.t.records[r];
  const int64_t p = static_cast<int64_t>(rec.static_offset) - a.static_base;
  bool ok = p >= 0 && MatchHeader(a, static_cast<uint64_t>(p)) == r &&
            GetU32(a.bytes + p + 16) == rec.static_len - 24 && (r != a.rb || static_cast<uint64_t>(p) == a.records_start) &&
            (r != a.re - 1 || static_cast<uint64_t>(p) + rec.static_len == a.bytes_len);
  RecOff(a.ws, a.L)[r] = ok ? static_cast<uint64_t>(p) : kNoRecord;
  if (!ok) atomicOr(&Err(a)[kErrFlags], 2u);
}

// Every byte position of the frame that holds a record header of the range
// (MatchHeader) claims its slot's offset; two claims of one slot flag the
// frame for the sequential walk. A thread tests the 16 positions of one
// aligned 16-byte chunk (aligned in memory, not in the frame), the 3 bytes
// after it from the next lane's chunk.
__global__ void LocateScanKernel(DecArgs a) {
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  const uint8_t* first = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(lo) & ~uintptr_t{15});
  const uint64_t chunks = static_cast<uint64_t>(hi - first + 15) / 16;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const int lane = threadIdx.x & 31;
  // Whole warps iterate together (the shuffle below).
  for (uint64_t base = blockIdx.x * static_cast<uint64_t>(blockDim.x) + (threadIdx.x & ~31u); base < chunks;
       base += stride) {
    const uint64_t c = base + lane;
    uint32_t w[5];
    Load16Guarded(first + 16 * c, lo, hi, w);
    w[4] = __shfl_down_sync(0xffffffffu, w[0], 1);
    if (lane == 31) {
      uint32_t next[4];
      Load16Guarded(first + 16 * (c + 1), lo, hi, next);
      w[4] = next[0];
    }
    if (c >= chunks) continue;
    const int64_t p0 = (first + 16 * c) - lo;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t x = __funnelshift_r(w[j / 4], w[j / 4 + 1], 8 * (j % 4));
      const uint32_t type = x & 3u;
      if ((x & 0xFFFFFEFCu) != 0 || type == 0 || type == 3) continue;
      const int64_t p = p0 + j;
      if (p < static_cast<int64_t>(a.records_start)) continue;
      const int64_t idx = MatchHeader(a, static_cast<uint64_t>(p));
      if (idx < 0) continue;
      const unsigned long long prev = atomicCAS(reinterpret_cast<unsigned long long*>(&RecOff(a.ws, a.L)[idx]),
                                                static_cast<unsigned long long>(kNoRecord),
                                                static_cast<unsigned long long>(p));
      if (prev != kNoRecord) atomicOr(&Err(a)[kErrFlags], 1u);
    }
  }
}

__global__ void LocateChainKernel(DecArgs a) {
  const int64_t r = a.rb + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.re) return;
  const uint64_t* off = RecOff(a.ws, a.L);
  const uint64_t p = off[r];
  bool ok = p != kNoRecord && (r != a.rb || p == a.records_start);
  if (ok) {
    const uint64_t end = p + 24 + GetU32(a.bytes + p + 16);
    const uint64_t next = r + 1 < a.re ? off[r + 1] : a.bytes_len;
    ok = end == next;
  }
  if (!ok) atomicOr(&Err(a)[kErrFlags], 2u);
}

// The reference walk (src/pipeline/decoder.cc): records in any order.
__global__ void LocateSequentialKernel(DecArgs a) {
  uint32_t* err = Err(a);
  if (err[kErrFlags] == 0) return;
  uint64_t* off = RecOff(a.ws, a.L);
  for (int64_t r = a.rb; r < a.re; ++r) off[r] = kNoRecord;
  uint64_t p = a.records_start;
  for (int64_t i = a.rb; i < a.re; ++i) {
    const int64_t idx = MatchHeader(a, p);
    if (idx < 0 || off[idx] != kNoRecord) {
      RecordError(err, kDevCorrupt, static_cast<uint32_t>(i), kCorLocate);
      return;
    }
    off[idx] = p;
    p += 24 + GetU32(a.bytes + p + 16);
  }
  if (p != a.bytes_len) RecordError(err, kDevCorrupt, static_cast<uint32_t>(a.re), kCorTrailing);
}

// Record `r` at `p`: its body layout against the plan (writes segment
// offsets and lengths, side and params positions). Returns 0 or the
// corruption detail. One thread.
KV_DEV uint32_t ParseRecord(const DecArgs& a, int64_t r, const RecordDesc& rec, uint64_t p, uint64_t total) {
  uint64_t q = p + 20;
  const uint64_t end = p + total;
  uint64_t* seg_off = SegOff(a.ws, a.L);
  uint32_t* seg_len = SegLen(a.ws, a.L);
  auto segment = [&](int64_t s) -> uint32_t {
    const SegmentDesc seg = a.t.segments[s];
    if (q + 10 > end) return kCorSegment;
    const uint8_t* h = a.bytes + q;
    const uint32_t levels = GetU16(h), count = GetU32(h + 2), len = GetU32(h + 6);
    if (levels != static_cast<uint32_t>(seg.levels) || count != static_cast<uint32_t>(seg.count)) return kCorSegment;
    if (q + 10 + len > end) return kCorSegment;
    if (a.c.codec == 0) {
      if (len != seg.packed_bytes) return kCorPacked;
      const uint64_t used_bits = seg.count * seg.bits - 8 * (seg.packed_bytes - 1);
      if (len > 0 && used_bits < 8 && (h[10 + len - 1] >> used_bits) != 0) return kCorPacked;
    }
    seg_off[s] = q + 10;
    seg_len[s] = len;
    q += 10 + len;
    return 0;
  };
  uint32_t bad = 0;
  if (rec.type == 2) {
    bad = segment(rec.first_segment);
  } else {
    uint64_t side_pos = 0, params_pos = 0;
    if (q + 4 > end || GetU32(a.bytes + q) != rec.side_bytes) bad = kCorSide;
    if (!bad) {
      side_pos = q + 4;
      q += 4 + rec.side_bytes;
      if (q + 4 > end || GetU32(a.bytes + q) != rec.params_bytes) bad = kCorParams;
    }
    if (!bad) {
      params_pos = q + 4;
      q += 4 + rec.params_bytes;
      if (q + 2 > end || GetU16(a.bytes + q) != rec.num_segments) bad = kCorSegment;
      q += 2;
    }
    for (int k = 0; k < rec.num_segments && !bad; ++k) bad = segment(rec.first_segment + k);
    RecAux(a.ws, a.L)[2 * r] = side_pos;
    RecAux(a.ws, a.L)[2 * r + 1] = params_pos;
  }
  if (!bad && q != end) bad = kCorTrailing;
  return bad;
}

__global__ void __launch_bounds__(kHashThreads) RecordKernel(DecArgs a) {
  __shared__ HashSmem hs;
  __shared__ uint32_t s_bad;
  const int64_t r = a.rb + blockIdx.x;
  if (Failed(a)) return;
  uint32_t* err = Err(a);
  const RecordDesc rec = a.t.records[r];
  const uint64_t p = RecOff(a.ws, a.L)[r];
  const uint64_t total = 20 + static_cast<uint64_t>(GetU32(a.bytes + p + 16));
  if (threadIdx.x == 0) s_bad = ParseRecord(a, r, rec, p, total);
  __syncthreads();
  const uint32_t bad = s_bad;
  if (bad) {
    if (threadIdx.x == 0) RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), bad);
    return;
  }
  if (rec.type == 1 && rec.side_bytes > 0) {  // affine side values
    const uint64_t side_pos = RecAux(a.ws, a.L)[2 * r];
    const uint32_t n = rec.side_bytes / 8;
    bool ok = true;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float shift = BitsFloat(GetU32(a.bytes + side_pos + 4 * i));
      const float scale = BitsFloat(GetU32(a.bytes + side_pos + 4 * (n + i)));
      ok = ok && IsFiniteF(shift) && IsFiniteF(scale) && scale > 0.0f;
    }
    if (!ok) RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), kCorSide);
  }
  if (a.static_sizes && rec.type == 2) return;  // hashed while it is copied (RawChainKernel)
  const uint64_t hash = BlockHash64(a.bytes + p, total, a.bytes, a.bytes + a.bytes_len, nullptr, hs);
  if (threadIdx.x == 0 && static_cast<uint32_t>(hash) != GetU32(a.bytes + p + total))
    RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), kCorChecksum);
}

// Pack raw records: the checksum from the block terms the raw spans wrote.
__global__ void __launch_bounds__(kHashThreads) RawChainKernel(DecArgs a, int64_t raw_begin) {
  __shared__ HashSmem hs;
  if (Failed(a)) return;
  const int64_t r = a.t.raw_records[raw_begin + blockIdx.x];
  const RecordDesc rec = a.t.records[r];
  const uint64_t p = RecOff(a.ws, a.L)[r];
  const uint64_t len = 30 + a.t.segments[rec.first_segment].count;
  const uint64_t* sums = reinterpret_cast<const uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws);
  const uint64_t hash = BlockHash64(a.bytes + p, len, a.bytes, a.bytes + a.bytes_len, sums, hs);
  if (threadIdx.x == 0 && static_cast<uint32_t>(hash) != GetU32(a.bytes + p + len))
    RecordError(Err(a), kDevCorrupt, static_cast<uint32_t>(r), kCorChecksum);
}

// Parameter `index` of a staged parameter range whose first byte is at
// byte `off` of the stage.
KV_DEV float ReadParamStaged(const uint32_t* stage, uint32_t off, int index, bool f32) {
  return f32 ? BitsFloat(WordAt(stage, off + 4 * index))
             : HalfBitsToFloat(static_cast<uint16_t>(WordAt(stage, off + 2 * index)));
}

// Dequantised values of this lane's channels of row t_run of `run`, read
// straight from global memory (the anchor rows of delta).
template <int D>
KV_DEV void DequantRowGlobal(const DecArgs& a, const RunDesc& run, int t_run, float y[kLaneElems]) {
  const int part = RowGeo<D>::Part();
  if (run.levels == 0) {
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) y[j] = 0.0f;
    return;
  }
  uint32_t codes[kLaneElems];
  const SegmentDesc seg = a.t.segments[run.segment];
  if (a.c.codec == 0) {
    const uint8_t* coded = a.bytes + SegOff(a.ws, a.L)[run.segment];
    uint32_t w[8];
    LoadUnaligned<8>(coded + static_cast<int64_t>(t_run) * D * run.bits / 8 + 2 * run.bits * part, a.bytes,
                     a.bytes + a.bytes_len, w);
    UnpackLane(w, 0, run.bits, codes);
  } else {
    const uint4 s = *reinterpret_cast<const uint4*>(a.ws + a.L.symbols + seg.sym_ws +
                                                    static_cast<int64_t>(t_run) * D + kLaneElems * part);
    const uint32_t w[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) codes[j] = (w[j / 4] >> (8 * (j & 3))) & 0xFFu;
  }
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int ssz = f32 ? 4 : 2;
  const uint8_t* scales = a.bytes + RecAux(a.ws, a.L)[2 * run.record + 1] + run.params_rel;
  const uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * ssz;
  const float h = FMul(static_cast<float>(run.levels - 1), 0.5f);
  bool ok = true;
#pragma unroll
  for (int j = 0; j < kLaneElems; ++j) {
    const int d = kLaneElems * part + j;
    const int64_t gi = run.axis == 0 ? static_cast<int64_t>(t_run) * (D / run.group) + d / run.group
                                     : static_cast<int64_t>(t_run / run.group) * D + d;
    const float scale = ReadParamGlobal(scales + gi * ssz, f32);
    const float zero = sym ? 0.0f : ReadParamGlobal(zeros + gi * ssz, f32);
    ok = ok && codes[j] < static_cast<uint32_t>(run.levels) && IsFiniteF(scale) && !(scale < 0.0f) &&
         IsFiniteF(zero);
    y[j] = DecodeValue(codes[j], scale, zero, h, sym);
  }
  if (!ok) RecordError(Err(a), kDevCorrupt, static_cast<uint32_t>(run.record), kCorCode);
}

// The staged inputs of a job and where they start in their buffers.
struct StageOffsets {
  uint32_t codes, scales, zeros;
};

// Tile geometry shared by the prefetch and the decode of a job.
template <int D>
struct DecJobGeo {
  TileDesc tile;
  RunDesc run;
  int rows, r0, nrows, row_bytes, ssz, gpr;
  bool stage_params;  // token axis: this row block's params fit a stage
  KV_DEV DecJobGeo(const DecArgs& a, int64_t ti, int it) {
    constexpr int RPB = RowGeo<D>::kRowsPerBlock;
    tile = a.t.tiles[ti];
    run = a.t.runs[tile.run];
    rows = tile.row_end - tile.row_begin;
    r0 = it * RPB;
    nrows = rows - r0 < RPB ? rows - r0 : RPB;
    row_bytes = a.c.codec == 0 ? D * run.bits / 8 : D;
    ssz = a.c.scale_f32 != 0 ? 4 : 2;
    gpr = run.axis == 0 ? D / run.group : 0;
    stage_params = run.axis == 0 ? RPB * gpr * ssz <= kParamStage : true;
  }
  KV_DEV const uint8_t* Codes(const DecArgs& a) const {
    return a.c.codec == 0 ? a.bytes + SegOff(a.ws, a.L)[run.segment]
                          : a.ws + a.L.symbols + a.t.segments[run.segment].sym_ws;
  }
  KV_DEV const uint8_t* Scales(const DecArgs& a) const {
    return a.bytes + RecAux(a.ws, a.L)[2 * run.record + 1] + run.params_rel;
  }
  // First parameter index of this job: token axis, its rows' groups;
  // channel axis, the tile's token group.
  KV_DEV int64_t FirstGroup() const {
    return run.axis == 0 ? static_cast<int64_t>(tile.row_begin + r0) * gpr
                         : static_cast<int64_t>(tile.row_begin / run.group) * D;
  }
  KV_DEV int Groups() const { return run.axis == 0 ? nrows * gpr : D; }
};

template <int D>
KV_DEV int DecTileJobs(const DecArgs& a, int64_t ti) {
  constexpr int RPB = RowGeo<D>::kRowsPerBlock;
  const TileDesc tile = a.t.tiles[ti];
  return (tile.row_end - tile.row_begin + RPB - 1) / RPB;
}

// Issues the async copies of job (ti, it)'s codes and parameters.
template <int D>
KV_DEV StageOffsets PrefetchDecJob(const DecArgs& a, int64_t ti, int it, DecStage& st) {
  const DecJobGeo<D> g(a, ti, it);
  StageOffsets off{0, 0, 0};
  if (g.run.levels == 0) return off;
  const uint8_t* lo = a.c.codec == 0 ? a.bytes : a.ws;
  const uint8_t* hi = a.c.codec == 0 ? a.bytes + a.bytes_len : a.ws + a.L.total;
  off.codes = StageAsync(st.codes, g.Codes(a) + static_cast<int64_t>(g.tile.row_begin + g.r0) * g.row_bytes,
                         g.nrows * g.row_bytes, lo, hi, threadIdx.x, kThreads);
  if (g.stage_params) {
    const uint8_t* scales = g.Scales(a);
    const int64_t g0 = g.FirstGroup();
    const uint32_t n = static_cast<uint32_t>(g.Groups() * g.ssz);
    const uint8_t* plo = a.bytes;
    const uint8_t* phi = a.bytes + a.bytes_len;
    off.scales = StageAsync(st.scales, scales + g0 * g.ssz, n, plo, phi, threadIdx.x, kThreads);
    if (a.c.symmetric == 0)
      off.zeros = StageAsync(st.zeros, scales + (static_cast<int64_t>(g.run.ngroups) + g0) * g.ssz, n, plo, phi,
                             threadIdx.x, kThreads);
  }
  return off;
}

// Decodes job (ti, it): row block `it` of the tile, from its staged codes
// and parameters.
// Converts and checks job (ti, it)'s staged parameters into sm.scale/zero
// (every thread calls it; a barrier follows). Non-finite or negative scales
// and non-finite zero points are Corruption.
template <int D>
KV_DEV void PrepareParams(const DecArgs& a, int64_t ti, int it, const DecStage& st, const StageOffsets& off,
                          DecTileSmem<D>& sm) {
  const DecJobGeo<D> g(a, ti, it);
  if (g.run.levels == 0 || !g.stage_params) return;
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int groups = g.Groups();
  bool ok = true;
  for (int i = threadIdx.x; i < groups; i += kThreads) {
    const float scale = ReadParamStaged(st.scales, off.scales, i, f32);
    const float zero = sym ? 0.0f : ReadParamStaged(st.zeros, off.zeros, i, f32);
    ok = ok && IsFiniteF(scale) && !(scale < 0.0f) && IsFiniteF(zero);
    sm.scale[i] = scale;
    sm.zero[i] = zero;
  }
  if (!ok) RecordError(Err(a), kDevCorrupt, static_cast<uint32_t>(g.run.record), kCorCode);
}

template <int D>
KV_DEV void DecodeJob(const DecArgs& a, int64_t ti, int it, const DecStage& st, const StageOffsets& off,
                      const DecTileSmem<D>& sm) {
  using G = RowGeo<D>;
  const int warp = threadIdx.x >> 5, sub = G::Sub(), part = G::Part();
  const DecJobGeo<D> g(a, ti, it);
  const RunDesc& run = g.run;
  const RecordDesc rec = a.t.records[run.record];
  const int r_local = warp * G::kRowsPerWarp + sub;
  const int r = g.r0 + r_local;
  const bool active = r < g.rows;
  const int t_run = g.tile.row_begin + (active ? r : g.r0);
  const int t_rel = run.begin + t_run;
  if (run.levels == 0) {  // pruned: zeros, keep-mask 0
    float z[kLaneElems];
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) z[j] = 0.0f;
    if (active) {
      StoreRow<D>(a.out, rec.layer, rec.kind, run.head, rec.token_begin + t_rel, z);
      if (part == 0) KeepMask(a, rec.layer, rec.kind, run.head, rec.token_begin + t_rel, 0);
    }
    return;
  }
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int b = run.bits;
  const float h = FMul(static_cast<float>(run.levels - 1), 0.5f);
  uint32_t* err = Err(a);
  uint32_t codes[kLaneElems];
  const uint32_t k = off.codes + (active ? r_local : 0) * g.row_bytes;
  if (a.c.codec == 0) {
    UnpackLane(st.codes, k + part * 2 * b, b, codes);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t w = WordAt(st.codes, k + kLaneElems * part + 4 * q);
#pragma unroll
      for (int j = 0; j < 4; ++j) codes[4 * q + j] = (w >> (8 * j)) & 0xFFu;
    }
  }
  const uint8_t* scales = g.Scales(a);
  const uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * g.ssz;
  float x[kLaneElems];
  bool ok = true;
  if (!g.stage_params) {  // many small groups: straight from the frame, checked here
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      const int64_t gi = static_cast<int64_t>(t_run) * g.gpr + (kLaneElems * part + j) / run.group;
      const float scale = ReadParamGlobal(scales + gi * g.ssz, f32);
      const float zero = sym ? 0.0f : ReadParamGlobal(zeros + gi * g.ssz, f32);
      ok = ok && IsFiniteF(scale) && !(scale < 0.0f) && IsFiniteF(zero);
      x[j] = DecodeValue(codes[j], scale, zero, h, sym);
    }
  } else if (run.axis != 0) {  // channel axis: this lane's 16 channels
    const float4* sc = reinterpret_cast<const float4*>(sm.scale + kLaneElems * part);
    const float4* ze = reinterpret_cast<const float4*>(sm.zero + kLaneElems * part);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 s4 = sc[q], z4 = ze[q];
      x[4 * q] = DecodeValue(codes[4 * q], s4.x, z4.x, h, sym);
      x[4 * q + 1] = DecodeValue(codes[4 * q + 1], s4.y, z4.y, h, sym);
      x[4 * q + 2] = DecodeValue(codes[4 * q + 2], s4.z, z4.z, h, sym);
      x[4 * q + 3] = DecodeValue(codes[4 * q + 3], s4.w, z4.w, h, sym);
    }
  } else if (run.group >= kLaneElems) {  // token axis: one group for the lane's channels
    const int idx = (active ? r_local : 0) * g.gpr + (kLaneElems * part) / run.group;
    const float scale = sm.scale[idx], zero = sm.zero[idx];
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) x[j] = DecodeValue(codes[j], scale, zero, h, sym);
  } else {
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) {
      const int idx = (active ? r_local : 0) * g.gpr + (kLaneElems * part + j) / run.group;
      x[j] = DecodeValue(codes[j], sm.scale[idx], sm.zero[idx], h, sym);
    }
  }
  if (run.levels != (1 << b))  // codes >= levels are possible only then
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) ok = ok && codes[j] < static_cast<uint32_t>(run.levels);
  if (active && !ok) RecordError(err, kDevCorrupt, static_cast<uint32_t>(run.record), kCorCode);
  switch (a.c.transform) {
    case 1: {  // delta: x = y + y[anchor]
      const int anchor_every = a.c.anchor == 0 ? rec.tokens : a.c.anchor;
      const int anchor = t_rel - t_rel % anchor_every;
      if (active && anchor != t_rel) {
        // The anchor's run: same head, the run containing `anchor`.
        int ri = rec.first_run;
        for (int q = rec.first_run; q < rec.first_run + rec.num_runs; ++q) {
          const RunDesc& o = a.t.runs[q];
          if (o.head == run.head && o.begin <= anchor && anchor < o.begin + o.tokens) ri = q;
        }
        const RunDesc arun = a.t.runs[ri];
        float base[kLaneElems];
        DequantRowGlobal<D>(a, arun, anchor - arun.begin, base);
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) x[j] = FAdd(x[j], base[j]);
      }
      break;
    }
    case 2: {
      uint32_t signs = SignBitsOfLane<D>(
          a.t.sign_words + ((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + run.head) * a.c.sign_words);
      RowFwht<D>(x);
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) x[j] = FMul(x[j], a.c.hadamard_scale);
      FlipSigns(x, signs);
      break;
    }
    case 3: {
      const uint8_t* side = a.bytes + RecAux(a.ws, a.L)[2 * run.record];
      const int H = a.c.kv_heads;
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) {
        const int d = kLaneElems * part + j;
        const float shift = BitsFloat(GetU32(side + 4 * (run.head * D + d)));
        const float scale = BitsFloat(GetU32(side + 4 * (H * D + run.head * D + d)));
        x[j] = FAdd(FMul(x[j], scale), shift);
      }
      break;
    }
    default:
      break;
  }
  if (active) {
    StoreRow<D>(a.out, rec.layer, rec.kind, run.head, rec.token_begin + t_rel, x);
    if (part == 0) KeepMask(a, rec.layer, rec.kind, run.head, rec.token_begin + t_rel, 1);
  }
}

// A persistent block's tiles first, first + stride, ... < end, as a
// pipeline: job k + 1's codes and parameters are copied into the other
// stage while job k is decoded.
template <int D>
KV_DEV void DecodeTiles(const DecArgs& a, int64_t first, int64_t end, int64_t stride, DecTileSmem<D>& sm) {
  int64_t ti = first;
  int it = 0;
  StageOffsets cur{0, 0, 0};
  if (ti < end) cur = PrefetchDecJob<D>(a, ti, it, sm.stage[0]);
  CpAsyncCommit();
  for (int k = 0; ti < end; ++k) {
    int64_t next_ti = ti;
    int next_it = it + 1;
    if (next_it >= DecTileJobs<D>(a, ti)) {
      next_it = 0;
      next_ti = ti + stride;
    }
    StageOffsets next{0, 0, 0};
    if (next_ti < end) next = PrefetchDecJob<D>(a, next_ti, next_it, sm.stage[(k + 1) & 1]);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    PrepareParams<D>(a, ti, it, sm.stage[k & 1], cur, sm);
    __syncthreads();
    DecodeJob<D>(a, ti, it, sm.stage[k & 1], cur, sm);
    __syncthreads();
    ti = next_ti;
    it = next_it;
    cur = next;
  }
  CpAsyncWait<0>();
}

// A raw record's span of windows: pack: the record's bytes through a 1 KiB
// window per warp (cp.async, kWarpWindows in flight) that yields the XXH3
// block terms and the output rows; rans: the decoded data bytes in the
// workspace -> output rows.
template <int D>
KV_DEV void DecodeRawSpan(const DecArgs& a, const RawSpan& span, DecRawSmem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = span.record;
  const RecordDesc rec = a.t.records[r];
  const SegmentDesc seg = a.t.segments[rec.first_segment];
  const uint64_t count = seg.count;
  const uint64_t row_bytes = static_cast<uint64_t>(D) * a.out.elem_bytes;
  const int w_end = span.first_window + span.windows;
  auto keep = [&](uint64_t d) {
    if (d % row_bytes != 0) return;
    const uint64_t row = d / row_bytes;
    KeepMask(a, rec.layer, rec.kind, static_cast<int>(row / rec.tokens), rec.token_begin + static_cast<int>(row % rec.tokens),
             1);
  };
  if (a.c.codec != 0) {
    const uint8_t* syms = a.ws + a.L.symbols + seg.sym_ws;
    for (int w = span.first_window + warp; w < w_end; w += kBlockWarps)
      for (int c = lane; c < kWindowBytes / 16; c += 32) {
        const uint64_t d = static_cast<uint64_t>(w) * kWindowBytes + 16 * c;
        if (d >= count) break;
        const uint4 v = *reinterpret_cast<const uint4*>(syms + d);
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
        StoreRawChunk(a.out, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, d, x);
        keep(d);
      }
    return;
  }
  const uint64_t p = RecOff(a.ws, a.L)[r];
  const uint64_t len = 30 + count;
  const uint64_t nb = (len - 1) / 1024;
  uint64_t* sums = reinterpret_cast<uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws);
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  // Window w's buffer holds the aligned 16-byte chunks from the one that
  // contains record byte 1024 w; record byte o is at buffer byte o - 1024 w + s.
  uint32_t shift[kWarpWindows];
#pragma unroll
  for (int k = 0; k < kWarpWindows; ++k) {
    shift[k] = 0;
    const int w = span.first_window + warp + kBlockWarps * k;
    if (w < w_end)
      shift[k] = StageAsync(sm.win[warp][k], a.bytes + p + static_cast<uint64_t>(w) * kWindowBytes,
                            kWindowSmem - 32, lo, hi, lane, 32);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kWarpWindows; ++k) {
    const int w = span.first_window + warp + kBlockWarps * k;
    if (w >= w_end) break;
    const uint32_t* win = sm.win[warp][k];
    const uint32_t s = shift[k];
    const uint64_t o0 = static_cast<uint64_t>(w) * kWindowBytes;
    if (o0 / 1024 < nb) {
      StoreStagedBlockTerms(win, s, sums + 8 * w);
    }
    // Output chunks whose first byte (record offset d + 30) is in this window.
    const uint64_t d_first = o0 >= 30 ? (o0 - 30 + 15) / 16 * 16 : 0;
    const uint64_t d_stop = o0 + kWindowBytes - 30 < count ? o0 + kWindowBytes - 30 : count;
    for (uint64_t d = d_first + 16 * lane; d < d_stop; d += 512) {
      const uint32_t q = static_cast<uint32_t>(d + 30 - o0) + s;
      const uint32_t x[4] = {WordAt(win, q), WordAt(win, q + 4), WordAt(win, q + 8), WordAt(win, q + 12)};
      StoreRawChunk(a.out, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, d, x);
      keep(d);
    }
  }
}

#ifndef KVSERVE_CUDA_PRODUCE_MIN_BLOCKS
#define KVSERVE_CUDA_PRODUCE_MIN_BLOCKS 3
#endif

// One raw span per block (light, so many blocks per SM keep many windows
// in flight).
template <int D>
__global__ void __launch_bounds__(kThreads, 6) DecodeRawSpansKernel(DecArgs a, int64_t span_begin) {
  KV_DYNAMIC_SMEM(smem);
  if (Failed(a)) return;
  DecodeRawSpan<D>(a, a.t.raw_spans[span_begin + blockIdx.x], *reinterpret_cast<DecRawSmem*>(smem));
}

// Pack frames into vec16 views: one raw span per block, its windows moved
// in registers (raw_window.cuh), two per warp in flight; no shared memory.
template <int D>
__global__ void __launch_bounds__(kThreads, 4) DecodeRawWindowsKernel(DecArgs a, int64_t span_begin) {
  if (Failed(a)) return;
  const RawSpan span = a.t.raw_spans[span_begin + blockIdx.x];
  const RecordDesc rec = a.t.records[span.record];
  const uint64_t count = a.t.segments[rec.first_segment].count;
  const uint64_t p = RecOff(a.ws, a.L)[span.record];
  uint64_t* sums = reinterpret_cast<uint64_t*>(a.ws + a.L.hash_sums + rec.hash_ws);
  const uint32_t tokens = static_cast<uint32_t>(rec.tokens);
  auto keep = [&](uint64_t row) {
    const uint32_t head = static_cast<uint32_t>(row) / tokens;
    KeepMask(a, rec.layer, rec.kind, static_cast<int>(head),
             rec.token_begin + static_cast<int>(static_cast<uint32_t>(row) - head * tokens), 1);
  };
  const int end = span.first_window + span.windows;
  for (int f = span.first_window; f < end; f += 2 * kBlockWarps)
    DecodeRawWindows<D, 2, kBlockWarps>(a.out, rec, count, a.bytes + p, a.bytes, a.bytes + a.bytes_len, sums, f,
                                        end, keep);
}

// Persistent tile blocks, tile_stride of them, taking the tiles
// [tile_begin, tile_end) in turn.
template <int D>
__global__ void __launch_bounds__(kThreads, KVSERVE_CUDA_PRODUCE_MIN_BLOCKS)
    DecodeTilesKernel(DecArgs a, int64_t tile_begin, int64_t tile_end, int64_t tile_stride) {
  KV_DYNAMIC_SMEM(smem);
  if (Failed(a)) return;
  DecodeTiles<D>(a, tile_begin + blockIdx.x, tile_end, tile_stride, *reinterpret_cast<DecTileSmem<D>*>(smem));
}

unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

void Mark(StageEvents* t, const char* name, cudaStream_t stream) {
  if (t == nullptr || t->used >= StageEvents::kMax) return;
  t->names[t->used] = name;
  (void)cudaEventRecord(t->events[t->used++], stream);
}

}  // namespace

Status LaunchDecode(const DecodeLaunch& d, const DeviceView& out, CUstream_st* stream) {
  DecArgs a;
  a.c = d.consts;
  a.t = d.tables;
  a.out = out;
  a.bytes = d.bytes;
  a.bytes_len = d.bytes_len;
  a.records_start = d.records_start;
  a.static_base = d.static_base;
  a.ws = d.workspace;
  a.L = *d.layout;
  a.rb = d.range.record_begin;
  a.re = d.range.record_end;
  a.sb = d.range.segment_begin;
  a.se = d.range.segment_end;
  a.static_sizes = d.static_sizes ? 1 : 0;
  a.keep = d.keep_mask;
  const int64_t R = a.re - a.rb;
  if (R <= 0) return Status::Ok();
  Mark(d.timing, "locate", stream);
  if (d.reset_errors && cudaMemsetAsync(a.ws + a.L.error, 0, 64, stream) != cudaSuccess)
    return LaunchStatus("decode: reset");
  if (d.static_sizes) {
    KV_LAUNCH(LocateStaticKernel, Blocks(R, 256), 256, 0, stream)(a);
  } else {
    if (cudaMemsetAsync(a.ws + a.L.rec_off + 8 * a.rb, 0xFF, 8 * R, stream) != cudaSuccess)
      return LaunchStatus("decode: reset offsets");
    const uint64_t chunks = d.bytes_len / 16 + 2;  // aligned 16-byte chunks (at most)
    const unsigned scan_blocks = static_cast<unsigned>(
        std::min<uint64_t>((chunks + 255) / 256, uint64_t{8} * MultiprocessorCount()));
    KV_LAUNCH(LocateScanKernel, scan_blocks, 256, 0, stream)(a);
    KV_LAUNCH(LocateChainKernel, Blocks(R, 256), 256, 0, stream)(a);
  }
  KV_LAUNCH(LocateSequentialKernel, 1, 1, 0, stream)(a);
  KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: locate"));
  Mark(d.timing, "verify", stream);
  KV_LAUNCH(RecordKernel, static_cast<unsigned>(R), kHashThreads, 0, stream)(a);
  KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: records"));
  if (a.c.codec == 1) {
    Mark(d.timing, "rans", stream);
    KVSERVE_RETURN_IF_ERROR(LaunchRansDecode(d, stream));
  }
  Mark(d.timing, "dequantise", stream);
  const int64_t spans = d.range.raw_span_end - d.range.raw_span_begin;
  const int64_t tiles = d.range.tile_end - d.range.tile_begin;
  KVSERVE_RETURN_IF_ERROR(KVSERVE_DISPATCH_HEAD_DIM(a.c.head_dim, E, [&] {
    constexpr int D = 32 * E;
    if (spans > 0 && a.c.codec == 0 && a.out.vec16) {
      KV_LAUNCH(DecodeRawWindowsKernel<D>, static_cast<unsigned>(spans), kThreads, 0, stream)(a, d.range.raw_span_begin);
      KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: raw windows"));
    } else if (spans > 0) {
      auto* kernel = DecodeRawSpansKernel<D>;
      KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(kernel, sizeof(DecRawSmem)));
      KV_LAUNCH(kernel, static_cast<unsigned>(spans), kThreads, sizeof(DecRawSmem), stream)(a, d.range.raw_span_begin);
      KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: raw spans"));
    }
    if (UnpackWarpsApply(d, out)) return LaunchUnpackWarps(d, a, stream);
    const int64_t tile_blocks = std::min<int64_t>(tiles, int64_t{kTileBlocksPerSm} * MultiprocessorCount());
    if (tile_blocks > 0) {
      auto* kernel = DecodeTilesKernel<D>;
      KVSERVE_RETURN_IF_ERROR(AllowDynamicSmem(kernel, sizeof(DecTileSmem<D>)));
      KV_LAUNCH(kernel, static_cast<unsigned>(tile_blocks), kThreads, sizeof(DecTileSmem<D>), stream)(
          a, d.range.tile_begin, d.range.tile_end, tile_blocks);
    }
    return LaunchStatus("decode: produce");
  }));
  const int64_t raws = d.range.raw_record_end - d.range.raw_record_begin;
  if (d.static_sizes && raws > 0) {
    Mark(d.timing, "raw checksums", stream);
    KV_LAUNCH(RawChainKernel, static_cast<unsigned>(raws), kHashThreads, 0, stream)(a, d.range.raw_record_begin);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: raw checksums"));
  }
  Mark(d.timing, "end", stream);
  return Status::Ok();
}


}  // namespace kvserve::cuda
