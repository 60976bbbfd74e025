// Copyright kvserve authors. The connector: what a serving engine calls to move
// one request's KV cache to another process over a Connection
// (kvserve/transport.h), layer by layer, and to import it there. It knows
// nothing of kvserve's own runtime: the engine hands it KV views
// (kvserve/kv.h) or its paged caches (kvserve/paged.h) and tells it when
// each layer is final; the prefill and decode workers (kvserve/serve.h) are
// users of it like any engine. docs/connector.md walks through an engine's
// side and examples/ has a sender and a receiver.
//
// Sending encodes layer l+1 on the calling thread while a sender thread
// writes layer l (and, with a producer, while the engine computes layer
// l+2): encoding, sending and producing overlap, and at most
// `max_queued_layers` encoded layers wait for the link, so memory stays
// bounded when the link is slower than the encoder. The receiver decodes
// each chunk record as it arrives into the destination it chose when the
// frame's header came (docs/e2e.md §Prefill worker has the timings).
//
// Thread safety: the calls are not thread-safe per connection or per
// encoder/decoder context (one transfer at a time on each); different
// connections may be used concurrently.
#ifndef KVSERVE_CONNECTOR_H_
#define KVSERVE_CONNECTOR_H_

#include <cstdint>
#include <functional>
#include <span>
#include <variant>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/paged.h"
#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve {

// ---------------------------------------------------------------------------
// Sending.

struct StreamResult {
  double encode_seconds = 0;  // sum of Begin/EncodeLayer/Finish times
  // Encode start to the receiver's ack, less the time the pipeline sat
  // waiting for a producer's next layer (StreamKvWhileProducing): the KV
  // movement time the latency model predicts.
  double kv_seconds = 0;
  double ack_time = 0;     // MonotonicSeconds() when the ack arrived
  TransferStats transfer;  // from FrameSender::Finish
};

// Streams `kv` encoded by `encoder` as transfer `transfer_id` over
// `connection` and waits for the receiver's verdict. Returns the receiver's
// error (e.g. Corruption when it refused a record), an encoder error (the
// transfer is then aborted; InvalidArgument for a view that does not
// Validate), or a connection error (the connection is then broken).
[[nodiscard]] Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder,
                                            const KvView& kv, uint64_t transfer_id,
                                            int max_queued_layers = 4);
// The same for a request's KV in an engine's pages; the frame is the one
// the contiguous KV gives.
[[nodiscard]] Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder,
                                            const PagedKvView& kv, uint64_t transfer_id,
                                            int max_queued_layers = 4);

// Produces a KV cache layer by layer: calls `on_layer` once per layer, in
// order, as soon as that layer is final (a prefill's layer-ready hook has
// this shape: kvserve::Model's PrefillOptions::on_layer_ready is one), and
// returns its status. `on_layer`'s view of layer l has layers == 1 and is
// valid only during the call.
using LayerProducer = std::function<Status(const LayerReadyCallback& on_layer)>;

// As StreamKv, but overlapped with the producer of the KV (a prefill):
// runs `produce` on the calling thread while other threads encode each
// layer as soon as it is ready and send its records, so the transfer of
// layer l proceeds while the producer computes layer l+1. `shape` and
// `dtype` are those of the whole cache the producer makes (every layer's
// view must match them with layers == 1). Each ready layer is copied into
// a staging cache (the producer's view is valid only during its call).
// The frame's end is sent only once `produce` returned OK having delivered
// every layer. When the producer fails (even after its last layer) the
// transfer is aborted and its error returned; when it returns OK but
// delivered fewer layers, a layer out of order or of another shape or
// dtype, or more layers than `shape` has, the transfer is aborted and
// Internal returned; when the transfer fails the producer still runs to
// completion (its result is the caller's to use for a retry) and the
// transfer's error is returned. Thread safety: `produce` runs on the
// calling thread only.
[[nodiscard]] Result<StreamResult> StreamKvWhileProducing(
    Connection& connection, EncoderContext& encoder, const KvShape& shape, DType dtype,
    uint64_t transfer_id, const LayerProducer& produce, int max_queued_layers = 4);

// Produces a KV cache in place, in an engine's pages: calls `layer_done(l)`
// once per layer, in order, once layer l of the request is written to its
// pages (e.g. from a forward hook after layer l's attention), and returns
// its status.
using PagedLayerProducer = std::function<Status(const std::function<void(int layer)>& layer_done)>;

