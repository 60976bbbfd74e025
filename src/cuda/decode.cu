// Copyright kvserve authors. Decode kernels and their launcher.
//
// Stream-ordered, for a whole frame in device memory:
//   1. LocateScanKernel       every 4-byte-aligned word: candidate record
//                             headers that name a plan slot -> slot offset
//                             (a second candidate for a slot flags ambiguity)
//   2. LocateChainKernel      the candidates must chain from the header to
//                             the end of the frame in plan order
//   3. LocateSequentialKernel only if 1-2 failed (records out of plan order,
//                             an ambiguous candidate, or corruption): the
//                             reference walk, one thread
//   4. ParseKernel            warp per record: XXH3 checksum, body layout
//                             against the plan, segment offsets
//   5. RansDecodeKernel       (rans) warp per segment: ballot + prefix
//                             popcount gives each lane its word
//   6. DecodeTilesKernel      block per tile: codes (bit-unpacked straight
//                             from the frame for pack) -> dequantise ->
//                             inverse transform -> dtype -> output view
//   7. RawDecodeKernel        raw records' bytes -> output view
// Kernels after a recorded error return at once, so a corrupt frame never
// drives reads outside the frame.
#include "cuda/common.cuh"
#include "cuda/grid.cuh"
#include "cuda/kernels.h"
#include "cuda/rows.cuh"
#include "cuda/xxh3.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kParseWarps = 4;
constexpr int kRansWarps = 4;
constexpr uint64_t kNoRecord = ~uint64_t{0};

__device__ const uint8_t kSecretBytes[192] = KVSERVE_XXH3_SECRET;

struct DecArgs {
  FrameConsts c;
  DeviceTables t;
  DeviceView out;
  const uint8_t* frame;
  uint64_t frame_bytes;
  uint64_t header_bytes;
  uint8_t* ws;
  WorkspaceLayout L;
  int64_t R;
  int64_t S;
  uint8_t* keep;
  int table_cap_bits;
};

KV_DEV uint32_t* ErrorBlock(const DecArgs& a) { return reinterpret_cast<uint32_t*>(a.ws + a.L.error); }
KV_DEV bool Failed(const DecArgs& a) {
  return *reinterpret_cast<volatile uint32_t*>(a.ws + a.L.error) != 0;
}
KV_DEV uint64_t* RecOff(const DecArgs& a) { return reinterpret_cast<uint64_t*>(a.ws + a.L.rec_off); }
KV_DEV uint64_t* RecAux(const DecArgs& a) { return reinterpret_cast<uint64_t*>(a.ws + a.L.rec_aux); }
KV_DEV uint64_t* SegOff(const DecArgs& a) { return reinterpret_cast<uint64_t*>(a.ws + a.L.seg_off); }
KV_DEV uint32_t* SegLen(const DecArgs& a) { return reinterpret_cast<uint32_t*>(a.ws + a.L.seg_len); }

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

// The slot a record header at `p` names, or -1; checks it fits the frame.
KV_DEV int64_t MatchHeader(const DecArgs& a, uint64_t p) {
  if (p + 24 > a.frame_bytes) return -1;
  const uint8_t* h = a.frame + p;
  if ((h[0] != 1 && h[0] != 2) || h[1] > 1 || h[2] != 0 || h[3] != 0) return -1;
  const int64_t idx = SlotIndex(a.c, GetU32(h + 4), h[1], h[0], GetU32(h + 8));
  if (idx < 0) return -1;
  if (GetU32(h + 12) != static_cast<uint32_t>(a.t.records[idx].tokens)) return -1;
  if (p + 24 + GetU32(h + 16) > a.frame_bytes) return -1;
  return idx;
}

