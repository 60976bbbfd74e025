// Copyright kvserve authors. The argument blocks every encode / decode kernel
// takes by value, and accessors of the workspace regions (plan.h's
// WorkspaceLayout). Internal to the .cu files.
#ifndef KVSERVE_CUDA_LAUNCH_ARGS_CUH_
#define KVSERVE_CUDA_LAUNCH_ARGS_CUH_

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "cuda/rows.cuh"

namespace kvserve::cuda {

inline constexpr uint64_t kNoRecord = ~uint64_t{0};

struct EncArgs {
  FrameConsts c;
  DeviceTables t;
  DeviceView src;
  uint8_t* ws;
  uint8_t* frame;
  uint64_t frame_cap;
  WorkspaceLayout L;
  int direct;
};

struct DecArgs {
  FrameConsts c;
  DeviceTables t;
  DeviceView out;
  const uint8_t* bytes;      // the records (a frame, or one layer's records)
  uint64_t bytes_len;
  uint64_t records_start;    // where records begin in `bytes`
  int64_t static_base;       // static frame offset of bytes[0]
  uint8_t* ws;
  WorkspaceLayout L;
  int64_t rb, re;            // record range
  int64_t sb, se;            // segment range
  int static_sizes;
  uint8_t* keep;
};

// The encode kernels' arguments for launch `e` reading `src`.
inline EncArgs MakeEncArgs(const EncodeLaunch& e, const DeviceView& src) {
  EncArgs a;
  a.c = e.consts;
  a.t = e.tables;
  a.src = src;
  a.ws = e.workspace;
  a.frame = e.frame;
  a.frame_cap = e.frame_capacity;
  a.L = *e.layout;
  a.direct = e.direct ? 1 : 0;
  return a;
}

KV_DEV uint32_t* ErrorBlock(uint8_t* ws, const WorkspaceLayout& L) {
  return reinterpret_cast<uint32_t*>(ws + L.error);
}
KV_DEV bool Failed(const uint8_t* ws, const WorkspaceLayout& L) {
  return *reinterpret_cast<const volatile uint32_t*>(ws + L.error) != 0;
}
// The encoder's running frame size (rans), after the 4 error words.
KV_HD uint64_t* RunningTotal(uint8_t* ws, const WorkspaceLayout& L) {
  return reinterpret_cast<uint64_t*>(ws + L.error + 32);
}
KV_DEV uint64_t* RecOff(uint8_t* ws, const WorkspaceLayout& L) { return reinterpret_cast<uint64_t*>(ws + L.rec_off); }
KV_DEV uint64_t* RecAux(uint8_t* ws, const WorkspaceLayout& L) { return reinterpret_cast<uint64_t*>(ws + L.rec_aux); }
KV_DEV uint64_t* SegOff(uint8_t* ws, const WorkspaceLayout& L) { return reinterpret_cast<uint64_t*>(ws + L.seg_off); }
KV_DEV uint32_t* SegLen(uint8_t* ws, const WorkspaceLayout& L) { return reinterpret_cast<uint32_t*>(ws + L.seg_len); }
// Per-segment symbol histograms (rans encode), `levels` u32 each.
KV_DEV uint32_t* SegHist(uint8_t* ws, const WorkspaceLayout& L, const SegmentDesc& seg) {
  return reinterpret_cast<uint32_t*>(ws + L.hist + seg.hist_ws);
}

// The keep-mask entry of row (layer, kind, head, token), when there is a mask.
KV_DEV void KeepMask(const DecArgs& a, int layer, int kind, int head, int token, uint8_t v) {
  if (a.keep != nullptr)
    a.keep[((static_cast<int64_t>(layer) * 2 + kind) * a.c.kv_heads + head) * a.c.tokens + token] = v;
}

// A scale or zero point (f32, or f16 bits) at any alignment, widened.
KV_DEV float ReadParamGlobal(const uint8_t* p, bool f32) {
  return f32 ? BitsFloat(GetU32(p)) : HalfBitsToFloat(static_cast<uint16_t>(GetU16(p)));
}

// The first 30 bytes of a raw record (record header and segment header,
// format.md §5): byte `o` of them.
KV_DEV uint32_t RawHeaderByte(const RecordDesc& rec, uint64_t count, int o) {
  uint32_t v;
  int k;
  if (o < 4) {
    return o == 0 ? 2u : o == 1 ? rec.kind : 0u;
  } else if (o < 20) {
    k = (o - 4) / 4;
    v = k == 0 ? static_cast<uint32_t>(rec.layer)
      : k == 1 ? static_cast<uint32_t>(rec.token_begin)
      : k == 2 ? static_cast<uint32_t>(rec.tokens) : static_cast<uint32_t>(10 + count);
    return (v >> (8 * ((o - 4) & 3))) & 0xFFu;
  } else if (o < 22) {
    return o == 20 ? 0u : 1u;  // levels = 256, u16 little-endian
  }
  v = static_cast<uint32_t>(count);
  return (v >> (8 * ((o - 22) & 3))) & 0xFFu;  // count, then coded_len = count
}

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_LAUNCH_ARGS_CUH_