// As StreamKvWhileProducing, for KV the producer writes into the pages
// `kv` describes: layer l is encoded straight from the pages once
// `layer_done(l)` was called, with no staging copy, so the pages of a layer
// must not change after its call until this returns. The same contract
// otherwise: a layer out of order, too few or too many layers fail the
// transfer with Internal, a failing producer with its error.
[[nodiscard]] Result<StreamResult> StreamKvWhileProducing(
    Connection& connection, EncoderContext& encoder, const PagedKvView& kv, uint64_t transfer_id,
    const PagedLayerProducer& produce, int max_queued_layers = 4);

// Streams an already encoded frame (e.g. fetched from the KV pool) as
// transfer `transfer_id`, record by record; encode_seconds is 0. Corruption
// when `frame` is not a well-formed frame; otherwise as StreamKv.
[[nodiscard]] Result<StreamResult> StreamFrame(Connection& connection,
                                               std::span<const uint8_t> frame,
                                               uint64_t transfer_id);

// ---------------------------------------------------------------------------
// Receiving.

// Where a receiver decodes a frame: a strided view of its own memory or its
// pages (its own layout, block size and block table).
using KvDestination = std::variant<MutableKvView, MutablePagedKvView>;

// Called once a frame's header has arrived, with the transfer id and the
// header (shape, dtype, profile, record count): returns where to decode
// the frame (its shape and dtype must be the header's), or an error, which
// refuses the frame (the sender gets it as its verdict). It may allocate;
// the destination must stay valid until ReceiveKv returns.
using KvDestinationCallback =
    std::function<Result<KvDestination>(uint64_t transfer_id, const FrameInfo& info)>;

struct KvReceiveResult {
  TransferStats transfer;     // the receiver's side: Begin to End
  FrameInfo info;             // the header (chunks not filled)
  uint64_t records = 0;       // records decoded (== info.chunk_count)
  double decode_seconds = 0;  // sum of the per-record decode times
};

struct KvReceiveOptions {
  // When non-null, receives the frame's keep mask ([layer][kind][head]
  // [token], 0 = token pruned by the profile), as DecoderContext fills it.
  std::vector<uint8_t>* keep_mask = nullptr;
  // Set to true when this side refused the frame (the destination
  // callback's error, a record that failed to decode or verify, or a frame
  // that ended without all its records): the connection stays usable.
  // False for connection errors (the connection is then broken) and for
  // transfers the sender aborted. May be null.
  bool* refused = nullptr;
};

// Receives one streamed frame from `connection` (waiting up to
// `timeout_seconds` for its Begin), decoding each record with `decoder`
// into the destination `destination` returned as soon as it arrives, and
// acknowledges it. Returns the result only when every record of the frame
// was decoded into the destination; otherwise the error: the callback's,
// Corruption for a malformed or incomplete frame or a record that fails its
// checksum, the sender's reason for an aborted transfer, or a connection
// error. After an error the destination's contents are unspecified.
[[nodiscard]] Result<KvReceiveResult> ReceiveKv(Connection& connection, DecoderContext& decoder,
                                                const KvDestinationCallback& destination,
                                                const KvReceiveOptions& options = {},
                                                double timeout_seconds = -1);
// As ReceiveKv, for a receiver that has already received the transfer's
// Begin message `begin` itself (e.g. one that waits for either a frame or
// another message type).
[[nodiscard]] Result<KvReceiveResult> ReceiveKvFrom(Connection& connection, const Message& begin,
                                                    DecoderContext& decoder,
                                                    const KvDestinationCallback& destination,
                                                    const KvReceiveOptions& options = {});

// As ReceiveKv, for a frame from `source` (e.g. PoolFrameSource: a prefix
// chunk fetched from the pool straight into the destination). The source's
// error is returned as is (NotFound from a pool that lacks the key).
[[nodiscard]] Result<KvReceiveResult> ReceiveKvWith(const FrameSource& source, DecoderContext& decoder,
                                                    const KvDestinationCallback& destination,
                                                    const KvReceiveOptions& options = {});

// ---------------------------------------------------------------------------
// KV in GPU memory.
//
// The same transfers for KV a GPU engine holds, through a DeviceConnector
// (the CUDA backend makes one: kvserve::cuda::NewDeviceConnector,
// kvserve/cuda.h). The KV is encoded and decoded on the GPU window by
// window (a few records of one layer and kind at a time) through a bounded
// ring of device slots and pinned host buffers: kvserve's device memory per
// transfer stays under `device_budget_bytes` whatever the prompt length,
// and records go between pinned memory and the wire with no other host
// copy. Frames are byte-identical to the CPU encoder's, so either side may
// be a CPU.
//
// Streams: the engine's stream (a cudaStream_t, or null for the legacy
// default stream) orders the work. The connector's kernels run on a stream
// of its own that waits for the work queued on the engine's stream before
// the call (or, with a producer, before each layer it hands over); a
// received cache is complete for every stream once ReceiveKv returns.