__global__ void LocateScanKernel(DecArgs a) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(a.frame);
  const uint64_t nwords = a.frame_bytes / 4;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i <= nwords;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t p0 = 4 * i;
    uint32_t w0 = 0, w1 = 0;
    if (p0 + 8 <= a.frame_bytes) {
      w0 = words[i];
      w1 = words[i + 1];
    } else {
      for (int k = 0; k < 8; ++k)
        if (p0 + k < a.frame_bytes) {
          const uint32_t byte = a.frame[p0 + k];
          if (k < 4) w0 |= byte << (8 * k); else w1 |= byte << (8 * (k - 4));
        }
    }
    for (int j = 0; j < 4; ++j) {
      const uint64_t p = p0 + j;
      if (p < a.header_bytes) continue;
      const uint32_t x = __funnelshift_r(w0, w1, 8 * j);
      const uint32_t type = x & 3u;
      if ((x & 0xFFFFFEFCu) != 0 || type == 0 || type == 3) continue;
      const int64_t idx = MatchHeader(a, p);
      if (idx < 0) continue;
      const unsigned long long prev = atomicCAS(reinterpret_cast<unsigned long long*>(&RecOff(a)[idx]),
                                                static_cast<unsigned long long>(kNoRecord),
                                                static_cast<unsigned long long>(p));
      if (prev != kNoRecord) atomicOr(&ErrorBlock(a)[kErrFlags], 1u);
    }
  }
}

__global__ void LocateChainKernel(DecArgs a) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.R) return;
  const uint64_t* off = RecOff(a);
  const uint64_t p = off[r];
  bool ok = p != kNoRecord && (r != 0 || p == a.header_bytes);
  if (ok) {
    const uint64_t end = p + 24 + GetU32(a.frame + p + 16);
    const uint64_t next = r + 1 < a.R ? off[r + 1] : a.frame_bytes;
    ok = end == next;
  }
  if (!ok) atomicOr(&ErrorBlock(a)[kErrFlags], 2u);
}

// The reference walk (src/pipeline/decoder.cc): records in any order.
__global__ void LocateSequentialKernel(DecArgs a) {
  uint32_t* err = ErrorBlock(a);
  if (err[kErrFlags] == 0) return;
  uint64_t* off = RecOff(a);
  for (int64_t r = 0; r < a.R; ++r) off[r] = kNoRecord;
  uint64_t p = a.header_bytes;
  for (int64_t i = 0; i < a.R; ++i) {
    const int64_t idx = MatchHeader(a, p);
    if (idx < 0 || off[idx] != kNoRecord) {
      RecordError(err, kDevCorrupt, static_cast<uint32_t>(i), kCorLocate);
      return;
    }
    off[idx] = p;
    p += 24 + GetU32(a.frame + p + 16);
  }
  if (p != a.frame_bytes) RecordError(err, kDevCorrupt, static_cast<uint32_t>(a.R), kCorTrailing);
}

__global__ void __launch_bounds__(32 * kParseWarps) ParseKernel(DecArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kParseWarps + warp;
  if (r >= a.R || Failed(a)) return;
  uint32_t* err = ErrorBlock(a);
  const RecordDesc rec = a.t.records[r];
  const uint64_t p = RecOff(a)[r];
  const uint8_t* rp = a.frame + p;
  const uint64_t total = 20 + static_cast<uint64_t>(GetU32(rp + 16));
  const xxh3::Secret secret{kSecretBytes};
  const uint64_t hash = xxh3::WarpHash64(rp, total, secret);
  if (static_cast<uint32_t>(hash) != GetU32(rp + total)) {
    if (lane == 0) RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), kCorChecksum);
    return;
  }
  uint64_t side_pos = 0;
  uint32_t bad = 0;
  if (lane == 0) {
    uint64_t q = p + 20;
    const uint64_t end = p + total;
    uint64_t* seg_off = SegOff(a);
    uint32_t* seg_len = SegLen(a);
    auto segment = [&](int64_t s) -> uint32_t {
      const SegmentDesc seg = a.t.segments[s];
      if (q + 10 > end) return kCorSegment;
      const uint8_t* h = a.frame + q;
      const uint32_t levels = GetU16(h), count = GetU32(h + 2), len = GetU32(h + 6);
      if (levels != static_cast<uint32_t>(seg.levels) || count != static_cast<uint32_t>(seg.count))
        return kCorSegment;
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
    if (rec.type == 2) {
      bad = segment(rec.first_segment);
    } else {
      uint64_t params_pos = 0;
      if (q + 4 > end || GetU32(a.frame + q) != rec.side_bytes) bad = kCorSide;
      if (!bad) {
        side_pos = q + 4;
        q += 4 + rec.side_bytes;
        if (q + 4 > end || GetU32(a.frame + q) != rec.params_bytes) bad = kCorParams;
      }
      if (!bad) {
        params_pos = q + 4;
        q += 4 + rec.params_bytes;
        if (q + 2 > end || GetU16(a.frame + q) != rec.num_segments) bad = kCorSegment;
        q += 2;
      }
      for (int k = 0; k < rec.num_segments && !bad; ++k) bad = segment(rec.first_segment + k);
      RecAux(a)[2 * r] = side_pos;
      RecAux(a)[2 * r + 1] = params_pos;
    }
    if (!bad && q != end) bad = kCorTrailing;
  }
  bad = __shfl_sync(0xffffffffu, bad, 0);
  side_pos = __shfl_sync(0xffffffffu, side_pos, 0);
  if (bad) {
    if (lane == 0) RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), bad);
    return;
  }
  if (rec.type == 1 && rec.side_bytes > 0) {  // affine side values
    const uint32_t n = rec.side_bytes / 8;
    bool ok = true;
    for (uint32_t i = lane; i < n; i += 32) {
      const float shift = BitsFloat(GetU32(a.frame + side_pos + 4 * i));
      const float scale = BitsFloat(GetU32(a.frame + side_pos + 4 * (n + i)));
      ok = ok && IsFiniteF(shift) && IsFiniteF(scale) && scale > 0.0f;
    }
    if (!__all_sync(0xffffffffu, ok) && lane == 0)
      RecordError(err, kDevCorrupt, static_cast<uint32_t>(r), kCorSide);
  }
}

