// Copyright kvserve authors. Host launchers of the CUDA kernels (encode.cu,
// decode.cu). Each takes raw pointers, the plan's device tables and a
// stream, launches, and returns the launch status. Internal.
#ifndef KVSERVE_CUDA_KERNELS_H_
#define KVSERVE_CUDA_KERNELS_H_

#include <cstdint>

#include "cuda/plan.h"
#include "kvserve/status.h"

struct CUstream_st;

namespace kvserve::cuda {

struct DeviceView;

// The plan's tables in device memory.
struct DeviceTables {
  const RecordDesc* records = nullptr;
  const RunDesc* runs = nullptr;
  const SegmentDesc* segments = nullptr;
  const TileDesc* tiles = nullptr;
  const TileDesc* raw_tiles = nullptr;
  const uint64_t* sign_words = nullptr;
};

// A contiguous slice of the plan (one layer, or the whole frame).
struct PlanRange {
  int64_t record_begin, record_end;
  int64_t segment_begin, segment_end;
  int64_t tile_begin, tile_end;
  int64_t raw_tile_begin, raw_tile_end;
};

struct EncodeLaunch {
  FrameConsts consts;
  DeviceTables tables;
  const WorkspaceLayout* layout;  // host copy
  uint8_t* workspace;
  uint8_t* frame;
  bool direct;                    // pack: codes, params, side straight into the frame
  bool static_sizes;
};

// Encodes the records of `range` (see encode.cu for the kernel sequence).
// For rans frames the record offsets continue from the running total in the
// workspace, which EncodeBegin sets to the header size.
Status LaunchEncodeRange(const EncodeLaunch& e, const DeviceView& src, const PlanRange& range,
                         CUstream_st* stream);
// Resets the workspace error block and (rans) the running frame total.
Status LaunchEncodeBegin(const EncodeLaunch& e, uint64_t header_bytes, CUstream_st* stream);
// Writes the frame size: the running total (rans) or `static_bytes`.
Status LaunchEncodeFinish(const EncodeLaunch& e, uint64_t static_bytes, uint64_t* frame_bytes,
                          CUstream_st* stream);

struct DecodeLaunch {
  FrameConsts consts;
  DeviceTables tables;
  const WorkspaceLayout* layout;
  uint8_t* workspace;
  const uint8_t* frame;
  uint64_t frame_bytes;
  uint64_t header_bytes;
  int64_t num_records, num_segments, num_tiles, num_raw_tiles;
  int records_per_layer;
  uint8_t* keep_mask;  // may be null
};

// Locates every record, verifies checksums and layouts, decodes codec
// segments and writes the output view.
Status LaunchDecode(const DecodeLaunch& d, const DeviceView& out, CUstream_st* stream);

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_KERNELS_H_