struct DeviceConnectorOptions {
  int device = 0;  // CUDA device ordinal of the caches
  // Device memory one transfer may hold: its ring of slots (each a window's
  // plan tables, workspace and bytes). The window size follows from it.
  uint64_t device_budget_bytes = uint64_t{64} << 20;
  // Pinned host memory one transfer may hold (the slots' host side).
  uint64_t pinned_budget_bytes = uint64_t{64} << 20;
  // Slots per ring, at most (at least 2 fit the budget, or the transfer
  // fails with ResourceExhausted naming the record that does not fit).
  int max_slots = 4;
};

// A KV cache in device memory, as a sender hands it over: a contiguous
// view or an engine's pages (device pointers).
using DeviceKvSource = std::variant<KvView, PagedKvView>;

// Device memory the connector held, for measurement.
struct DeviceMemoryStats {
  uint64_t bytes_now = 0;   // allocated by the connector now (rings cached for reuse included)
  uint64_t peak_bytes = 0;  // the most at any moment since it was created
  uint64_t peak_transfer_bytes = 0;  // the most one transfer held
};

// Thread safety: thread-safe; one transfer at a time per connection, as for
// the host calls; transfers on different connections run concurrently (each
// takes a ring of its own).
class DeviceConnector {
 public:
  virtual ~DeviceConnector() = default;

  // OK when the device codec runs `profile` for `shape`; NotSupported naming
  // why otherwise (zstd and lz4 codecs, head_dim other than 32/64/128/256).
  virtual Status Supports(const Profile& profile, const KvShape& shape) const = 0;

  // StreamKv for a cache in device memory, after the work queued on
  // `engine_stream`. `head_scores` as EncodeOptions::head_scores. As
  // StreamKv otherwise; ResourceExhausted when the device is out of memory
  // for the ring (the connection stays usable: nothing was sent).
  virtual Result<StreamResult> StreamKv(Connection& connection, const Profile& profile,
                                        const HeadScores* head_scores, const DeviceKvSource& kv,
                                        uint64_t transfer_id, void* engine_stream) = 0;

  // StreamKvWhileProducing for a producer whose layers live in device
  // memory: `produce` calls on_layer(l, view of layer l (layers == 1,
  // device pointers, head_dim contiguous)) in order once layer l is queued
  // on `engine_stream`; that memory must stay unchanged until this returns
  // (no copy is made). The connector encodes layer l once the engine's
  // stream has computed it, while the producer goes on. kv_seconds counts
  // from the last layer's completion on the GPU. As the host
  // StreamKvWhileProducing otherwise.
  virtual Result<StreamResult> StreamKvWhileProducing(Connection& connection, const Profile& profile,
                                                      const HeadScores* head_scores, const KvShape& shape,
                                                      DType dtype, uint64_t transfer_id,
                                                      const LayerProducer& produce, void* engine_stream) = 0;

  // ReceiveKvFrom into device memory: `destination` returns device views
  // (a contiguous view or the engine's pages). Each window's records are
  // read from the wire into pinned memory and decoded into the destination
  // as soon as the window is complete. The keep mask (options.keep_mask)
  // is filled for pruning profiles. As ReceiveKvFrom otherwise.
  virtual Result<KvReceiveResult> ReceiveKvFrom(Connection& connection, const Message& begin,
                                                const KvDestinationCallback& destination,
                                                const KvReceiveOptions& options, void* engine_stream) = 0;
  // ReceiveKvWith into device memory (e.g. a prefix chunk streamed from the
  // pool): as ReceiveKvFrom, the records coming from `source`.
  virtual Result<KvReceiveResult> ReceiveKvWith(const FrameSource& source, const KvDestinationCallback& destination,
                                                const KvReceiveOptions& options, void* engine_stream) = 0;

  // Encodes `kv` (device memory, after the work queued on `engine_stream`)
  // into one whole frame appended to `sink`, through the same ring: e.g. a
  // prefix chunk for the KV pool. The sink's error, or the encoder's.
  virtual Status EncodeFrame(const Profile& profile, const HeadScores* head_scores, const DeviceKvSource& kv,
                             ByteSink& sink, void* engine_stream) = 0;

  virtual DeviceMemoryStats memory() const = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_CONNECTOR_H_