KV_DEV int FindSymbol(const uint32_t* cum, int levels, uint32_t slot) {
  int lo = 0, hi = levels - 1;  // last s with cum[s] <= slot
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cum[mid] <= slot) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(32 * kRansWarps) RansDecodeKernel(DecArgs a) {
  extern __shared__ uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t si = static_cast<int64_t>(blockIdx.x) * kRansWarps + warp;
  if (si >= a.S || Failed(a)) return;
  uint32_t* err = ErrorBlock(a);
  const uint32_t cap = 1u << a.table_cap_bits;
  uint8_t* table = smem + static_cast<size_t>(warp) * (cap + 2048);
  uint32_t* freq = reinterpret_cast<uint32_t*>(table + cap);
  uint32_t* cum = freq + 256;
  const SegmentDesc seg = a.t.segments[si];
  const uint8_t* in = a.frame + SegOff(a)[si];
  const uint32_t len = SegLen(a)[si];
  uint8_t* out = a.ws + a.L.symbols + seg.sym_ws;
  const uint64_t count = seg.count;
  const int levels = seg.levels, b = seg.bits;
  auto fail = [&](uint32_t detail) {
    if (lane == 0) RecordError(err, kDevCorrupt, static_cast<uint32_t>(seg.record), detail);
  };
  if (len < 1) return fail(kCorRansHeader);
  const uint8_t mode = in[0];
  if (mode == 1) {
    if (len != 1 + seg.packed_bytes) return fail(kCorPacked);
    const uint64_t used_bits = count * b - 8 * (seg.packed_bytes - 1);
    if (seg.packed_bytes > 0 && used_bits < 8 && (in[len - 1] >> used_bits) != 0)
      return fail(kCorPacked);
    bool ok = true;
    for (uint64_t i = lane; i < count; i += 32) {
      const uint64_t bit = i * b;
      const uint8_t* q = in + 1 + (bit >> 3);
      uint32_t v = q[0];
      if ((bit & 7) + b > 8) v |= static_cast<uint32_t>(q[1]) << 8;
      v = (v >> (bit & 7)) & ((1u << b) - 1u);
      ok = ok && v < static_cast<uint32_t>(levels);
      out[i] = static_cast<uint8_t>(v);
    }
    if (!__all_sync(0xffffffffu, ok)) fail(kCorCode);
    return;
  }
  if (mode != 0 || count == 0) return fail(kCorRansHeader);
  uint32_t header_end = 0, n = 0, hdr_bad = 0;
  if (lane == 0) {
    uint32_t q = 1;
    if (len < 3 || in[1] + 1 != levels || in[2] < 8 || in[2] > 15) {
      hdr_bad = 1;
    } else {
      n = in[2];
      q = 3;
      const uint32_t M = 1u << n;
      uint32_t sum = 0;
      for (int s = 0; s < levels && !hdr_bad; ++s) {
        uint32_t v = 0;
        bool done = false;
        for (int shift = 0; shift < 21 && !done; shift += 7) {
          if (q >= len) { hdr_bad = 1; break; }
          const uint8_t byte = in[q++];
          v |= static_cast<uint32_t>(byte & 0x7f) << shift;
          if ((byte & 0x80) == 0) {
            if (byte == 0 && shift > 0) hdr_bad = 1;
            if (v > M) hdr_bad = 1;
            done = true;
          }
        }
        if (!done) hdr_bad = 1;
        freq[s] = v;
        sum += v;
        if (sum > M) hdr_bad = 1;
      }
      if (!hdr_bad && sum != M) hdr_bad = 1;
      uint32_t c = 0;
      for (int s = 0; s < levels; ++s) {
        cum[s] = c;
        c += freq[s];
      }
    }
    header_end = q;
  }
  hdr_bad = __shfl_sync(0xffffffffu, hdr_bad, 0);
  if (hdr_bad) return fail(kCorRansHeader);
  header_end = __shfl_sync(0xffffffffu, header_end, 0);
  n = __shfl_sync(0xffffffffu, n, 0);
  __syncwarp();
  const uint32_t M = 1u << n;
  const int K = count < 32 ? static_cast<int>(count) : 32;
  if (header_end + 4u * K > len) return fail(kCorRansHeader);
  if ((len - header_end - 4u * K) % 2 != 0) return fail(kCorRansStream);
  uint32_t x = lane < K ? GetU32(in + header_end + 4 * lane) : (1u << 16);
  if (!__all_sync(0xffffffffu, x >= (1u << 16))) return fail(kCorRansHeader);
  const bool use_table = n <= static_cast<uint32_t>(a.table_cap_bits);
  if (use_table) {
    for (uint32_t j = lane; j < M; j += 32) table[j] = static_cast<uint8_t>(FindSymbol(cum, levels, j));
    __syncwarp();
  }
  uint64_t wp = header_end + 4u * K;
  const uint64_t wend = len;
  const uint32_t lt_mask = (1u << lane) - 1u;
  const uint64_t steps = (count + 31) / 32;
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t i = step * 32 + lane;
    const bool active = i < count;
    bool need = false;
    if (active) {
      const uint32_t slot = x & (M - 1);
      const int s = use_table ? table[slot] : FindSymbol(cum, levels, slot);
      x = freq[s] * (x >> n) + slot - cum[s];
      out[i] = static_cast<uint8_t>(s);
      need = x < (1u << 16);
    }
    const uint32_t mask = __ballot_sync(0xffffffffu, need);
    bool overrun = false;
    if (need) {
      const uint64_t o = wp + 2 * __popc(mask & lt_mask);
      if (o + 2 > wend) {
        overrun = true;
      } else {
        x = (x << 16) | GetU16(in + o);
      }
    }
    if (__any_sync(0xffffffffu, overrun)) return fail(kCorRansStream);
    wp += 2 * __popc(mask);
  }
  const bool final_ok = lane >= K || x == (1u << 16);
  if (wp != wend || !__all_sync(0xffffffffu, final_ok)) fail(kCorRansStream);
}

