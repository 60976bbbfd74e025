// Copyright kvserve authors. The fault-injecting Transport wrapper.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "kvserve/transport.h"
#include "transport/poll_wait.h"

namespace kvserve {

struct FaultInjectingTransport::State {
  std::mutex mu;
  FaultPlan connect_plan;
  FaultPlan accept_plan;
  FaultCounters counters;
};

namespace {

using State = FaultInjectingTransport::State;

class FaultyStream final : public Stream {
 public:
  FaultyStream(std::unique_ptr<Stream> base, FaultPlan plan, std::shared_ptr<State> state)
      : base_(std::move(base)), plan_(plan), state_(std::move(state)) {}

  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override {
    if (plan_.event_after_bytes >= 0 && !event_fired_ && plan_.on_event &&
        written_ + static_cast<int64_t>(bytes.size()) > plan_.event_after_bytes) {
      // Write up to the offset, let the test act, then go on.
      const size_t head = static_cast<size_t>(std::max<int64_t>(0, plan_.event_after_bytes - written_));
      if (head > 0) KVSERVE_RETURN_IF_ERROR(WriteFaulty(bytes.first(head), timeout_seconds));
      event_fired_ = true;
      plan_.on_event();
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        ++state_->counters.events;
      }
      return WriteFaulty(bytes.subspan(head), timeout_seconds);
    }
    return WriteFaulty(bytes, timeout_seconds);
  }

  Status WriteFaulty(std::span<const uint8_t> bytes, double timeout_seconds) {
    if (bytes.empty()) return Status::Ok();
    transport::SleepSeconds(plan_.write_delay_seconds);
    if (dropped_.load()) return Status::Unavailable("stream closed (injected drop)");
    std::span<const uint8_t> out = bytes;
    bool drop = false;
    if (plan_.drop_after_bytes >= 0 &&
        written_ + static_cast<int64_t>(bytes.size()) >= plan_.drop_after_bytes) {
      out = bytes.first(static_cast<size_t>(std::max<int64_t>(0, plan_.drop_after_bytes - written_)));
      drop = true;
    }
    std::vector<uint8_t> copy;
    if (plan_.corrupt_byte_at >= written_ &&
        plan_.corrupt_byte_at < written_ + static_cast<int64_t>(out.size())) {
      copy.assign(out.begin(), out.end());
      copy[static_cast<size_t>(plan_.corrupt_byte_at - written_)] ^= 0x5A;
      out = copy;
      std::lock_guard<std::mutex> lock(state_->mu);
      ++state_->counters.corruptions;
    }
    Status s = out.empty() ? Status::Ok() : base_->Write(out, timeout_seconds);
    written_ += static_cast<int64_t>(out.size());
    if (drop) {
      dropped_ = true;
      base_->Close();
      std::lock_guard<std::mutex> lock(state_->mu);
      ++state_->counters.drops;
      return Status::Unavailable("stream closed (injected drop after " +
                                 std::to_string(plan_.drop_after_bytes) + " bytes)");
    }
    return s;
  }

  Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) override {
    transport::SleepSeconds(plan_.read_delay_seconds);
    if (plan_.max_read_bytes > 0 && buffer.size() > plan_.max_read_bytes)
      buffer = buffer.first(plan_.max_read_bytes);
    return base_->Read(buffer, timeout_seconds);
  }

  void Close() override { base_->Close(); }
  std::string RemoteAddress() const override { return base_->RemoteAddress(); }
  int PollHandle() const override { return base_->PollHandle(); }

 private:
  std::unique_ptr<Stream> base_;
  FaultPlan plan_;
  std::shared_ptr<State> state_;
  int64_t written_ = 0;  // only the writing thread touches it
  bool event_fired_ = false;
  std::atomic<bool> dropped_{false};
};

class FaultyListener final : public Listener {
 public:
  FaultyListener(std::unique_ptr<Listener> base, std::shared_ptr<State> state)
      : base_(std::move(base)), state_(std::move(state)) {}
  Result<std::unique_ptr<Stream>> Accept(double timeout_seconds) override {
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, base_->Accept(timeout_seconds));
    FaultPlan plan;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      plan = state_->accept_plan;
      ++state_->counters.accepts;
    }
    return std::unique_ptr<Stream>(new FaultyStream(std::move(s), plan, state_));
  }
  std::string Address() const override { return base_->Address(); }
  void Close() override { base_->Close(); }

 private:
  std::unique_ptr<Listener> base_;
  std::shared_ptr<State> state_;
};

}  // namespace

FaultInjectingTransport::FaultInjectingTransport(Transport* base)
    : base_(base), state_(std::make_shared<State>()) {}
FaultInjectingTransport::~FaultInjectingTransport() = default;

void FaultInjectingTransport::SetConnectPlan(const FaultPlan& plan) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->connect_plan = plan;
}
void FaultInjectingTransport::SetAcceptPlan(const FaultPlan& plan) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->accept_plan = plan;
}
FaultCounters FaultInjectingTransport::counters() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counters;
}

Result<std::unique_ptr<Stream>> FaultInjectingTransport::Connect(const std::string& address,
                                                                 double timeout_seconds) {
  FaultPlan plan;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    plan = state_->connect_plan;
    if (plan.refuse_connect) {
      ++state_->counters.refused_connects;
      return Status::Unavailable("connect to " + address + ": connection refused (injected)");
    }
    ++state_->counters.connects;
  }
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, base_->Connect(address, timeout_seconds));
  return std::unique_ptr<Stream>(new FaultyStream(std::move(s), plan, state_));
}

Result<std::unique_ptr<Listener>> FaultInjectingTransport::Listen(const std::string& address) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Listener> l, base_->Listen(address));
  return std::unique_ptr<Listener>(new FaultyListener(std::move(l), state_));
}

}  // namespace kvserve
