// Copyright kvserve authors. The rANS stage of the CUDA decoder (format.md
// §6.2): warp per segment, the 32 interleaved states in the 32 lanes. The
// symbol of a slot comes from registers for alphabets of up to 4 symbols
// (three compares against the cumulative frequencies: kivi-2's codes), else
// from a shared-memory table of a byte per slot, with frequency and
// cumulative looked up; small tables keep many warps per SM. The words come
// through a read-ahead ring in shared memory. Lanes that must read a
// renormalisation word find their word by ballot and prefix popcount.
#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/launch_args.cuh"
#include "cuda/rows.cuh"

namespace kvserve::cuda {
namespace {

constexpr int kRansWarps = 4;

KV_DEV int FindSymbol(const uint32_t* cum, int levels, uint32_t slot) {
  int lo = 0, hi = levels - 1;  // last s with cum[s] <= slot
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cum[mid] <= slot) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The symbol of a slot with its frequency and cumulative frequency packed
// as f | cum << 16: kind 2 from registers (at most 4 symbols: three
// compares and a balanced select), kind 1 from the byte-per-slot table,
// kind 0 by binary search.
struct SymbolLookup {
  const uint8_t* symtab;
  const uint32_t* fc;   // f | cum << 16 per symbol
  const uint32_t* cum;
  int levels;
  uint32_t r[4];        // kind 2: f | cum << 16 of symbols 0..3
  uint32_t c1, c2, c3;  // kind 2: cum of symbols 1..3 (all ones past levels)
  template <int kKind>
  KV_DEV uint32_t Find(uint32_t slot, uint32_t* fcv) const {
    if constexpr (kKind == 2) {
      const bool g1 = slot >= c1, g2 = slot >= c2, g3 = slot >= c3;  // g3 => g2 => g1
      *fcv = g2 ? (g3 ? r[3] : r[2]) : (g1 ? r[1] : r[0]);
      return (g1 ? 1u : 0u) + (g2 ? 1u : 0u) + (g3 ? 1u : 0u);
    } else {
      const uint32_t s = kKind == 1 ? symtab[slot] : static_cast<uint32_t>(FindSymbol(cum, levels, slot));
      *fcv = fc[s];
      return s;
    }
  }
};

struct RansDecodeState {
  uint32_t x;       // this lane's state
  uint32_t wofs;    // offset of the next word from the ring's base
  uint32_t n;       // table bits
  uint32_t lt;      // lanes below this one
};

// The 16-bit word at ring offset o (even when !kOdd), wrapping at the
// ring's 4 KiB.
template <bool kOdd>
KV_DEV uint32_t RingWord(const uint8_t* ring, uint32_t o) {
  const uint16_t* r16 = reinterpret_cast<const uint16_t*>(ring);
  if constexpr (kOdd) {
    return (r16[(o >> 1) & 2047u] >> 8) | ((r16[((o >> 1) + 1) & 2047u] & 0xFFu) << 8);
  } else {
    return r16[(o >> 1) & 2047u];
  }
}

// One decode step of a lane's symbol `out`: the symbol out of the state,
// the state update, and a renormalisation word (kChecked: only inside the
// stream). Every lane reads a word, the lanes that need one keep it (no
// branch). Returns false when a lane would read past the stream's end.
template <int kKind, bool kChecked, bool kOdd>
KV_DEV bool DecodeStep(RansDecodeState& st, const SymbolLookup& look, const uint8_t* ring, uint32_t wend,
                       uint8_t* out, bool active) {
  bool need = false;
  if (active) {
    const uint32_t slot = st.x & ((1u << st.n) - 1u);
    uint32_t fcv;
    const uint32_t s = look.Find<kKind>(slot, &fcv);
    st.x = (fcv & 0xFFFFu) * (st.x >> st.n) + slot - (fcv >> 16);
    *out = static_cast<uint8_t>(s);
    need = st.x < (1u << 16);
  }
  const uint32_t mask = __ballot_sync(0xffffffffu, need);
  const uint32_t o = st.wofs + 2 * __popc(mask & st.lt);
  if (kChecked && need && o + 2 > wend) return false;
  const uint32_t word = RingWord<kOdd>(ring, o);
  st.x = need ? (st.x << 16) | word : st.x;
  st.wofs += 2 * __popc(mask);
  return true;
}

// Decodes a segment's `count` symbols into out[0, count): groups of 8 full
// steps without bounds checks while the stream has 512 bytes left (8 steps
// read at most 8 * 32 words), then checked steps.
template <int kKind, bool kOdd>
KV_DEV bool DecodeSymbols(RansDecodeState& st, const SymbolLookup& look, WarpRing<true>& ring,
                          const uint8_t* ring_base, uint32_t wend, uint8_t* out, uint64_t count) {
  const int lane = threadIdx.x & 31;
  static_assert(WarpRing<true>::kSlots * WarpRing<true>::kSlotBytes == 4096, "ring offsets wrap at 4 KiB");
  const uint64_t full_steps = count / 32, steps = (count + 31) / 32;
  uint64_t step = 0;
  uint8_t* o = out + lane;
  for (; step + 8 <= full_steps && st.wofs + 512 <= wend; step += 8, o += 256) {
    ring.Ensure(ring_base + st.wofs + 511);
#pragma unroll
    for (int t = 0; t < 8; ++t) DecodeStep<kKind, false, kOdd>(st, look, ring.slots, wend, o + 32 * t, true);
  }
  bool ok = true;
  for (; step < steps; ++step, o += 32) {
    ring.Ensure(ring_base + st.wofs + 63);
    ok = DecodeStep<kKind, true, kOdd>(st, look, ring.slots, wend, o, step * 32 + lane < count);
    if (__any_sync(0xffffffffu, !ok)) return false;
  }
  return true;
}

template <int kKind>
KV_DEV bool DecodeSymbols(RansDecodeState& st, const SymbolLookup& look, WarpRing<true>& ring,
                          const uint8_t* ring_base, uint32_t wend, uint8_t* out, uint64_t count) {
  return (st.wofs & 1u) ? DecodeSymbols<kKind, true>(st, look, ring, ring_base, wend, out, count)
                        : DecodeSymbols<kKind, false>(st, look, ring, ring_base, wend, out, count);
}

constexpr size_t kRingBytes = WarpRing<true>::kSlots * WarpRing<true>::kSlotBytes;

// Shared-memory bytes per warp for a table capacity of `cap_bits`: a byte of
// symbol per slot, frequencies and cumulatives, the stream ring.
KV_HD size_t WarpSmemBytes(int cap_bits) { return (size_t{1} << cap_bits) + 2048 + kRingBytes; }

// Warp i of the launch decodes segment segment_order[order_base + a.sb + i]
// (Plan::segment_order: longest first).
__global__ void __launch_bounds__(32 * kRansWarps) RansDecodeKernel(DecArgs a, int cap_bits, int64_t order_base) {
  KV_DYNAMIC_SMEM(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i = a.sb + static_cast<int64_t>(blockIdx.x) * kRansWarps + warp;
  if (i >= a.se || Failed(a.ws, a.L)) return;
  const int64_t si = a.t.segment_order[order_base + i];
  uint32_t* err = ErrorBlock(a.ws, a.L);
  uint8_t* mine = smem + static_cast<size_t>(warp) * WarpSmemBytes(cap_bits);
  uint32_t* freq = reinterpret_cast<uint32_t*>(mine + (WarpSmemBytes(cap_bits) - 2048 - kRingBytes));
  uint32_t* cum = freq + 256;
  uint8_t* ring_slots = mine + (WarpSmemBytes(cap_bits) - kRingBytes);
  const SegmentDesc seg = a.t.segments[si];
  const uint8_t* in = a.bytes + SegOff(a.ws, a.L)[si];
  const uint32_t len = SegLen(a.ws, a.L)[si];
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
    if (seg.packed_bytes > 0 && used_bits < 8 && (in[len - 1] >> used_bits) != 0) return fail(kCorPacked);
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
          if (q >= len) {
            hdr_bad = 1;
            break;
          }
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
  // 2: at most 4 symbols, searched in registers; 1: byte symbol table;
  // 0: binary search (a table wider than the profile's).
  const int table_kind = levels <= 4 ? 2 : n <= static_cast<uint32_t>(cap_bits) ? 1 : 0;
  SymbolLookup look{};
  look.symtab = mine;
  look.fc = freq;
  look.cum = cum;
  look.levels = levels;
  if (table_kind == 1) {
    for (uint32_t j = lane; j < M; j += 32) mine[j] = static_cast<uint8_t>(FindSymbol(cum, levels, j));
  }
  if (table_kind == 2) {
    for (int s = 0; s < 4; ++s) look.r[s] = s < levels ? (freq[s] | cum[s] << 16) : 0u;
    look.c1 = levels > 1 ? cum[1] : 0xFFFFFFFFu;
    look.c2 = levels > 2 ? cum[2] : 0xFFFFFFFFu;
    look.c3 = levels > 3 ? cum[3] : 0xFFFFFFFFu;
  }
  __syncwarp();
  // freq[s] becomes f | cum << 16 (f <= M <= 2^15), one load per symbol.
  for (int s = lane; s < levels; s += 32) freq[s] |= cum[s] << 16;
  __syncwarp();
  const uint64_t wp0 = header_end + 4u * K;
  // The renormalisation words come through the shared-memory ring; offsets
  // below count from its base (a segment is below 4 GiB).
  const uint8_t* ring_base =
      reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(in + wp0) & ~uintptr_t{15});
  WarpRing<true> ring{ring_slots};
  ring.Start(ring_base, a.bytes, in + len);
  RansDecodeState st{x, static_cast<uint32_t>(in + wp0 - ring_base), n, (1u << lane) - 1u};
  const uint32_t wend = static_cast<uint32_t>(in + len - ring_base);
  bool ok = true;
  switch (table_kind) {
    case 2: ok = DecodeSymbols<2>(st, look, ring, ring_base, wend, out, count); break;
    case 1: ok = DecodeSymbols<1>(st, look, ring, ring_base, wend, out, count); break;
    default: ok = DecodeSymbols<0>(st, look, ring, ring_base, wend, out, count); break;
  }
  CpAsyncWait<0>();
  if (!ok) return fail(kCorRansStream);
  const bool final_ok = lane >= K || st.x == (1u << 16);
  if (st.wofs != wend || !__all_sync(0xffffffffu, final_ok)) fail(kCorRansStream);
}

}  // namespace

Status LaunchRansDecode(const DecodeLaunch& d, CUstream_st* stream) {
  DecArgs a{};
  a.c = d.consts;
  a.t = d.tables;
  a.bytes = d.bytes;
  a.bytes_len = d.bytes_len;
  a.records_start = d.records_start;
  a.ws = d.workspace;
  a.L = *d.layout;
  a.rb = d.range.record_begin;
  a.re = d.range.record_end;
  a.sb = d.range.segment_begin;
  a.se = d.range.segment_end;
  const int64_t S = a.se - a.sb;
  if (S <= 0) return Status::Ok();
  const int cap_bits = d.consts.table_bits;
  const size_t smem = static_cast<size_t>(kRansWarps) * WarpSmemBytes(cap_bits);
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(RansDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
          cudaSuccess)
    return LaunchStatus("decode: rans smem");
  const int64_t order_base = d.range.layer < 0 ? a.se : 0;  // whole frame: entries [S, 2 S)
  KV_LAUNCH(RansDecodeKernel, static_cast<unsigned>((S + kRansWarps - 1) / kRansWarps), 32 * kRansWarps, smem, stream)(
      a, cap_bits, order_base);
  return LaunchStatus("decode: rans");
}

}  // namespace kvserve::cuda
