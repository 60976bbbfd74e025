// Copyright kvserve authors. What the CUDA backend's host objects share
// (context.cu: Encoder/Decoder; windows.cc: the windowed encoder and
// decoder): CUDA error mapping, device views of KV views, argument checks,
// the device error block's meaning, and the plan basis of an encoder or of a
// received frame header. Internal.
#ifndef KVSERVE_CUDA_CONTEXT_INTERNAL_H_
#define KVSERVE_CUDA_CONTEXT_INTERNAL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cuda/plan.h"
#include "cuda/rows.cuh"
#include "kvserve/cuda.h"

namespace kvserve::cuda {

// OK for cudaSuccess; otherwise Internal naming `what` and the CUDA error
// (ResourceExhausted for cudaErrorMemoryAllocation, so that callers can
// tell an out-of-memory from a broken device).
Status CudaStatus(cudaError_t e, const char* what);

// A device view of `data` with `strides` (vec16 when rows allow 16-byte
// lanes).
DeviceView MakeDeviceView(const void* data, DType dtype, const KvShape& shape, const KvStrides& s);
// Bytes of a paged view's device tables: the page bases of `layers` layers
// (K and V) and `blocks` block ids.
uint64_t PagedTableBytes(int layers, int32_t blocks);
// Writes to `tables` (host, PagedTableBytes(layers, block_end -
// block_begin)) a paged view's page bases (element offsets from layer 0's K
// pages, [layer][kind] i64) and its block ids [block_begin, block_end), and
// returns the device view that reads them from `device_tables` (where the
// caller copies `tables`); only tokens of those blocks may be read through
// it. InvalidArgument for misaligned page pointers. The view is not
// validated here.
Result<DeviceView> PagedViewTables(const PagedKvView& kv, int32_t block_begin, int32_t block_end,
                                   uint8_t* tables, const uint8_t* device_tables);
// A device view of a paged cache; copies its page bases and block table
// into `workspace`'s pages region of `plan`, stream-ordered (the view's
// host arrays may change once this returns). InvalidArgument as
// Encoder::EncodePaged.
Result<DeviceView> PagedDeviceView(const PagedKvView& kv, const Plan& plan, void* workspace, Stream stream);
// InvalidArgument when a contiguous view does not fit the plan (null data,
// shape/dtype, negative strides other than kind, misalignment).
Status CheckView(const void* data, DType dtype, const KvShape& shape, const KvStrides& strides,
                 const Plan& plan);
// Synchronises `stream`, reads and resets the error block of `workspace`.
Status ReadDeviceError(void* workspace, const Plan& plan, Stream stream);
// The Status the four error words of a workspace's error block stand for;
// `record_base` is added to the record index they name (a window's plan
// counts records from its first).
Status DeviceErrorStatus(const uint32_t words[4], int64_t record_base = 0);
// The static byte range of `layer`'s records (pack plans).
Result<ByteRange> StaticLayerRecordsOf(const Plan& plan, int layer);

// The quantizer state the CPU encoder derives for (profile, shape) with
// `head_scores` (mixhq bits, duo flags; empty for other modes).
Result<std::vector<uint8_t>> EncoderState(const Profile& profile, const KvShape& shape,
                                          const HeadScores* head_scores);
// Parses and verifies a frame header (host bytes) and builds the decode
// basis of its frame; returns it with the header's byte count. Corruption
// for a bad header, NotSupported as CheckSupported.
Result<std::pair<PlanBasis, size_t>> DecodeBasis(std::span<const uint8_t> header);

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_CONTEXT_INTERNAL_H_
