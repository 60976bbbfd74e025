// Copyright kvserve authors. The Stream of the UCX transport: writes cut into
// active messages within the peer's credit window, reads from the segments
// the engine received (ucx_engine.h has the protocol).
#include "transport/ucx_stream.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace kvserve::transport::ucx {

namespace {

// Makes s.poll_fd readable (`on`) or not, with a system call only when that
// changes. Called with s.mu held.
void SetPollSignal(StreamState& s, bool on) {
  if (s.poll_fd < 0 || s.poll_signaled == on) return;
  uint64_t value = 1;
  if (on) {
    (void)!::write(s.poll_fd, &value, sizeof(value));
  } else {
    (void)!::read(s.poll_fd, &value, sizeof(value));
  }
  s.poll_signaled = on;
}

}  // namespace

void StreamState::Notify() {
  cv.notify_all();
  SetPollSignal(*this, true);
}

StreamState::~StreamState() {
  if (poll_fd >= 0) ::close(poll_fd);
}

namespace {

// True when the oldest segment starts at the read offset and is complete.
// Called with s.mu held.
bool FrontReady(const StreamState& s) {
  auto front = s.segments.begin();
  return front != s.segments.end() && front->second.complete &&
         front->first + front->second.consumed == s.read_offset;
}

// True when Read would return without waiting: a complete segment at the
// read offset, a close or a failure. Called with s.mu held.
bool Readable(const StreamState& s) {
  return FrontReady(s) || s.local_closed || s.peer_closed || !s.failure.ok();
}

// Leaves s.poll_fd signalled exactly while Read still has something to
// return (or a change is on its way), touching it only when that changes.
// Called with s.mu held.
void ResetPollFd(StreamState& s) { SetPollSignal(s, Readable(s)); }

// Waits on s.cv until `ready`, or false once MonotonicSeconds() passes
// `deadline()` (re-read after every wake-up: an idle deadline moves with
// progress).
template <typename Deadline, typename Pred>
bool WaitUntil(StreamState& s, std::unique_lock<std::mutex>& lock, Deadline deadline, Pred ready) {
  for (;;) {
    if (ready()) return true;
    const double left = deadline() - MonotonicSeconds();
    if (left <= 0) return ready();
    s.cv.wait_for(lock, std::chrono::duration<double>(std::min(left, 3600.0)));
  }
}

}  // namespace

UcxStream::UcxStream(std::shared_ptr<Engine> engine, std::shared_ptr<StreamState> state)
    : engine_(std::move(engine)), state_(std::move(state)) {}

UcxStream::~UcxStream() { Close(); }

Status UcxStream::WriteError(const StreamState& s) const {
  if (s.local_closed) return Status::Unavailable("stream closed");
  if (s.peer_closed) return Status::Unavailable("connection closed by peer " + s.remote);
  return s.failure;
}

Status UcxStream::Write(std::span<const uint8_t> bytes, double timeout_seconds) {
  StreamState& s = *state_;
  auto op = std::make_shared<WriteOp>();
  Status result;
  std::unique_lock<std::mutex> lock(s.mu);
  s.last_progress = MonotonicSeconds();
  // Idle timeout: no send completion or credit for timeout_seconds.
  auto idle_deadline = [&] {
    return timeout_seconds < 0 ? std::numeric_limits<double>::infinity()
                               : s.last_progress + timeout_seconds;
  };
  // Write-behind: a Write of at most BufferedWriteMax sends from a copy
  // and does not wait for its sends (UcxOptions::write_behind_bytes).
  const bool buffered = !bytes.empty() && bytes.size() <= BufferedWriteMax(s);
  if (buffered) {
    const bool room = WaitUntil(s, lock, idle_deadline, [&] {
      return s.buffered + bytes.size() <= s.write_behind_limit || !WriteError(s).ok();
    });
    result = WriteError(s);
    if (result.ok() && !room)
      result = Status::Timeout("write to " + s.remote + ": no send completed within " +
                               std::to_string(timeout_seconds) + " s");
    if (!result.ok()) {
      if (result.code() == StatusCode::kTimeout && s.failure.ok()) s.failure = result;
      return result.WithContext("UCX");
    }
    // Copies of more than 64 KiB go to a reused BufferedWriteMax buffer.
    op->pooled = bytes.size() > 64 * 1024;
    if (op->pooled && !s.send_free_buffers.empty()) {
      op->owned = std::move(s.send_free_buffers.back());
      s.send_free_buffers.pop_back();
    }
    if (op->owned == nullptr)
      op->owned = std::make_unique_for_overwrite<uint8_t[]>(op->pooled ? BufferedWriteMax(s)
                                                                       : bytes.size());
    op->owned_bytes = bytes.size();
    s.buffered += bytes.size();
    op->outstanding = 1;  // this Write, until its last send is started
  }
  size_t issued = 0;
  while (issued < bytes.size()) {
    result = WriteError(s);
    if (!result.ok()) break;
    const uint64_t limit = s.peer_read + s.peer_window;
    if (s.send_offset >= limit) {
      // Back-pressure: a full window is unread by the peer.
      const bool moved = WaitUntil(s, lock, idle_deadline, [&] {
        return s.peer_read + s.peer_window > s.send_offset || !WriteError(s).ok();
      });
      if (!moved) {
        result = Status::Timeout("write to " + s.remote + ": the peer read nothing within " +
                                 std::to_string(timeout_seconds) + " s");
        break;
      }
      continue;
    }
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>({limit - s.send_offset, s.segment_bytes, bytes.size() - issued}));
    const uint64_t offset = s.send_offset;
    s.send_offset += n;
    ++op->outstanding;
    // The engine's callbacks take s.mu: never call into it holding that.
    lock.unlock();
    const uint8_t* from = bytes.data() + issued;
    if (buffered) {
      // Copied segment by segment, so the peer fetches one while the next
      // is copied.
      std::memcpy(op->owned.get() + issued, from, n);
      from = op->owned.get() + issued;
    }
    engine_->Send(state_, from, n, offset, op);
    lock.lock();
    issued += n;
  }
  if (buffered) {
    // The sends own their bytes; the last one to finish (or this Write)
    // releases them from s.buffered. Bytes never started leave a gap in
    // the stream: it fails.
    if (!result.ok() && s.failure.ok()) s.failure = result;
    if (--op->outstanding == 0) FinishWriteOp(s, *op);
    return result.ok() ? result : result.WithContext("UCX");
  }
  // The sends reference the caller's bytes: wait for every one of them.
  if (result.ok()) {
    const bool done = WaitUntil(s, lock, idle_deadline, [&] {
      return op->outstanding == 0 || !WriteError(s).ok();
    });
    if (!done) {
      result = Status::Timeout("write to " + s.remote + ": no progress within " +
                               std::to_string(timeout_seconds) + " s");
    } else if (op->outstanding > 0) {
      result = WriteError(s);  // closed or failed with sends in flight
    }
  }
  if (op->outstanding > 0) {
    // Failed or timed out with sends in flight: close the endpoint by force
    // (its sends complete as cancelled) so the bytes are released.
    if (s.failure.ok()) s.failure = result;
    engine_->Close(state_, /*force=*/true);
    if (engine_->SendsAlwaysComplete()) {
      s.cv.wait(lock, [&] { return op->outstanding == 0; });
    } else {
      // Shared memory: sends to a dead peer never complete and no one will
      // read their bytes once the endpoint is closed; give them a moment.
      s.cv.wait_for(lock, std::chrono::seconds(2), [&] { return op->outstanding == 0; });
    }
  }
  if (result.ok()) result = op->error;
  if (!result.ok() && result.code() == StatusCode::kTimeout && s.failure.ok()) s.failure = result;
  return result.ok() ? result : result.WithContext("UCX");
}

