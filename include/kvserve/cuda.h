// Copyright kvserve authors. The CUDA backend: device-resident encoding and
// decoding of KV caches into frames that are byte-identical to the CPU
// reference's (docs/format.md; docs/cuda.md has the design and the limits).
//
// Everything here is stream-ordered. The caller owns every device buffer:
// the KV cache (a KvView / MutableKvView whose `data` is a device pointer),
// the frame buffer, and a workspace whose size is queried up front. No call
// below allocates device memory, and no call synchronises with the host
// except the ones whose contract says so (Create, Check). Errors found by
// kernels (a non-finite KV value, a corrupt frame) are recorded in the
// workspace and reported by Check, which synchronises the stream.
//
// What runs on the GPU: every transform (identity, delta, hadamard, affine),
// every quantizer mode (uniform, kivi, layermix, mixhq, tokenmix, duo, raw),
// the pack and rans codecs, record assembly and the XXH3 record checksums.
// Not supported (NotSupported from Create): the zstd and lz4 codecs, and
// head_dim other than 32, 64, 128 or 256.
//
// Thread safety: an Encoder or Decoder is not thread-safe; use one per
// stream. Different objects may be used concurrently.
#ifndef KVSERVE_CUDA_H_
#define KVSERVE_CUDA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/kv.h"
#include "kvserve/paged.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; no CUDA header needed here.

namespace kvserve::cuda {

using Stream = CUstream_st*;

// True when the CUDA runtime reports at least one device. Never fails.
bool Available();
// Name of device 0 ("NVIDIA H200"), or "" when none.
std::string DeviceName();

// Why a profile/shape cannot run on the GPU: OK when it can; NotSupported
// naming the reason (zstd/lz4 codec, head_dim) otherwise; InvalidArgument
// when the profile or shape is invalid for the CPU encoder too.
Status CheckSupported(const Profile& profile, const KvShape& shape);

// A byte range [offset, offset + bytes) of a frame.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Encodes caches of one (profile, shape, dtype) into frames. The plan (chunk
// records, segment layout, frame header) is built once by Create; Encode and
// the layer entry points only launch kernels.
class Encoder {
 public:
  // Builds the plan and uploads it (this call synchronises: it allocates the
  // plan's device tables and pinned header bytes). `head_scores` is required
  // for mixhq and duo, exactly as for the CPU encoder. NotSupported when
  // CheckSupported fails.
  static Result<std::unique_ptr<Encoder>> Create(const Profile& profile, const KvShape& shape,
                                                 DType dtype,
                                                 const HeadScores* head_scores = nullptr);
  virtual ~Encoder() = default;

  // Bytes of device workspace Encode and the layer entry points need; the
  // pointer passed must be 256-byte aligned (cudaMalloc's are).
  virtual uint64_t WorkspaceBytes() const = 0;
  // An upper bound on the frame size: the frame buffer must hold this many
  // bytes. For pack profiles it is the exact size.
  virtual uint64_t MaxFrameBytes() const = 0;
  // True when the frame size is known without encoding (pack codec).
  virtual bool FrameSizeIsStatic() const = 0;
  // Bytes of the frame header (the records start there).
  virtual uint64_t HeaderBytes() const = 0;
  // Where layer `layer`'s records lie in every frame of this encoder, when
  // record sizes are static (FrameSizeIsStatic(): pack): the bytes
  // EncodeLayer(layer) writes, which Decoder::DecodeLayer takes. NotSupported
  // for rans frames (their sizes exist only after encoding); InvalidArgument
  // for a layer outside the shape.
  virtual Result<ByteRange> StaticLayerRecords(int layer) const = 0;

  // Encodes the whole cache `kv` (device pointer, the shape and dtype given
  // to Create; any non-negative strides, except that the kind stride may be
  // negative: a layer's V may lie below its K, as with separately allocated
  // per-layer tensors) into `frame` (device, 16-byte aligned,
  // MaxFrameBytes() capacity).
  // The frame's size is written to the device word `frame_bytes` (may be
  // null). Stream-ordered; returns InvalidArgument for mismatched arguments
  // and the launch error if a launch fails. Value errors (non-finite input)
  // surface through Check.
  virtual Status Encode(const KvView& kv, void* workspace, uint8_t* frame, uint64_t* frame_bytes,
                        Stream stream) = 0;