KV_DEV float ReadParam(const uint8_t* p, bool f32) {
  return f32 ? BitsFloat(GetU32(p)) : HalfBitsToFloat(static_cast<uint16_t>(GetU16(p)));
}

// Dequantised values of this lane's channels of row t_run of `run`.
template <int E>
KV_DEV void DequantRow(const DecArgs& a, const RunDesc& run, int t_run, float y[E]) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31;
  if (run.levels == 0) {
#pragma unroll
    for (int j = 0; j < E; ++j) y[j] = 0.0f;
    return;
  }
  uint32_t codes[E];
  const SegmentDesc seg = a.t.segments[run.segment];
  if (a.c.codec == 0) {
    const uint8_t* coded = a.frame + SegOff(a)[run.segment];
    UnpackLane<E>(coded, (static_cast<uint64_t>(t_run) * D + lane * E) * run.bits, run.bits, codes);
  } else {
    const uint8_t* p = a.ws + a.L.symbols + seg.sym_ws + static_cast<int64_t>(t_run) * D + lane * E;
#pragma unroll
    for (int j = 0; j < E; ++j) codes[j] = p[j];
  }
  const bool f32 = a.c.scale_f32 != 0, sym = a.c.symmetric != 0;
  const int ssz = f32 ? 4 : 2;
  const uint8_t* scales = a.frame + RecAux(a)[2 * run.record + 1] + run.params_rel;
  const uint8_t* zeros = scales + static_cast<int64_t>(run.ngroups) * ssz;
  const float h = FMul(static_cast<float>(run.levels - 1), 0.5f);
  bool ok = true;