Result<size_t> UcxStream::Read(std::span<uint8_t> buffer, double timeout_seconds) {
  if (buffer.empty()) return Status::InvalidArgument("Read into an empty buffer");
  StreamState& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  const double deadline = timeout_seconds < 0 ? std::numeric_limits<double>::infinity()
                                              : MonotonicSeconds() + timeout_seconds;
  for (;;) {
    auto it = s.segments.begin();
    // The oldest segment starts at read_offset - consumed (all before it
    // were read).
    const bool at_front =
        it != s.segments.end() && it->first + it->second.consumed == s.read_offset;
    if (at_front && it->second.complete) {
      Segment& seg = it->second;
      const size_t n = std::min(buffer.size(), seg.length - seg.consumed);
      std::memcpy(buffer.data(), seg.data.get() + seg.consumed, n);
      seg.consumed += n;
      s.read_offset += n;
      if (seg.consumed == seg.length) {
        if (seg.pooled && s.free_buffers.size() * s.segment_bytes < s.window)
          s.free_buffers.push_back(std::move(seg.data));
        s.segments.erase(it);
      }
      ResetPollFd(s);
      GrantCredit(s, lock);
      return n;
    }
    if (s.local_closed) return Status::Unavailable("stream closed");
    if (s.peer_closed && s.read_offset >= s.peer_total)
      return Status::Unavailable("connection closed by peer " + s.remote);
    if (!s.failure.ok() && !at_front) return s.failure;
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) {
      ResetPollFd(s);
      return Status::Timeout("read from " + s.remote + ": nothing within " +
                             std::to_string(timeout_seconds) + " s");
    }
    // Until something changes: data at the front, a close, a failure.
    const size_t held = s.segments.size();
    const bool was_closed = s.peer_closed, was_failed = !s.failure.ok();
    WaitUntil(s, lock, [&] { return deadline; }, [&] {
      return FrontReady(s) || s.local_closed || s.peer_closed != was_closed ||
             !s.failure.ok() != was_failed || s.segments.size() != held;
    });
  }
}

void UcxStream::GrantCredit(StreamState& s, std::unique_lock<std::mutex>& lock) {
  // Tell the sender what was read once a quarter window accumulated.
  if (s.read_offset - s.granted >= std::max<uint64_t>(1, s.window / 4)) {
    s.granted = s.read_offset;
    const uint64_t total = s.read_offset;
    lock.unlock();  // the engine's callbacks take s.mu
    engine_->Credit(state_, total);
  }
}

void UcxStream::Close() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->local_closed) return;
    state_->local_closed = true;
    state_->Notify();
  }
  engine_->Close(state_, /*force=*/false);
}

std::string UcxStream::RemoteAddress() const { return "ucx:" + state_->remote; }

int UcxStream::PollHandle() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->poll_fd < 0) {
    state_->poll_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    SetPollSignal(*state_, Readable(*state_));
  }
  return state_->poll_fd;
}

}  // namespace kvserve::transport::ucx
