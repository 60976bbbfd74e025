// Copyright kvserve authors. In-process streams: two bounded ring buffers per
// connection, guarded by a mutex and condition variables.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvserve/transport.h"

namespace kvserve {
namespace {

// One direction: a bounded byte ring. Closing marks the pipe closed for both
// ends; a reader still drains what was written before.
class Pipe {
 public:
  explicit Pipe(size_t capacity) : ring_(capacity) {}

  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) {
    size_t done = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (done < bytes.size()) {
      if (!WaitFor(lock, timeout_seconds, [&] { return closed_ || size_ < ring_.size(); }))
        return Status::Timeout("loopback write: no progress within " +
                               std::to_string(timeout_seconds) + " s");
      if (closed_) return Status::Unavailable("stream closed");
      while (done < bytes.size() && size_ < ring_.size()) {
        size_t tail = (head_ + size_) % ring_.size();
        size_t n = std::min({bytes.size() - done, ring_.size() - size_, ring_.size() - tail});
        std::copy_n(bytes.data() + done, n, ring_.data() + tail);
        size_ += n;
        done += n;
      }
      cv_.notify_all();
    }
    return Status::Ok();
  }

  Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!WaitFor(lock, timeout_seconds, [&] { return closed_ || size_ > 0; }))
      return Status::Timeout("loopback read: nothing within " + std::to_string(timeout_seconds) +
                             " s");
    if (size_ == 0) return Status::Unavailable("connection closed by peer");
    size_t n = std::min({buffer.size(), size_, ring_.size() - head_});
    std::copy_n(ring_.data() + head_, n, buffer.data());
    head_ = (head_ + n) % ring_.size();
    size_ -= n;
    cv_.notify_all();
    return n;
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  // One condition variable serves both directions' waiters: every state
  // change notifies all of them and each re-checks its own predicate.
  template <typename Pred>
  bool WaitFor(std::unique_lock<std::mutex>& lock, double timeout_seconds, Pred pred) {
    if (timeout_seconds < 0) {
      cv_.wait(lock, pred);
      return true;
    }
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), pred);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint8_t> ring_;
  size_t head_ = 0, size_ = 0;
  bool closed_ = false;
};

class LoopbackStream final : public Stream {
 public:
  LoopbackStream(std::shared_ptr<Pipe> in, std::shared_ptr<Pipe> out, std::string remote)
      : in_(std::move(in)), out_(std::move(out)), remote_(std::move(remote)) {}
  ~LoopbackStream() override { Close(); }
  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override {
    return out_->Write(bytes, timeout_seconds);
  }
  Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) override {
    if (buffer.empty()) return Status::InvalidArgument("Read into an empty buffer");
    return in_->Read(buffer, timeout_seconds);
  }
  void Close() override {
    in_->Close();
    out_->Close();
  }
  std::string RemoteAddress() const override { return remote_; }

 private:
  std::shared_ptr<Pipe> in_, out_;
  std::string remote_;
};

struct Registry;

struct ListenerState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Stream>> pending;
  bool closed = false;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<ListenerState>> listeners;
  LoopbackTransportOptions options;
  uint64_t next_client = 0;
};

class LoopbackListener final : public Listener {
 public:
  LoopbackListener(std::shared_ptr<Registry> registry, std::string name,
                   std::shared_ptr<ListenerState> state)
      : registry_(std::move(registry)), name_(std::move(name)), state_(std::move(state)) {}
  ~LoopbackListener() override { Close(); }

  Result<std::unique_ptr<Stream>> Accept(double timeout_seconds) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    auto ready = [&] { return state_->closed || !state_->pending.empty(); };
    if (timeout_seconds < 0) {
      state_->cv.wait(lock, ready);
    } else if (!state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds), ready)) {
      return Status::Timeout("no connection within " + std::to_string(timeout_seconds) + " s");
    }
    if (state_->closed) return Status::Unavailable("listener closed");
    auto stream = std::move(state_->pending.front());
    state_->pending.pop_front();
    return stream;
  }
  std::string Address() const override { return name_; }
  void Close() override {
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      auto it = registry_->listeners.find(name_);
      if (it != registry_->listeners.end() && it->second == state_) registry_->listeners.erase(it);
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    for (auto& s : state_->pending) s->Close();
    state_->pending.clear();
    state_->cv.notify_all();
  }

 private:
  std::shared_ptr<Registry> registry_;
  std::string name_;
  std::shared_ptr<ListenerState> state_;
};

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(LoopbackTransportOptions options)
      : registry_(std::make_shared<Registry>()) {
    registry_->options = options;
    if (registry_->options.buffer_bytes == 0) registry_->options.buffer_bytes = 1;
  }

  Result<std::unique_ptr<Stream>> Connect(const std::string& address, double) override {
    std::shared_ptr<ListenerState> state;
    uint64_t client = 0;
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      auto it = registry_->listeners.find(address);
      if (it == registry_->listeners.end())
        return Status::Unavailable("connect to loopback:" + address + ": connection refused");
      state = it->second;
      client = registry_->next_client++;
    }
    auto to_server = std::make_shared<Pipe>(registry_->options.buffer_bytes);
    auto to_client = std::make_shared<Pipe>(registry_->options.buffer_bytes);
    auto client_end = std::make_unique<LoopbackStream>(to_client, to_server, "loopback:" + address);
    auto server_end = std::make_unique<LoopbackStream>(
        to_server, to_client, "loopback:client-" + std::to_string(client));
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->closed || state->pending.size() >= registry_->options.backlog)
      return Status::Unavailable("connect to loopback:" + address + ": connection refused");
    state->pending.push_back(std::move(server_end));
    state->cv.notify_all();
    return std::unique_ptr<Stream>(std::move(client_end));
  }

  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    if (address.empty()) return Status::InvalidArgument("empty loopback address");
    std::lock_guard<std::mutex> lock(registry_->mu);
    if (registry_->listeners.count(address))
      return Status::Unavailable("loopback address '" + address + "' in use");
    auto state = std::make_shared<ListenerState>();
    registry_->listeners[address] = state;
    return std::unique_ptr<Listener>(new LoopbackListener(registry_, address, state));
  }

 private:
  std::shared_ptr<Registry> registry_;
};

}  // namespace

std::unique_ptr<Transport> NewLoopbackTransport(LoopbackTransportOptions options) {
  return std::make_unique<LoopbackTransport>(options);
}

}  // namespace kvserve
