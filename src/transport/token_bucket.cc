// Copyright kvserve authors.
#include "transport/token_bucket.h"

#include <algorithm>

#include "transport/poll_wait.h"

namespace kvserve::transport {

TokenBucket::TokenBucket(double rate_bytes_per_second, double burst_bytes)
    : rate_(rate_bytes_per_second), burst_(std::max(1.0, burst_bytes)), tokens_(burst_) {}

double TokenBucket::Reserve(double bytes, double now_seconds) {
  if (last_ >= 0 && now_seconds > last_) tokens_ = std::min(burst_, tokens_ + (now_seconds - last_) * rate_);
  if (last_ < 0 || now_seconds > last_) last_ = now_seconds;
  tokens_ -= bytes;
  return tokens_ >= 0 ? 0.0 : -tokens_ / rate_;
}

namespace {

class ShapedStream final : public Stream {
 public:
  ShapedStream(std::unique_ptr<Stream> base, double rate, double burst)
      : base_(std::move(base)), bucket_(rate, burst) {}
  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override {
    const size_t piece = std::max<size_t>(1, static_cast<size_t>(bucket_.burst()));
    for (size_t done = 0; done < bytes.size();) {
      size_t n = std::min(piece, bytes.size() - done);
      SleepSeconds(bucket_.Reserve(static_cast<double>(n), MonotonicSeconds()));
      KVSERVE_RETURN_IF_ERROR(base_->Write(bytes.subspan(done, n), timeout_seconds));
      done += n;
    }
    return Status::Ok();
  }
  Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) override {
    return base_->Read(buffer, timeout_seconds);
  }
  void Close() override { base_->Close(); }
  std::string RemoteAddress() const override { return base_->RemoteAddress(); }
  int PollHandle() const override { return base_->PollHandle(); }

 private:
  std::unique_ptr<Stream> base_;
  TokenBucket bucket_;
};

}  // namespace

std::unique_ptr<Stream> NewShapedStream(std::unique_ptr<Stream> base, double rate_bytes_per_second,
                                        double burst_bytes) {
  return std::make_unique<ShapedStream>(std::move(base), rate_bytes_per_second, burst_bytes);
}

}  // namespace kvserve::transport