#pragma unroll
  for (int j = 0; j < E; ++j) {
    const int d = lane * E + j;
    const int64_t gi = run.axis == 0
                           ? static_cast<int64_t>(t_run) * (D / run.group) + d / run.group
                           : static_cast<int64_t>(t_run / run.group) * D + d;
    const float scale = ReadParam(scales + gi * ssz, f32);
    const float zero = sym ? 0.0f : ReadParam(zeros + gi * ssz, f32);
    ok = ok && codes[j] < static_cast<uint32_t>(run.levels) && IsFiniteF(scale) && !(scale < 0.0f) &&
         IsFiniteF(zero);
    y[j] = DecodeValue(codes[j], scale, zero, h, sym);
  }
  if (!ok) RecordError(ErrorBlock(a), kDevCorrupt, static_cast<uint32_t>(run.record), kCorCode);
}

template <int E>
__global__ void __launch_bounds__(256) DecodeTilesKernel(DecArgs a) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (Failed(a)) return;
  const TileDesc tile = a.t.tiles[blockIdx.x];
  const RunDesc run = a.t.runs[tile.run];
  const RecordDesc rec = a.t.records[run.record];
  uint32_t signs = 0;
  if (a.c.transform == 2) {
    const uint64_t* words =
        a.t.sign_words + ((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + run.head) *
                             a.c.sign_words;
    signs = SignBitsOfLane<E>(words);
  }
  for (int r = tile.row_begin + warp; r < tile.row_end; r += kWarps) {
    const int t_rel = run.begin + r;
    float x[E];
    if (run.levels == 0) {
#pragma unroll
      for (int j = 0; j < E; ++j) x[j] = 0.0f;
    } else {
      DequantRow<E>(a, run, r, x);
      switch (a.c.transform) {
        case 1: {  // delta: x = y + y[anchor]
          const int anchor_every = a.c.anchor == 0 ? rec.tokens : a.c.anchor;
          const int anchor = t_rel - t_rel % anchor_every;
          if (anchor != t_rel) {
            // The anchor's run: same head, the run containing `anchor`.
            int ri = rec.first_run;
            for (int k = rec.first_run; k < rec.first_run + rec.num_runs; ++k) {
              const RunDesc& o = a.t.runs[k];
              if (o.head == run.head && o.begin <= anchor && anchor < o.begin + o.tokens) ri = k;
            }
            const RunDesc arun = a.t.runs[ri];
            float base[E];
            DequantRow<E>(a, arun, anchor - arun.begin, base);
#pragma unroll
            for (int j = 0; j < E; ++j) x[j] = FAdd(x[j], base[j]);
          }
          break;
        }
        case 2:
          WarpFwht<E>(x);
#pragma unroll
          for (int j = 0; j < E; ++j) x[j] = FMul(x[j], a.c.hadamard_scale);
          FlipSigns<E>(x, signs);
          break;
        case 3: {
          const uint8_t* side = a.frame + RecAux(a)[2 * run.record];
          const int H = a.c.kv_heads;
#pragma unroll
          for (int j = 0; j < E; ++j) {
            const int d = lane * E + j;
            const float shift = BitsFloat(GetU32(side + 4 * (run.head * D + d)));
            const float scale = BitsFloat(GetU32(side + 4 * (H * D + run.head * D + d)));
            x[j] = FAdd(FMul(x[j], scale), shift);
          }
          break;
        }
        default:
          break;
      }
    }
    StoreRow<E>(a.out, rec.layer, rec.kind, run.head, rec.token_begin + t_rel, x);
    if (a.keep != nullptr && lane == 0)
      a.keep[((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + run.head) * a.c.tokens +
             rec.token_begin + t_rel] = run.levels == 0 ? 0 : 1;
  }
}

template <int E>
__global__ void __launch_bounds__(256) RawDecodeKernel(DecArgs a) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (Failed(a)) return;
  const TileDesc tile = a.t.raw_tiles[blockIdx.x];
  const RecordDesc rec = a.t.records[tile.run];
  const SegmentDesc seg = a.t.segments[rec.first_segment];
  const int es = a.out.elem_bytes;
  const uint8_t* base = a.c.codec == 0 ? a.frame + SegOff(a)[rec.first_segment]
                                       : a.ws + a.L.symbols + seg.sym_ws;
  for (int r = tile.row_begin + warp; r < tile.row_end; r += kWarps) {
    const uint8_t* src = base + ((static_cast<int64_t>(tile.head) * rec.tokens + r) * D + lane * E) * es;
    const int64_t row = RowElemOffset(a.out, rec.layer, rec.kind, tile.head, rec.token_begin + r);
    for (int j = 0; j < E; ++j) {
      uint8_t* dst = a.out.data + (row + (static_cast<int64_t>(lane) * E + j) * a.out.dim) * es;
      if (es == 4) {
        *reinterpret_cast<uint32_t*>(dst) = GetU32(src + 4 * j);
      } else {
        *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(GetU16(src + 2 * j));
      }
    }
    if (a.keep != nullptr && lane == 0)
      a.keep[((static_cast<int64_t>(rec.layer) * 2 + rec.kind) * a.c.kv_heads + tile.head) * a.c.tokens +
             rec.token_begin + r] = 1;
  }
}

