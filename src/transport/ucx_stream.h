// Copyright kvserve authors. The Stream of the UCX transport. Internal to
// src/transport.
#ifndef KVSERVE_TRANSPORT_UCX_STREAM_H_
#define KVSERVE_TRANSPORT_UCX_STREAM_H_

#include <memory>
#include <mutex>
#include <string>

#include "kvserve/transport.h"
#include "transport/ucx_engine.h"

namespace kvserve::transport::ucx {

// A bootstrapped, registered and opened stream (ucx_transport.cc makes
// them). Thread safety: the Stream contract (one writer, one reader, Close
// from anywhere).
class UcxStream final : public Stream {
 public:
  UcxStream(std::shared_ptr<Engine> engine, std::shared_ptr<StreamState> state);
  ~UcxStream() override;
  // Cuts `bytes` into segments of at most segment_bytes sent as the peer's
  // window allows and returns once UCP completed every one, or, for a
  // write-behind Write (at most min(segment_bytes, write_behind_bytes)),
  // once every send of its copy is started. Timeout when neither a send
  // completed nor the peer read anything for `timeout_seconds` (the stream
  // is then unusable); Unavailable after a local or peer close or a peer
  // failure, including a buffered send of an earlier Write that failed.
  [[nodiscard]] Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override;
  // Copies from the oldest complete segment. Timeout when nothing arrives in
  // time (the stream stays usable); Unavailable at the end of a closed
  // stream or after a failure (once what was received is read).
  [[nodiscard]] Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) override;
  void Close() override;
  std::string RemoteAddress() const override;
  // An eventfd, made on the first call, that is readable while Read would
  // return without waiting (data, a close, a failure); -1 if none can be made.
  int PollHandle() const override;

 private:
  Status WriteError(const StreamState& s) const;
  // Sends CREDIT once a quarter window was read since the last one; may
  // release `lock` (held on s.mu) to do so.
  void GrantCredit(StreamState& s, std::unique_lock<std::mutex>& lock);
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<StreamState> state_;
};

}  // namespace kvserve::transport::ucx

#endif  // KVSERVE_TRANSPORT_UCX_STREAM_H_
