// Copyright kvserve authors. Layer-wise encode/send pipeline.
#include "serve/kv_streamer.h"

#include <algorithm>
#include <condition_variable>
#include <string>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::serve {
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
  // False once closed and drained.
  bool Pop(std::vector<uint8_t>* out) {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
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

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<std::vector<uint8_t>> items_;
  size_t capacity_;
  bool closed_ = false;
  bool failed_ = false;
};

}  // namespace

Result<StreamResult> StreamKv(Connection& connection, EncoderContext& encoder, const KvView& kv,
                              uint64_t transfer_id, int max_queued_layers) {
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
    encode_status = timed([&] { return encoder.EncodeLayer(layer, kv); });
    if (encode_status.ok() && !flush()) break;  // the sender failed
  }
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
  result.kv_seconds = MonotonicSeconds() - start;
  return result;
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
  result.kv_seconds = MonotonicSeconds() - start;
  return result;
}

}  // namespace kvserve::serve