  // Layer-at-a-time encoding, for overlapping with prefill: Begin writes the
  // frame header; EncodeLayer(l) encodes the records of layer l, reading only
  // layer l of `kv`; layers must come in order 0, 1, ..., layers-1 (the
  // record offsets of a rans frame depend on the layers before); Finish
  // writes the frame size to `frame_bytes`. The bytes equal Encode's. The
  // same workspace and frame must be passed to every call of one frame.
  virtual Status Begin(void* workspace, uint8_t* frame, Stream stream) = 0;
  virtual Status EncodeLayer(int layer, const KvView& kv, void* workspace, uint8_t* frame,
                             Stream stream) = 0;
  virtual Status Finish(void* workspace, uint64_t* frame_bytes, Stream stream) = 0;

  // Paged caches (kvserve/paged.h): as Encode / EncodeLayer, gathering one
  // request's KV from an engine's pages (device memory) through its block
  // table. The view's page-pointer arrays and block table are host arrays
  // (of device pointers / block ids); they are copied stream-ordered into
  // the workspace before the call returns, so they may change afterwards.
  // The frame is byte-identical to that of the same KV laid out
  // contiguously. InvalidArgument when the view is invalid
  // (PagedKvView::Validate), differs from the plan's shape or dtype, or has
  // page pointers not aligned to the element size.
  virtual Status EncodePaged(const PagedKvView& kv, void* workspace, uint8_t* frame, uint64_t* frame_bytes,
                             Stream stream) = 0;
  virtual Status EncodeLayerPaged(int layer, const PagedKvView& kv, void* workspace, uint8_t* frame,
                                  Stream stream) = 0;

  // Synchronises `stream` and returns the first error the kernels recorded
  // in `workspace` since the last Encode/Begin (OK if none), and resets it.
  virtual Status Check(void* workspace, Stream stream) = 0;

  virtual const Profile& profile() const = 0;
};

// Decodes frames of one header (profile, shape, dtype, quantizer state).
class Decoder {
 public:
  // Parses and verifies the frame header at the front of `header` (host
  // bytes; the header is small and the receiver holds it before the records
  // arrive) and builds the decode plan (synchronises, as Encoder::Create).
  // Corruption for a bad header; NotSupported as CheckSupported.
  static Result<std::unique_ptr<Decoder>> Create(std::span<const uint8_t> header);
  virtual ~Decoder() = default;

  virtual uint64_t WorkspaceBytes() const = 0;
  virtual uint64_t HeaderBytes() const = 0;
  virtual const FrameInfo& info() const = 0;
  // As Encoder::StaticLayerRecords, for the frames this decoder reads.
  virtual Result<ByteRange> StaticLayerRecords(int layer) const = 0;

  // Decodes the frame `frame` (device pointer, 16-byte aligned, `frame_bytes`
  // long; records in any order) into `out` (device pointer, the frame's shape
  // and dtype, strides as Encoder::Encode's kv). `keep_mask`, if non-null, is a device array of
  // layers*2*kv_heads*tokens bytes ([layer][kind][head][token]) that receives
  // 0 for pruned tokens and 1 otherwise. Stream-ordered; corruption surfaces
  // through Check (out is then unspecified).
  virtual Status Decode(const uint8_t* frame, uint64_t frame_bytes, const MutableKvView& out,
                        uint8_t* keep_mask, void* workspace, Stream stream) = 0;

  // Decodes the records of one layer as they arrive, so decoding overlaps
  // the transfer of later layers: `records` (device pointer, 16-byte
  // aligned) holds exactly the records of layer `layer` (the frame bytes
  // the encoder's EncodeLayer(layer) wrote, or those records in any order),
  // `bytes` long. Writes that layer's rows of `out` and of `keep_mask`
  // (both for the whole frame, as Decode's). Layers may come in any order
  // and each at most once per frame; call Check after the last one (errors
  // of all layers since the last Check or Decode are reported there).
  // Stream-ordered, no host sync. InvalidArgument for a layer outside the
  // frame or bad pointers.
  virtual Status DecodeLayer(int layer, const uint8_t* records, uint64_t bytes, const MutableKvView& out,
                             uint8_t* keep_mask, void* workspace, Stream stream) = 0;