#ifndef KVSERVE_SIM  // host simulation of the kernels (tests of the kernel logic) stops here
unsigned Blocks(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

Status LaunchDecode(const DecodeLaunch& d, const DeviceView& out, CUstream_st* stream) {
  DecArgs a;
  a.c = d.consts;
  a.t = d.tables;
  a.out = out;
  a.frame = d.frame;
  a.frame_bytes = d.frame_bytes;
  a.header_bytes = d.header_bytes;
  a.ws = d.workspace;
  a.L = *d.layout;
  a.R = d.num_records;
  a.S = d.num_segments;
  a.keep = d.keep_mask;
  a.table_cap_bits = d.consts.table_bits;
  if (cudaMemsetAsync(a.ws + a.L.error, 0, 64, stream) != cudaSuccess ||
      cudaMemsetAsync(a.ws + a.L.rec_off, 0xFF, 8 * a.R, stream) != cudaSuccess)
    return LaunchStatus("decode: reset");
  const uint64_t words = d.frame_bytes / 4 + 1;
  const unsigned scan_blocks = static_cast<unsigned>(std::min<uint64_t>((words + 255) / 256, 132 * 16));
  LocateScanKernel<<<scan_blocks, 256, 0, stream>>>(a);
  LocateChainKernel<<<Blocks(a.R, 256), 256, 0, stream>>>(a);
  LocateSequentialKernel<<<1, 1, 0, stream>>>(a);
  KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: locate"));
  ParseKernel<<<Blocks(a.R, kParseWarps), 32 * kParseWarps, 0, stream>>>(a);
  KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: parse"));
  if (a.c.codec == 1 && a.S > 0) {
    const size_t smem = static_cast<size_t>(kRansWarps) * ((size_t{1} << a.table_cap_bits) + 2048);
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(RansDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)) != cudaSuccess)
      return LaunchStatus("decode: rans smem");
    RansDecodeKernel<<<Blocks(a.S, kRansWarps), 32 * kRansWarps, smem, stream>>>(a);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: rans"));
  }
  return KVSERVE_DISPATCH_HEAD_DIM(a.c.head_dim, E, [&] {
    if (d.num_tiles > 0) DecodeTilesKernel<E><<<static_cast<unsigned>(d.num_tiles), 256, 0, stream>>>(a);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("decode: tiles"));
    if (d.num_raw_tiles > 0)
      RawDecodeKernel<E><<<static_cast<unsigned>(d.num_raw_tiles), 256, 0, stream>>>(a);
    return LaunchStatus("decode: raw");
  });
}

#else
}  // namespace
#endif  // KVSERVE_SIM

}  // namespace kvserve::cuda
