// Copyright kvserve authors. Encodes a KV cache layer by layer and streams the
// chunk records over a connection, with encoding and sending overlapped: the
// calling thread encodes layer l+1 while a sender thread writes layer l
// (docs/e2e.md §Prefill worker).
#ifndef KVSERVE_SERVE_KV_STREAMER_H_
#define KVSERVE_SERVE_KV_STREAMER_H_

#include <cstdint>
#include <span>

#include "kvserve/codec.h"
#include "kvserve/transport.h"

namespace kvserve::serve {

struct StreamResult {
  double encode_seconds = 0;  // sum of Begin/EncodeLayer/Finish times
  double kv_seconds = 0;      // encode start to the receiver's ack
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

// Streams an already encoded frame (e.g. fetched from the KV pool) as
// transfer `transfer_id`, record by record; encode_seconds is 0. Corruption
// when `frame` is not a well-formed frame; otherwise as StreamKv.
[[nodiscard]] Result<StreamResult> StreamFrame(Connection& connection,
                                               std::span<const uint8_t> frame,
                                               uint64_t transfer_id);

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_KV_STREAMER_H_
