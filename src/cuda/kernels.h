// Copyright kvserve authors. Host launchers of the CUDA kernels (encode.cu,
// decode.cu, rans_encode.cu, rans_decode.cu). Each takes raw pointers, the
// plan's device tables and a stream, launches, and returns the launch
// status. Internal.
#ifndef KVSERVE_CUDA_KERNELS_H_
#define KVSERVE_CUDA_KERNELS_H_

#include <cstdint>

#include "cuda/plan.h"
#include "kvserve/status.h"

struct CUstream_st;
struct CUevent_st;

namespace kvserve::cuda {

struct DeviceView;

// The plan's tables in device memory.
struct DeviceTables {
  const RecordDesc* records = nullptr;
  const RunDesc* runs = nullptr;
  const SegmentDesc* segments = nullptr;
  const TileDesc* tiles = nullptr;
  const RawSpan* raw_spans = nullptr;
  const int32_t* raw_records = nullptr;
  const uint64_t* sign_words = nullptr;
  const uint8_t* header = nullptr;  // the serialized frame header
  const PackJob* pack_jobs = nullptr;  // pack_warps encoders: one per tile
  const int32_t* segment_order = nullptr;  // rans: Plan::segment_order
};

// A contiguous slice of the plan (one layer, or the whole frame).
struct PlanRange {
  int64_t record_begin, record_end;
  int64_t segment_begin, segment_end;
  int64_t tile_begin, tile_end;
  int64_t raw_span_begin, raw_span_end;
  int64_t raw_record_begin, raw_record_end;
  int layer = -1;  // LayerOfPlan's layer; -1 for the whole plan
};

// The whole plan, or one layer of it.
PlanRange WholePlan(const Plan& plan);
PlanRange LayerOfPlan(const Plan& plan, int layer);

// Optional per-stage timing for benchmarks: when non-null, the launchers
// record an event before each stage's kernels (and one at the end) on the
// stream, so elapsed times between consecutive events are stage times.
struct StageEvents {
  static constexpr int kMax = 12;
  CUevent_st* events[kMax] = {};
  const char* names[kMax] = {};
  int used = 0;
};

struct EncodeLaunch {
  FrameConsts consts;
  DeviceTables tables;
  const WorkspaceLayout* layout;  // host copy
  uint8_t* workspace;
  uint8_t* frame;
  uint64_t frame_capacity;        // bytes of the frame buffer (MaxFrameBytes)
  uint64_t header_bytes;
  bool direct;                    // pack: codes, params, side straight into the frame
  bool static_sizes;
  bool pack_warps = false;        // the plan's pack_warps (pack_warps.cu)
  const Plan* plan = nullptr;     // host: its pack_job_starts (pack_warps.cu)
  StageEvents* timing = nullptr;
};

// Encodes the records of `range` (see encode.cu for the kernel sequence).
// For rans frames the record offsets continue from the running total in the
// workspace, which EncodeBegin sets to the header size.
Status LaunchEncodeRange(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range,
                         CUstream_st* stream);
// Resets the workspace error block and (rans) the running frame total, and
// writes the frame header.
Status LaunchEncodeBegin(const EncodeLaunch& e, CUstream_st* stream);
// Writes the frame size: the running total (rans) or `static_bytes`.
Status LaunchEncodeFinish(const EncodeLaunch& e, uint64_t static_bytes, uint64_t* frame_bytes,
                          CUstream_st* stream);

// Whether LaunchPackWarps encodes the coded tiles of launch `e` from `src`:
// the plan's pack_warps, and a view with 16-byte rows of bf16 or f16.
bool PackWarpsApply(const EncodeLaunch& e, const DeviceView& src);
// Every coded tile of `range`, one warp per tile (pack_warps.cu), in place
// of the tile kernel: the same frame bytes.
Status LaunchPackWarps(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range, CUstream_st* stream);

// The rANS stage of the encoder: every segment of `range` from workspace
// symbols into its slot (rans_encode.cu).
Status LaunchRansEncode(const EncodeLaunch& e, const PlanRange& range, CUstream_st* stream);

struct DecodeLaunch {
  FrameConsts consts;
  DeviceTables tables;
  const WorkspaceLayout* layout;
  uint8_t* workspace;
  const uint8_t* bytes;      // the records of `range` (the frame, or one layer's records)
  uint64_t bytes_len;
  uint64_t records_start;    // offset in `bytes` where records begin (the header size for a frame)
  int64_t static_base;       // static frame offset of `bytes`[0] (pack)
  PlanRange range;
  bool static_sizes;
  uint8_t* keep_mask;        // may be null
  bool reset_errors = true;  // clear the error block first (DecodeLayer: once per frame)
  bool pack_warps = false;   // the plan's pack_warps (pack_warps.cu)
  StageEvents* timing = nullptr;
};

class Encoder;
class Decoder;
// Benchmarks: record stage events on every following call of `encoder` /
// `decoder` (null stops). Both must come from Encoder/Decoder::Create.
void SetStageTiming(Encoder* encoder, StageEvents* timing);
void SetStageTiming(Decoder* decoder, StageEvents* timing);

// Locates every record of the range in `bytes`, verifies checksums and
// layouts, decodes codec segments and writes the output view.
Status LaunchDecode(const DecodeLaunch& d, const DeviceView& out, CUstream_st* stream);

struct DecArgs;
// Whether LaunchUnpackWarps decodes the coded tiles of launch `d` into
// `out`: the plan's pack_warps, a pack frame, and an output view with
// 16-byte rows of bf16 or f16.
bool UnpackWarpsApply(const DecodeLaunch& d, const DeviceView& out);
// Every coded tile of d.range, one warp per tile (pack_warps.cu), in place
// of the decode tile kernel, after the records were located and verified:
// the same output values, keep mask and errors.
Status LaunchUnpackWarps(const DecodeLaunch& d, const DecArgs& a, CUstream_st* stream);

// The rANS stage of the decoder: every segment of `range` from the frame
// into workspace symbols (rans_decode.cu). Needs the segment offsets the
// record kernel wrote.
Status LaunchRansDecode(const DecodeLaunch& d, CUstream_st* stream);

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_KERNELS_H_
