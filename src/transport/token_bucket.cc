// Copyright kvserve authors.
#include "transport/token_bucket.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <utility>

#include "transport/poll_wait.h"

namespace kvserve::transport {

TokenBucket::TokenBucket(double rate_bytes_per_second, double burst_bytes)
    : rate_(rate_bytes_per_second), burst_(std::max(1.0, burst_bytes)), tokens_(burst_) {}

void TokenBucket::SetRate(double rate_bytes_per_second, double burst_bytes) {
  rate_ = rate_bytes_per_second;
  burst_ = std::max(1.0, burst_bytes);
  tokens_ = std::min(tokens_, burst_);
}

double TokenBucket::Reserve(double bytes, double now_seconds) {
  if (last_ >= 0 && now_seconds > last_) tokens_ = std::min(burst_, tokens_ + (now_seconds - last_) * rate_);
  if (last_ < 0 || now_seconds > last_) last_ = now_seconds;
  tokens_ -= bytes;
  return tokens_ >= 0 ? 0.0 : -tokens_ / rate_;
}

namespace {

double DefaultBurst(double rate) { return std::max(16.0 * 1024, rate * 0.002); }

}  // namespace
}  // namespace kvserve::transport

namespace kvserve {

struct SharedLink::State {
  std::mutex mu;
  transport::TokenBucket bucket;
  bool burst_given;
  double bytes = 0;
  std::atomic<int> transfers{0};
  State(double rate, double burst, bool given) : bucket(rate, burst), burst_given(given) {}
};

SharedLink::SharedLink(double bytes_per_second, double burst_bytes)
    : state_(std::make_unique<State>(bytes_per_second,
                                     burst_bytes > 0 ? burst_bytes : transport::DefaultBurst(bytes_per_second),
                                     burst_bytes > 0)) {}
SharedLink::~SharedLink() = default;

Result<std::shared_ptr<SharedLink>> SharedLink::Create(double bytes_per_second, double burst_bytes) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second))
    return Status::InvalidArgument("a shared link's rate must be a positive number of bytes/s");
  if (!(burst_bytes >= 0) || !std::isfinite(burst_bytes))
    return Status::InvalidArgument("a shared link's depth must be >= 0 bytes (0: the default)");
  return std::shared_ptr<SharedLink>(new SharedLink(bytes_per_second, burst_bytes));
}

double SharedLink::rate() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bucket.rate();
}

double SharedLink::burst() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bucket.burst();
}

void SharedLink::SetRate(double bytes_per_second) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->bucket.SetRate(bytes_per_second,
                         state_->burst_given ? state_->bucket.burst() : transport::DefaultBurst(bytes_per_second));
}

double SharedLink::Reserve(double bytes, double now_seconds) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->bytes += bytes;
  return state_->bucket.Reserve(bytes, now_seconds);
}

double SharedLink::bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->bytes;
}

int SharedLink::transfers() const { return state_->transfers.load(); }
void SharedLink::EnterTransfer() { state_->transfers.fetch_add(1); }
void SharedLink::LeaveTransfer() { state_->transfers.fetch_sub(1); }

}  // namespace kvserve

namespace kvserve::transport {
namespace {

class SharedLinkStream final : public Stream {
 public:
  SharedLinkStream(std::unique_ptr<Stream> base, std::shared_ptr<SharedLink> link)
      : base_(std::move(base)), link_(std::move(link)) {}
  // Pieces of at most the link's depth, each sent once the link lets it.
  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override {
    const size_t piece = std::max<size_t>(1, static_cast<size_t>(link_->burst()));
    for (size_t done = 0; done < bytes.size();) {
      const size_t n = std::min(piece, bytes.size() - done);
      SleepSeconds(link_->Reserve(static_cast<double>(n), MonotonicSeconds()));
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
  std::shared_ptr<SharedLink> link_;
};

}  // namespace

std::unique_ptr<Stream> NewSharedLinkStream(std::unique_ptr<Stream> base, std::shared_ptr<SharedLink> link) {
  return std::make_unique<SharedLinkStream>(std::move(base), std::move(link));
}

std::unique_ptr<Stream> NewShapedStream(std::unique_ptr<Stream> base, double rate_bytes_per_second,
                                        double burst_bytes) {
  // A link of its own: a SharedLink no other stream holds (depth 0: its default).
  auto link = SharedLink::Create(rate_bytes_per_second, burst_bytes);
  if (!link.ok()) return base;  // not a positive rate: unshaped
  return NewSharedLinkStream(std::move(base), std::move(*link));
}

}  // namespace kvserve::transport