  // Paged receivers: as Decode / DecodeLayer, scattering into the pages of
  // `out` through its own block table (which need not match the sender's;
  // tables and page arrays are copied as for Encoder::EncodePaged).
  virtual Status DecodePaged(const uint8_t* frame, uint64_t frame_bytes, const MutablePagedKvView& out,
                             uint8_t* keep_mask, void* workspace, Stream stream) = 0;
  virtual Status DecodeLayerPaged(int layer, const uint8_t* records, uint64_t bytes, const MutablePagedKvView& out,
                                  uint8_t* keep_mask, void* workspace, Stream stream) = 0;

  // As Encoder::Check.
  virtual Status Check(void* workspace, Stream stream) = 0;
};

// ---------------------------------------------------------------------------
// Windows: a frame encoded or decoded a few records at a time, in device
// buffers ("slots") whose size does not grow with the prompt. The frame is
// cut into windows: runs of whole records in plan order (docs/format.md §4),
// of one (layer, kind) each for an encoder (it encodes a layer as soon as the
// layer exists), across (layer, kind) boundaries for a decoder (fewer, larger
// windows for short frames such as pool chunks). Encoding every window of a frame in order and
// concatenating header() and the windows' bytes gives exactly the frame
// Encoder::Encode writes (and the CPU encoder). The connector's device
// paths (kvserve/connector.h) stream through a ring of slots.

struct WindowOptions {
  // Target uncompressed KV bytes per window: a window holds the records
  // that fit (an encoder's, of one (layer, kind)), at least one (a record
  // larger than this is a window of its own). The slot size grows with it
  // (SlotBytes()).
  uint64_t window_kv_bytes = uint64_t{8} << 20;
};

// One window of a frame: records [record_begin, record_end) in plan order.
struct FrameWindow {
  int layer = 0;  // of its first record (an encoder's windows: of every record)
  int kind = 0;   // 0 K, 1 V; of its first record, as layer
  int64_t record_begin = 0, record_end = 0;  // plan indices (docs/format.md §4)
  uint64_t kv_bytes = 0;   // uncompressed KV bytes of its records
  uint64_t max_bytes = 0;  // most bytes its records take (exact for pack)
};

// A slot's status block: the first 64 bytes of every slot. One copy of
// kSlotStatusBytes from the slot's start to the host gives both.
inline constexpr uint64_t kSlotStatusBytes = 64;
struct SlotStatus {
  uint32_t error[4] = {};  // 0s when the window encoded/decoded cleanly
  uint64_t pad[2] = {};
  uint64_t bytes = 0;      // encode: the window's byte count
  uint64_t pad2[3] = {};
};
static_assert(sizeof(SlotStatus) == kSlotStatusBytes);

// Encodes the frames of one (profile, shape, dtype) window by window.
// Thread safety: const calls are safe concurrently; EncodeWindow may run
// concurrently on different slots (it only reads the object).
class WindowedEncoder {
 public:
  // As Encoder::Create, plus the window cut. Synchronises once (uploads the
  // frame constants every window shares). NotSupported as CheckSupported.
  static Result<std::unique_ptr<WindowedEncoder>> Create(const Profile& profile, const KvShape& shape,
                                                         DType dtype,
                                                         const HeadScores* head_scores = nullptr,
                                                         WindowOptions options = {});
  virtual ~WindowedEncoder() = default;

