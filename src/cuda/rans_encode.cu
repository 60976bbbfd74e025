// Copyright kvserve authors. The rANS stage of the CUDA encoder (format.md
// §6.2): warp per segment, the format's 32 interleaved states in the 32
// lanes. The symbol counts come from the kernel that produced the symbols
// (encode.cu), so this kernel reads each symbol once: normalise the counts
// (NormalizeFrequencies of src/codecs/rans.cc), build a shared-memory table
// of coding entries per symbol (MakeEncodeEntry), and code in reverse with
// division by multiplication (q = (umulhi(x, m) + x) >> s, exact for every
// 32-bit x). The symbols come through a shared-memory ring a 1 KiB piece (32
// steps) at a time, so the step itself is 32-bit arithmetic on a table entry
// and a state; the 16-bit words are stored as aligned u16 backwards from the
// end of the segment's slot (the plan aligns slot ends to 16 bytes).
#include "cuda/bytes.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_args.cuh"
#include "cuda/rans_magic.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kRansWarps = 4;  // warps (segments) per block

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

// A symbol's coding entry: x = the largest state that codes without
// emitting a word first (f * 2^(32 - n) - 1, all ones when f = M); y and w's
// low byte = the multiplier and shift of f's reciprocal (rans_magic.cuh);
// z = cum; w >> 8 = M - f.
KV_DEV uint4 MakeEncodeEntry(uint32_t f, uint32_t cum, int n) {
  const RansDivisor dv = MakeRansDivisor(f == 0 ? 1u : f);
  const uint64_t limit = static_cast<uint64_t>(f) << (32 - n);
  const uint32_t xmax = limit == 0 ? 0u : limit > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(limit - 1);
  return make_uint4(xmax, dv.magic, cum, dv.shift | (((1u << n) - f) << 8));
}

// One rANS coding step on a renormalised state x (x <= e.x):
// floor(x / f) * M + x mod f + cum, computed as x + q (M - f) + cum with
// q = floor(x / f) = (umulhi(x, magic) + x) >> shift (33-bit sum; the
// funnel shift takes the shift modulo 32, so w's upper bits do not reach it).
KV_DEV uint32_t EncodeState(uint32_t x, uint4 e) {
  const uint64_t sum = static_cast<uint64_t>(__umulhi(x, e.y)) + x;
  const uint32_t q = __funnelshift_r(static_cast<uint32_t>(sum), static_cast<uint32_t>(sum >> 32), e.w);
  return x + q * (e.w >> 8) + e.z;
}

struct RansEncSmem {
  uint4 table[kRansWarps][256];  // freq, cum, reciprocal, shift
  uint32_t freq[kRansWarps][256];
  __align__(16) uint8_t ring[kRansWarps][WarpRing<false>::kSlots * WarpRing<false>::kSlotBytes];
};

