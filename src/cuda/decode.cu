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
//   5. ProduceKernel      raw spans: bytes -> output (pack: through a 1 KiB
//                         shared-memory window per warp that also yields the
//                         XXH3 block terms); coded tiles: codes and params
//                         staged in shared memory with aligned loads ->
//                         dequantise -> inverse transform -> output view
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
#include "cuda/record_hash.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kThreads = 32 * kBlockWarps;
constexpr int kParamStage = 2048;
constexpr int kCodeStage = 4096 + 16;
constexpr int kWindowSmem = 1088;

template <int D>
struct DecTileSmem {
  uint32_t codes[2][kCodeStage / 4];
  uint32_t scales[2][(kParamStage + 16) / 4];
  uint32_t zeros[2][(kParamStage + 16) / 4];
};
struct DecRawSmem {
  uint32_t win[kBlockWarps][kWindowSmem / 4];
};
template <int D>
constexpr size_t DecSmemBytes() {
  return sizeof(DecTileSmem<D>) > sizeof(DecRawSmem) ? sizeof(DecTileSmem<D>) : sizeof(DecRawSmem);
}

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
  const int64_t idx = SlotIndex(a.c, GetU32(h + 4), h[1], h[0], GetU32(h + 8));
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

__global__ void LocateScanKernel(DecArgs a) {
  const uint64_t nwords = a.bytes_len / 4;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i <= nwords;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t p0 = 4 * i;
    uint32_t w[2];
    LoadUnaligned<2>(a.bytes + p0, a.bytes, a.bytes + a.bytes_len, w);
    for (int j = 0; j < 4; ++j) {
      const uint64_t p = p0 + j;
      if (p < a.records_start) continue;
      const uint32_t x = __funnelshift_r(w[0], w[1], 8 * j);
      const uint32_t type = x & 3u;
      if ((x & 0xFFFFFEFCu) != 0 || type == 0 || type == 3) continue;
      const int64_t idx = MatchHeader(a, p);
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

KV_DEV float ReadParamGlobal(const uint8_t* p, bool f32) {
  return f32 ? BitsFloat(GetU32(p)) : HalfBitsToFloat(static_cast<uint16_t>(GetU16(p)));
}
KV_DEV float ReadParamStaged(const uint32_t* stage, int index, bool f32) {
  return f32 ? BitsFloat(stage[index]) : HalfBitsToFloat(reinterpret_cast<const uint16_t*>(stage)[index]);
}

KV_DEV void KeepMask(const DecArgs& a, int layer, int kind, int head, int token, uint8_t v) {
  if (a.keep != nullptr)
    a.keep[((static_cast<int64_t>(layer) * 2 + kind) * a.c.kv_heads + head) * a.c.tokens + token] = v;
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

template <int D>
KV_DEV void DecodeTile(const DecArgs& a, const TileDesc& tile, DecTileSmem<D>& sm) {
  using G = RowGeo<D>;
  constexpr int RPB = G::kRowsPerBlock;
  const int warp = threadIdx.x >> 5, sub = G::Sub(), part = G::Part();
  const RunDesc run = a.t.runs[tile.run];
  const RecordDesc rec = a.t.records[run.record];
  const int rows = tile.row_end - tile.row_begin;
  const int iters = (rows + RPB - 1) / RPB;
  const int r_local = warp * G::kRowsPerWarp + sub;
  if (run.levels == 0) {  // pruned: zeros, keep-mask 0
    float z[kLaneElems];
#pragma unroll
    for (int j = 0; j < kLaneElems; ++j) z[j] = 0.0f;
    for (int r = r_local; r < rows; r += RPB) {
      const int t = rec.token_begin + run.begin + tile.row_begin + r;
      StoreRow<D>(a.out, rec.layer, rec.kind, run.head, t, z);
      if (part == 0) KeepMask(a, rec.layer, rec.kind, run.head, t, 0);
    }
    return;
  }
  const SegmentDesc seg = a.t.segments[run.segment];
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int ssz = f32 ? 4 : 2;
  const uint8_t* scales = a.bytes + RecAux(a.ws, a.L)[2 * run.record + 1] + run.params_rel;
  const uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * ssz;
  const int b = run.bits;
  const int row_bytes = D * b / 8;
  const bool pack = a.c.codec == 0;
  const uint8_t* coded = pack ? a.bytes + SegOff(a.ws, a.L)[run.segment] : nullptr;
  const uint8_t* syms = a.ws + a.L.symbols + seg.sym_ws;
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  const float h = FMul(static_cast<float>(run.levels - 1), 0.5f);
  const bool check_codes = run.levels != (1 << b);
  uint32_t signs = 0;
  if (a.c.transform == 2) {
    const uint64_t* words =
        a.t.sign_words + ((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + run.head) * a.c.sign_words;
    signs = SignBitsOfLane<D>(words);
  }
  const int gc = run.group;
  const int gpr = run.axis == 0 ? D / gc : 0;
  const bool stage_token = run.axis == 0 && RPB * gpr * ssz <= kParamStage;
  uint32_t* err = Err(a);
  if (run.axis != 0) {  // channel axis: the token group's D scales and zeros, staged once
    const int64_t g0 = static_cast<int64_t>(tile.row_begin / run.group) * D;
    LoadToSmem(sm.scales[0], scales + g0 * ssz, D * ssz, lo, hi, threadIdx.x, kThreads);
    if (!sym) LoadToSmem(sm.zeros[0], zeros + g0 * ssz, D * ssz, lo, hi, threadIdx.x, kThreads);
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += kThreads) {
      const float scale = ReadParamStaged(sm.scales[0], d, f32);
      const float zero = sym ? 0.0f : ReadParamStaged(sm.zeros[0], d, f32);
      if (!(IsFiniteF(scale) && !(scale < 0.0f) && IsFiniteF(zero)))
        RecordError(err, kDevCorrupt, static_cast<uint32_t>(run.record), kCorCode);
    }
  }
  for (int it = 0; it < iters; ++it) {
    const int parity = it & 1;
    const int r0 = it * RPB;
    const int nrows = rows - r0 < RPB ? rows - r0 : RPB;
    if (pack)
      LoadToSmem(sm.codes[parity], coded + static_cast<int64_t>(tile.row_begin + r0) * row_bytes,
                 nrows * row_bytes, lo, hi, threadIdx.x, kThreads);
    const int64_t g0 = static_cast<int64_t>(tile.row_begin + r0) * gpr;
    if (stage_token) {
      LoadToSmem(sm.scales[parity], scales + g0 * ssz, nrows * gpr * ssz, lo, hi, threadIdx.x, kThreads);
      if (!sym) LoadToSmem(sm.zeros[parity], zeros + g0 * ssz, nrows * gpr * ssz, lo, hi, threadIdx.x, kThreads);
    }
    __syncthreads();
    const int r = r0 + r_local;
    const bool active = r < rows;
    const int t_run = tile.row_begin + (active ? r : 0);
    uint32_t codes[kLaneElems];
    if (pack) {
      UnpackLane(sm.codes[parity], (active ? r_local : 0) * row_bytes + part * 2 * b, b, codes);
    } else {
      const uint4 s = *reinterpret_cast<const uint4*>(syms + static_cast<int64_t>(t_run) * D + kLaneElems * part);
      const uint32_t w[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) codes[j] = (w[j / 4] >> (8 * (j & 3))) & 0xFFu;
    }
    float x[kLaneElems];
    bool ok = true;
    if (run.axis != 0) {
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) {
        const int d = kLaneElems * part + j;
        x[j] = DecodeValue(codes[j], ReadParamStaged(sm.scales[0], d, f32),
                           sym ? 0.0f : ReadParamStaged(sm.zeros[0], d, f32), h, sym);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) {
        const int g = (kLaneElems * part + j) / gc;
        float scale, zero = 0.0f;
        if (stage_token) {
          const int idx = (active ? r_local : 0) * gpr + g;
          scale = ReadParamStaged(sm.scales[parity], idx, f32);
          if (!sym) zero = ReadParamStaged(sm.zeros[parity], idx, f32);
        } else {
          const int64_t gi = static_cast<int64_t>(t_run) * gpr + g;
          scale = ReadParamGlobal(scales + gi * ssz, f32);
          if (!sym) zero = ReadParamGlobal(zeros + gi * ssz, f32);
        }
        ok = ok && IsFiniteF(scale) && !(scale < 0.0f) && IsFiniteF(zero);
        x[j] = DecodeValue(codes[j], scale, zero, h, sym);
      }
    }
    if (check_codes)
#pragma unroll
      for (int j = 0; j < kLaneElems; ++j) ok = ok && codes[j] < static_cast<uint32_t>(run.levels);
    if (active && !ok) RecordError(err, kDevCorrupt, static_cast<uint32_t>(run.record), kCorCode);
    const int t_rel = run.begin + t_run;
    switch (a.c.transform) {
      case 1: {  // delta: x = y + y[anchor]
        const int anchor_every = a.c.anchor == 0 ? rec.tokens : a.c.anchor;
        const int anchor = t_rel - t_rel % anchor_every;
        if (active && anchor != t_rel) {
          // The anchor's run: same head, the run containing `anchor`.
          int ri = rec.first_run;
          for (int k = rec.first_run; k < rec.first_run + rec.num_runs; ++k) {
            const RunDesc& o = a.t.runs[k];
            if (o.head == run.head && o.begin <= anchor && anchor < o.begin + o.tokens) ri = k;
          }
          const RunDesc arun = a.t.runs[ri];
          float base[kLaneElems];
          DequantRowGlobal<D>(a, arun, anchor - arun.begin, base);
#pragma unroll
          for (int j = 0; j < kLaneElems; ++j) x[j] = FAdd(x[j], base[j]);
        }
        break;
      }
      case 2:
        RowFwht<D>(x);
#pragma unroll
        for (int j = 0; j < kLaneElems; ++j) x[j] = FMul(x[j], a.c.hadamard_scale);
        FlipSigns(x, signs);
        break;
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
}

// A raw record's span of windows: pack: the record's bytes through a 1 KiB
// window per warp (XXH3 block terms + output rows); rans: the decoded data
// bytes in the workspace -> output rows.
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
  uint32_t* win = sm.win[warp];
  const uint8_t* lo = a.bytes;
  const uint8_t* hi = a.bytes + a.bytes_len;
  for (int w = span.first_window + warp; w < w_end; w += kBlockWarps) {
    const uint64_t o0 = static_cast<uint64_t>(w) * kWindowBytes;
    const uint8_t* at = a.bytes + p + o0;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(at) & ~uintptr_t{15});
    const uint32_t s = static_cast<uint32_t>(at - base);
    for (int c = lane; c < kWindowSmem / 16 - 1; c += 32) {
      uint32_t x[4];
      Load16Guarded(base + 16 * c, lo, hi, x);
      *reinterpret_cast<uint4*>(win + 4 * c) = make_uint4(x[0], x[1], x[2], x[3]);
    }
    __syncwarp();
    if (o0 / 1024 < nb) {
      uint32_t x[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = WordAt(win, s + 32 * lane + 4 * j);
      uint64_t c4[4] = {0, 0, 0, 0};
      xxh3::QuarterStripeTerms(kHashKeys, x, lane >> 1, 4 * (lane & 1), c4);
      WarpReduceBlockTerms(c4);
      if (lane < 2)
#pragma unroll
        for (int k = 0; k < 4; ++k) sums[8 * w + 4 * lane + k] = c4[k];
    }
    // Output chunks whose first byte (record offset d + 30) is in this window.
    const uint64_t d_first = o0 >= 30 ? (o0 - 30 + 15) / 16 * 16 : 0;
    const uint64_t d_stop = o0 + kWindowBytes - 30 < count ? o0 + kWindowBytes - 30 : count;
    for (uint64_t d = d_first + 16 * lane; d < d_stop; d += 512) {
      const uint32_t k = static_cast<uint32_t>(d + 30 - o0) + s;
      const uint32_t x[4] = {WordAt(win, k), WordAt(win, k + 4), WordAt(win, k + 8), WordAt(win, k + 12)};
      StoreRawChunk(a.out, rec.layer, rec.kind, rec.token_begin, rec.tokens, D, d, x);
      keep(d);
    }
    __syncwarp();
  }
}

#ifndef KVSERVE_CUDA_PRODUCE_MIN_BLOCKS
#define KVSERVE_CUDA_PRODUCE_MIN_BLOCKS 3
#endif

template <int D>
__global__ void __launch_bounds__(kThreads, KVSERVE_CUDA_PRODUCE_MIN_BLOCKS) DecodeProduceKernel(DecArgs a, int64_t span_begin, int64_t spans,
                                                                int64_t tile_begin) {
  __shared__ __align__(16) uint8_t smem[DecSmemBytes<D>()];
  if (Failed(a)) return;
  if (static_cast<int64_t>(blockIdx.x) < spans) {
    DecodeRawSpan<D>(a, a.t.raw_spans[span_begin + blockIdx.x], *reinterpret_cast<DecRawSmem*>(smem));
  } else {
    DecodeTile<D>(a, a.t.tiles[tile_begin + blockIdx.x - spans], *reinterpret_cast<DecTileSmem<D>*>(smem));
  }
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
    const uint64_t words = d.bytes_len / 4 + 1;
    const unsigned scan_blocks = static_cast<unsigned>(std::min<uint64_t>((words + 255) / 256, 132 * 8));
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
    if (spans + tiles > 0)
      KV_LAUNCH(DecodeProduceKernel<D>, static_cast<unsigned>(spans + tiles), kThreads, 0, stream)(
          a, d.range.raw_span_begin, spans, d.range.tile_begin);
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
