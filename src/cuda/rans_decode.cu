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

constexpr size_t kRingBytes = WarpRing<true>::kSlots * WarpRing<true>::kSlotBytes;

// Shared-memory bytes per warp for a table capacity of `cap_bits`: a byte of
// symbol per slot, frequencies and cumulatives, the stream ring.
KV_HD size_t WarpSmemBytes(int cap_bits) { return (size_t{1} << cap_bits) + 2048 + kRingBytes; }

__global__ void __launch_bounds__(32 * kRansWarps) RansDecodeKernel(DecArgs a, int cap_bits) {
  KV_DYNAMIC_SMEM(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t si = a.sb + static_cast<int64_t>(blockIdx.x) * kRansWarps + warp;
  if (si >= a.se || Failed(a.ws, a.L)) return;
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
  uint8_t* symtab = mine;
  if (table_kind == 1) {
    for (uint32_t j = lane; j < M; j += 32) symtab[j] = static_cast<uint8_t>(FindSymbol(cum, levels, j));
    __syncwarp();
  }
  uint32_t c1 = 0xFFFFFFFFu, c2 = 0xFFFFFFFFu, c3 = 0xFFFFFFFFu, f0 = 0, f1 = 0, f2 = 0, f3 = 0;
  if (table_kind == 2) {
    f0 = freq[0];
    f1 = levels > 1 ? freq[1] : 0;
    f2 = levels > 2 ? freq[2] : 0;
    f3 = levels > 3 ? freq[3] : 0;
    c1 = levels > 1 ? cum[1] : 0xFFFFFFFFu;
    c2 = levels > 2 ? cum[2] : 0xFFFFFFFFu;
    c3 = levels > 3 ? cum[3] : 0xFFFFFFFFu;
  }
  uint64_t wp = header_end + 4u * K;
  const uint64_t wend = len;
  const uint32_t lt_mask = (1u << lane) - 1u;
  const uint64_t steps = (count + 31) / 32;
  // The renormalisation words come through the shared-memory ring.
  WarpRing<true> ring{ring_slots};
  ring.Start(reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(in + wp) & ~uintptr_t{15}), a.bytes, in + len);
  for (uint64_t step = 0; step < steps; ++step) {
    ring.Ensure(in + wp + 63);
    const uint64_t i = step * 32 + lane;
    const bool active = i < count;
    bool need = false;
    if (active) {
      const uint32_t slot = x & (M - 1);
      uint32_t s, f, bias;
      if (table_kind == 2) {
        const bool g1 = slot >= c1, g2 = slot >= c2, g3 = slot >= c3;
        s = static_cast<uint32_t>(g1) + g2 + g3;
        f = g3 ? f3 : g2 ? f2 : g1 ? f1 : f0;
        bias = slot - (g3 ? c3 : g2 ? c2 : g1 ? c1 : 0u);
      } else {
        s = table_kind == 1 ? symtab[slot] : static_cast<uint32_t>(FindSymbol(cum, levels, slot));
        f = freq[s];
        bias = slot - cum[s];
      }
      x = f * (x >> n) + bias;
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
        x = (x << 16) | ring.Byte(in + o) | (ring.Byte(in + o + 1) << 8);
      }
    }
    if (__any_sync(0xffffffffu, overrun)) {
      CpAsyncWait<0>();
      return fail(kCorRansStream);
    }
    wp += 2 * __popc(mask);
  }
  CpAsyncWait<0>();
  const bool final_ok = lane >= K || x == (1u << 16);
  if (wp != wend || !__all_sync(0xffffffffu, final_ok)) fail(kCorRansStream);
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
  KV_LAUNCH(RansDecodeKernel, static_cast<unsigned>((S + kRansWarps - 1) / kRansWarps), 32 * kRansWarps, smem, stream)(
      a, cap_bits);
  return LaunchStatus("decode: rans");
}

}  // namespace kvserve::cuda