// Warp i of the launch codes segment segment_order[order_base + seg_begin + i]
// (Plan::segment_order: longest first).
__global__ void __launch_bounds__(32 * kRansWarps) RansEncodeKernel(EncArgs a, int64_t seg_begin,
                                                                    int64_t seg_end, int64_t order_base) {
  __shared__ RansEncSmem sm;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i = seg_begin + static_cast<int64_t>(blockIdx.x) * kRansWarps + warp;
  if (i >= seg_end) return;
  const int64_t si = a.t.segment_order[order_base + i];
  const SegmentDesc seg = a.t.segments[si];
  const uint64_t count = seg.count;
  const int levels = seg.levels, b = seg.bits, n = a.c.table_bits;
  const uint32_t M = 1u << n;
  const uint8_t* sym = a.ws + a.L.symbols + seg.sym_ws;
  uint8_t* slot = a.ws + a.L.slots + seg.slot_ws;
  const uint64_t cap = 1 + seg.packed_bytes;
  const uint32_t* hist = SegHist(a.ws, a.L, seg);
  uint32_t* freq = sm.freq[warp];
  uint4* table = sm.table[warp];
  uint32_t* seg_len = SegLen(a.ws, a.L);
  uint64_t* seg_off = SegOff(a.ws, a.L);

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
  // Cumulative frequencies (warp scan over chunks of 32 symbols) and the
  // per-symbol coding table.
  uint32_t carry = 0;
  for (int s0 = 0; s0 < levels; s0 += 32) {
    const int s = s0 + lane;
    const uint32_t f = s < levels ? freq[s] : 0u;
    uint32_t incl = f;
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t o = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += o;
    }
    if (s < levels) {
      table[s] = MakeEncodeEntry(f, carry + incl - f, n);
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  __syncwarp();

  // Encode in reverse; lane l codes symbols k = 32 * step + l. The CPU
  // emits words for k descending, so within a step higher lanes go first;
  // the stream is the reverse of the emission order, so emission e lands at
  // word capw - 1 - e of `wlo` (slot byte cap - 2 (e + 1)) and the stream
  // ends at the slot's end (16-byte aligned: the plan's SlotStart).
  uint32_t x = 1u << 16;
  uint32_t words = 0;  // segments hold < 2^32 symbols
  const uint32_t above = lane == 31 ? 0u : ~0u << (lane + 1);
  const uint32_t capw = static_cast<uint32_t>(cap / 2);
  uint16_t* const wlo = reinterpret_cast<uint16_t*>(slot + cap) - capw;
  auto step = [&](uint32_t s, bool active) {
    const uint4 e = table[s];
    const bool emit = active && x > e.x;
    const uint32_t mask = __ballot_sync(0xffffffffu, emit);
    if (emit) {
      const uint32_t idx = words + __popc(mask & above);
      if (idx < capw) wlo[capw - 1 - idx] = static_cast<uint16_t>(x);
      x >>= 16;
    }
    words += __popc(mask);
    if (active) x = EncodeState(x, e);
  };
  // The symbols come through a backward shared-memory ring of 1 KiB pieces
  // from the end: piece j holds symbols [k0, k0 + 1024), k0 = 1024 (P - 1 - j),
  // 32 steps; only the first piece has inactive lanes.
  const uint64_t pieces = (count + 1023) / 1024;
  WarpRing<false> ring{sm.ring[warp]};
  ring.Start(sym + pieces * 1024, sym, sym + count);
  for (uint64_t j = 0; j < pieces; ++j) {
    const uint64_t k0 = (pieces - 1 - j) * 1024;
    ring.Ensure(sym + k0);
    const uint8_t* pb = ring.slots + (j & 3) * WarpRing<false>::kSlotBytes + lane;
    if (j == 0) {
      const uint32_t live = static_cast<uint32_t>(count - k0);  // symbols in this piece, 1..1024
      for (int t = static_cast<int>((live - 1) / 32); t >= 0; --t) {
        const bool active = 32u * t + lane < live;
        step(active ? pb[32 * t] : 0u, active);
      }
    } else {
#pragma unroll 8
      for (int t = 31; t >= 0; --t) step(pb[32 * t], true);
    }
  }
  CpAsyncWait<0>();
  const int K = count < 32 ? static_cast<int>(count) : 32;
  uint32_t vbytes = 0;
  for (int s = lane; s < levels; s += 32) vbytes += VarintBytes(freq[s]);
  for (int off = 16; off > 0; off >>= 1) vbytes += __shfl_xor_sync(0xffffffffu, vbytes, off);
  const uint64_t rans_size = 3 + vbytes + 4ull * K + 2ull * words;
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

}  // namespace

Status LaunchRansEncode(const EncodeLaunch& e, const PlanRange& range, CUstream_st* stream) {
  EncArgs a{};
  a.c = e.consts;
  a.t = e.tables;
  a.ws = e.workspace;
  a.frame = e.frame;
  a.frame_cap = e.frame_capacity;
  a.L = *e.layout;
  a.direct = 0;
  const int64_t segments = range.segment_end - range.segment_begin;
  if (segments <= 0) return Status::Ok();
  const int64_t order_base = range.layer < 0 ? range.segment_end : 0;  // whole frame: entries [S, 2 S)
  KV_LAUNCH(RansEncodeKernel, static_cast<unsigned>((segments + kRansWarps - 1) / kRansWarps), 32 * kRansWarps, 0,
            stream)(a, range.segment_begin, range.segment_end, order_base);
  return LaunchStatus("encode: rans");
}

}  // namespace kvserve::cuda
