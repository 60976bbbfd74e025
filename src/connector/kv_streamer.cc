// Copyright kvserve authors. The connector's sending side: the layer-wise
// encode/send pipeline (kvserve/connector.h).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "kvserve/connector.h"
#include "connector/layer_gate.h"

namespace kvserve {
namespace {

// A bounded queue of encoded byte runs between the encoder and the sender.
class ByteQueue {
 public:
  explicit ByteQueue(size_t capacity) : capacity_(capacity) {}
  // Blocks while full; false when the consumer failed (drop the bytes).
  bool Push(std::vector<uint8_t> bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || failed_; });
    if (failed_) return false;
    items_.push_back(std::move(bytes));
    not_empty_.notify_one();
    return true;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
  }
  // False once closed and drained. Time spent waiting for an item adds to
  // idle_seconds().
  bool Pop(std::vector<uint8_t>* out) {
    std::unique_lock<std::mutex> lock(mu_);
    if (items_.empty() && !closed_) {
      const double wait_start = MonotonicSeconds();
      not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
      idle_seconds_ += MonotonicSeconds() - wait_start;
    }
    if (items_.empty()) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    items_.clear();
    not_full_.notify_all();
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  double idle_seconds() {
    std::lock_guard<std::mutex> lock(mu_);
    return idle_seconds_;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<std::vector<uint8_t>> items_;
  size_t capacity_;
  bool closed_ = false;
  bool failed_ = false;
  double idle_seconds_ = 0;
};

// The host producer hands over no payload with a layer.
struct NoPayload {};
using LayerGate = connector::LayerGate<NoPayload>;

// Copies the single-layer view `from` into layer `layer` of `to`.
void CopyLayer(const KvView& from, const MutableKvView& to, int layer) {
  const size_t row = static_cast<size_t>(to.shape.head_dim) * DTypeSize(to.dtype);
  const bool rows_contiguous = from.strides.dim == 1;
  for (int kind = 0; kind < 2; ++kind)
    for (int h = 0; h < to.shape.kv_heads; ++h)
      for (int t = 0; t < to.shape.tokens; ++t) {
        if (rows_contiguous) {
          std::memcpy(to.At(layer, kind, h, t, 0), from.At(0, kind, h, t, 0), row);
        } else {
          for (int d = 0; d < to.shape.head_dim; ++d)
            std::memcpy(to.At(layer, kind, h, t, d), from.At(0, kind, h, t, d), DTypeSize(to.dtype));
        }
      }
}

// The encode/send pipeline of StreamKv; with a gate, layer l is encoded
// only once the gate says it is ready. `View` is KvView or PagedKvView.
template <typename View>
Result<StreamResult> StreamLayers(Connection& connection, EncoderContext& encoder, const View& kv,
                                  uint64_t transfer_id, int max_queued_layers, LayerGate* gate) {
  if (Status valid = kv.Validate(); !valid.ok())
    return valid.WithContext("encoding transfer " + std::to_string(transfer_id));
  StreamResult result;
  FrameSender sender(&connection);
  ByteSink& wire = sender.sink(transfer_id);
  ByteQueue queue(static_cast<size_t>(std::max(1, max_queued_layers)));
  Status send_status;
  std::thread send_thread([&] {
    std::vector<uint8_t> bytes;
    while (queue.Pop(&bytes)) {
      Status s = wire.Append(bytes);
      if (!s.ok()) {
        send_status = s;
        queue.Fail();
        return;
      }
    }
  });

  const double start = MonotonicSeconds();
  std::vector<uint8_t> buffer;
  VectorSink sink(&buffer);
  auto flush = [&] {
    bool ok = queue.Push(std::move(buffer));
    buffer = std::vector<uint8_t>();
    return ok;
  };
  double encoding = 0;  // time inside the encoder only (not waiting for the sender)
  auto timed = [&](auto&& call) {
    const double t = MonotonicSeconds();
    Status s = call();
    encoding += MonotonicSeconds() - t;
    return s;
  };
  Status encode_status = timed([&] { return encoder.Begin(kv.shape, kv.dtype, sink); });
  if (encode_status.ok()) flush();
  for (int layer = 0; encode_status.ok() && layer < kv.shape.layers; ++layer) {
    if (gate != nullptr && !gate->Wait(layer)) {
      encode_status = Status::Unavailable("the producer of the KV failed before layer " +
                                      std::to_string(layer));
      break;
    }
    encode_status = timed([&] { return encoder.EncodeLayer(layer, kv); });
    if (encode_status.ok() && !flush()) break;  // the sender failed
  }
  // The frame ends only once the producer succeeded: a producer that fails
  // (or breaks the shape) after its last layer must not leave the receiver
  // a complete frame.
  if (encode_status.ok() && !queue.failed() && gate != nullptr && !gate->Wait(kv.shape.layers))
    encode_status = Status::Unavailable("the producer of the KV failed after its last layer");
  if (encode_status.ok() && !queue.failed()) encode_status = timed([&] { return encoder.Finish(); });
  if (encode_status.ok() && !buffer.empty()) flush();
  result.encode_seconds = encoding;
  queue.Close();
  send_thread.join();

  if (!send_status.ok()) return send_status.WithContext("sending transfer " + std::to_string(transfer_id));
  if (!encode_status.ok()) {
    (void)sender.Abort(encode_status);
    return encode_status.WithContext("encoding transfer " + std::to_string(transfer_id));
  }
  if (sender.sink_has_partial())
    return Status::Internal("encoder left an incomplete record in transfer " + std::to_string(transfer_id));
  KVSERVE_ASSIGN_OR_RETURN(result.transfer, sender.Finish());
  result.ack_time = MonotonicSeconds();
  // Waiting for the producer is not KV movement: the part of the sender's
  // idle time during which the encoder, too, waited for a layer.
  const double producer_wait = gate == nullptr ? 0.0 : std::min(gate->wait_seconds(), queue.idle_seconds());
  result.kv_seconds = std::max(result.ack_time - start - producer_wait, 1e-9);
  return result;
}

// Runs `produce` on this thread while `stream` runs on another with
// `gate`; `produce` calls mark(layer) per finished layer, which returns
// false once the contract broke (`*mismatch` then says how). Returns the
// producer's error, Internal for a broken contract, else the stream's
// result.
Result<StreamResult> RunProducer(
    LayerGate& gate, int layers, const std::function<Result<StreamResult>()>& stream,
    const std::function<Status(int* next_layer, std::string* mismatch)>& produce) {
  Result<StreamResult> streamed = Status::Internal("unset");
  std::thread stream_thread([&] { streamed = stream(); });
  int next_layer = 0;
  std::string mismatch;  // the first call that broke the contract, if any
  Status produced = produce(&next_layer, &mismatch);
  if (produced.ok() && (next_layer != layers || !mismatch.empty()))
    produced = Status::Internal("the producer delivered " + std::to_string(next_layer) + " of " +
                                std::to_string(layers) + " layers in the expected shape" +
                                (mismatch.empty() ? "" : ", " + mismatch));
  if (produced.ok()) {
    gate.MarkDone();
  } else {
    gate.Fail();
  }
  stream_thread.join();
  if (!produced.ok()) return produced;
  return streamed;
}

}  // namespace

Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder, const KvView& kv,
                              uint64_t transfer_id, int max_queued_layers) {
  return StreamLayers(connection, encoder, kv, transfer_id, max_queued_layers, nullptr);
}

Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder,
                              const PagedKvView& kv, uint64_t transfer_id, int max_queued_layers) {
  return StreamLayers(connection, encoder, kv, transfer_id, max_queued_layers, nullptr);
}