  // The frame header (host bytes): the frame's first bytes.
  virtual const std::vector<uint8_t>& header() const = 0;
  virtual const std::vector<FrameWindow>& windows() const = 0;
  // Layer l's windows are [FirstWindow(l), FirstWindow(l + 1)); l in [0, layers].
  virtual int FirstWindow(int layer) const = 0;
  // Device bytes one slot needs for any window of this frame (a slot must
  // be 256-byte aligned), and pinned host bytes of the table staging each
  // slot needs beside it.
  virtual uint64_t SlotBytes() const = 0;
  virtual uint64_t TableBytes() const = 0;
  // Where a slot holds its window's bytes once encoded (SlotStatus::bytes
  // of them).
  virtual uint64_t OutputOffset() const = 0;
  virtual bool FrameSizeIsStatic() const = 0;
  virtual const Profile& profile() const = 0;

  // Encodes window `w` of the cache `kv` (device memory; the whole cache's
  // view, as Encoder::Encode takes it) into `slot`, stream-ordered: the
  // window's plan tables are written to `host_tables` (pinned host memory
  // of TableBytes(); not to be written again until the stream has passed
  // this call's work, so one per slot) and copied into the slot, then the
  // kernels run. Afterwards the slot's status block holds the byte count
  // and any error (a non-finite value), and its bytes lie at slot +
  // OutputOffset(). InvalidArgument for bad arguments.
  virtual Status EncodeWindow(int w, const KvView& kv, uint8_t* slot, uint8_t* host_tables,
                              Stream stream) = 0;
  // The same gathering from an engine's pages (as Encoder::EncodePaged).
  virtual Status EncodeWindowPaged(int w, const PagedKvView& kv, uint8_t* slot, uint8_t* host_tables,
                                   Stream stream) = 0;
};

// Decodes the frames of one header window by window: the caller gathers a
// window's records (in any order, back to back) at slot + InputOffset()
// and decodes them into the destination.
class WindowedDecoder {
 public:
  // As Decoder::Create (synchronises once), with the window cut.
  static Result<std::unique_ptr<WindowedDecoder>> Create(std::span<const uint8_t> header,
                                                         WindowOptions options = {});
  virtual ~WindowedDecoder() = default;

  virtual uint64_t HeaderBytes() const = 0;
  virtual const FrameInfo& info() const = 0;
  virtual const std::vector<FrameWindow>& windows() const = 0;
  // The window that holds the record whose 20-byte header starts `record`
  // (host bytes): the index of windows(). Corruption when the header names
  // no record of the frame.
  virtual Result<int> WindowOfRecord(std::span<const uint8_t> record) const = 0;
  // As WindowedEncoder's.
  virtual uint64_t SlotBytes() const = 0;
  virtual uint64_t TableBytes() const = 0;
  // Where a slot takes a window's records, and how many bytes it has room
  // for there (at least windows()[w].max_bytes for every w).
  virtual uint64_t InputOffset() const = 0;
  virtual uint64_t InputCapacity() const = 0;

  // Decodes the `bytes` bytes of window `w`'s records at slot +
  // InputOffset() (device memory, every record of the window once, any
  // order) into `out`, stream-ordered; `keep_mask` as Decoder::Decode's
  // (for the whole frame; may be null); `host_tables` as
  // WindowedEncoder::EncodeWindow's. Errors (a corrupt record) land in the
  // slot's status block.
  virtual Status DecodeWindow(int w, uint8_t* slot, uint64_t bytes, const MutableKvView& out,
                              uint8_t* keep_mask, uint8_t* host_tables, Stream stream) = 0;
  virtual Status DecodeWindowPaged(int w, uint8_t* slot, uint64_t bytes, const MutablePagedKvView& out,
                                   uint8_t* keep_mask, uint8_t* host_tables, Stream stream) = 0;
};

// The Status a slot's status block stands for (the record the error names
// is the frame's index). OK when clean.
Status SlotStatusToStatus(const SlotStatus& status, const FrameWindow& window);

// The connector's device paths (kvserve/connector.h) on this backend, on
// device options.device. NotSupported when no CUDA device is present;
// InvalidArgument for zero budgets. Allocates nothing until a transfer
// needs it; rings are kept for reuse.
Result<std::unique_ptr<DeviceConnector>> NewDeviceConnector(DeviceConnectorOptions options = {});

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_H_
