// Copyright kvserve authors. Encodes a KV cache layer by layer and streams the
// chunk records over a connection, with encoding and sending overlapped: the
// calling thread encodes layer l+1 while a sender thread writes layer l
// (docs/e2e.md §Prefill worker).
#ifndef KVSERVE_SERVE_KV_STREAMER_H_
#define KVSERVE_SERVE_KV_STREAMER_H_

#include <cstdint>
#include <functional>
#include <span>

#include "kvserve/codec.h"
#include "kvserve/runtime.h"
#include "kvserve/transport.h"

namespace kvserve::serve {

struct StreamResult {
  double encode_seconds = 0;  // sum of Begin/EncodeLayer/Finish times
  // Encode start to the receiver's ack, less the time the pipeline sat
  // waiting for a producer's next layer (StreamKvWhileProducing): the KV
  // movement time the latency model predicts.
  double kv_seconds = 0;
  double ack_time = 0;        // MonotonicSeconds() when the ack arrived
  TransferStats transfer;     // from FrameSender::Finish
};

// Streams `kv` encoded by `encoder` as transfer `transfer_id` over
// `connection` and waits for the receiver's verdict. Returns the receiver's
// error (e.g. Corruption when it refused a record), an encoder error (the
// transfer is then aborted), or a connection error (the connection is then
// broken). At most `max_queued_layers` encoded layers wait for the sender,
// so memory stays bounded when the link is slower than the encoder.
[[nodiscard]] Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder,
                                            const KvView& kv, uint64_t transfer_id,
                                            int max_queued_layers = 4);

// Produces a KV cache layer by layer: calls `on_layer` once per layer, in
// order, as soon as that layer is final (Model::Prefill's
// PrefillOptions::on_layer_ready has this shape), and returns its status.
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
[[nodiscard]] Result<StreamResult> StreamKvWhileProducing(Connection& connection,
                                                          EncoderContext& encoder,
                                                          const KvShape& shape, DType dtype,
                                                          uint64_t transfer_id,
                                                          const LayerProducer& produce,
                                                          int max_queued_layers = 4);

// Streams an already encoded frame (e.g. fetched from the KV pool) as
// transfer `transfer_id`, record by record; encode_seconds is 0. Corruption
// when `frame` is not a well-formed frame; otherwise as StreamKv.
[[nodiscard]] Result<StreamResult> StreamFrame(Connection& connection,
                                               std::span<const uint8_t> frame,
                                               uint64_t transfer_id);

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_KV_STREAMER_H_