Result<StreamResult> StreamKvWhileProducing(Connection& connection, EncoderContext& encoder,
                                            const KvShape& shape, DType dtype,
                                            uint64_t transfer_id, const LayerProducer& produce,
                                            int max_queued_layers) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.tokens <= 0 || shape.head_dim <= 0)
    return Status::InvalidArgument("StreamKvWhileProducing: the KV shape must be positive");
  KvCache staging(dtype, shape);
  const MutableKvView target = staging.mutable_view();
  LayerGate gate;
  return RunProducer(
      gate, shape.layers,
      [&] {
        return StreamLayers(connection, encoder, staging.view(), transfer_id, max_queued_layers,
                            &gate);
      },
      [&](int* next_layer, std::string* mismatch) {
        return produce([&](int layer, const KvView& layer_kv) {
          if (!mismatch->empty() || layer != *next_layer || layer >= shape.layers ||
              layer_kv.dtype != dtype || layer_kv.shape.layers != 1 ||
              layer_kv.shape.kv_heads != shape.kv_heads || layer_kv.shape.tokens != shape.tokens ||
              layer_kv.shape.head_dim != shape.head_dim) {
            if (mismatch->empty()) {
              const KvShape& s = layer_kv.shape;
              *mismatch = "then layer " + std::to_string(layer) + " as [" +
                          std::to_string(s.layers) + "," + std::to_string(s.kv_heads) + "," +
                          std::to_string(s.tokens) + "," + std::to_string(s.head_dim) + "] " +
                          std::string(DTypeName(layer_kv.dtype));
            }
            gate.Fail();  // the transfer is aborted; the producer's result is still whole
            return;
          }
          CopyLayer(layer_kv, target, layer);
          gate.MarkReady(++*next_layer);
        });
      });
}

Result<StreamResult> StreamKvWhileProducing(Connection& connection, EncoderContext& encoder,
                                            const PagedKvView& kv, uint64_t transfer_id,
                                            const PagedLayerProducer& produce,
                                            int max_queued_layers) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  LayerGate gate;
  return RunProducer(
      gate, kv.shape.layers,
      [&] { return StreamLayers(connection, encoder, kv, transfer_id, max_queued_layers, &gate); },
      [&](int* next_layer, std::string* mismatch) {
        return produce([&](int layer) {
          if (!mismatch->empty() || layer != *next_layer || layer >= kv.shape.layers) {
            if (mismatch->empty()) *mismatch = "then layer " + std::to_string(layer);
            gate.Fail();
            return;
          }
          gate.MarkReady(++*next_layer);
        });
      });
}

Result<StreamResult> StreamFrame(Connection& connection, std::span<const uint8_t> frame,
                                 uint64_t transfer_id) {
  StreamResult result;
  const double start = MonotonicSeconds();
  FrameSender sender(&connection);
  Status s = sender.sink(transfer_id).Append(frame);
  if (s.ok() && sender.sink_has_partial())
    s = Status::Corruption("stored frame is truncated (" + std::to_string(frame.size()) + " bytes)");
  if (!s.ok()) {
    if (s.code() == StatusCode::kCorruption) (void)sender.Abort(s);
    return s.WithContext("sending stored frame as transfer " + std::to_string(transfer_id));
  }
  KVSERVE_ASSIGN_OR_RETURN(result.transfer, sender.Finish());
  result.ack_time = MonotonicSeconds();
  result.kv_seconds = result.ack_time - start;
  return result;
}

}  // namespace kvserve
