// Copyright kvserve authors. The server side of the authentication
// handshake (docs/transport.md §3) as a state machine: each Advance reads
// what the peer has sent so far and answers it, so one thread can drive the
// handshakes of many peers that it waits for with poll() on their
// PollHandle(). Connection::Establish(kServer) runs the same machine to the
// end on the calling thread. Internal to src/transport and the servers
// built on it.
#ifndef KVSERVE_TRANSPORT_SERVER_HANDSHAKE_H_
#define KVSERVE_TRANSPORT_SERVER_HANDSHAKE_H_

#include <memory>
#include <string>
#include <vector>

#include "kvserve/transport.h"
#include "transport/wire.h"

namespace kvserve {

// Not thread-safe, except Close (which may be called from any thread and
// makes a pending or later Advance fail).
class Connection::ServerHandshake {
 public:
  // Takes `stream`. The handshake must finish within
  // options.handshake_timeout_seconds of now, and within `deadline_seconds`
  // when that is >= 0.
  ServerHandshake(std::unique_ptr<Stream> stream, const ConnectionOptions& options,
                  double deadline_seconds = -1);
  ~ServerHandshake();  // Closes the stream unless Take() was called.
  ServerHandshake(const ServerHandshake&) = delete;
  ServerHandshake& operator=(const ServerHandshake&) = delete;

  // Reads what has arrived, waiting up to `wait_seconds` (capped at the
  // deadline) for the first byte, and answers every complete handshake
  // message. true: the peer is authenticated (call Take); false: more bytes
  // are needed (wait for the stream to become readable, or call again). An
  // error ends the handshake and closes the stream: the statuses of
  // Connection::Establish (Timeout when the deadline passed before the
  // HELLO, PermissionDenied when the peer did not prove the secret or
  // stopped answering, Corruption for a malformed message, Unavailable when
  // it hung up). Every later call returns the same error.
  [[nodiscard]] Result<bool> Advance(double wait_seconds);
  // The authenticated connection, once Advance returned true; else null.
  std::unique_ptr<Connection> Take();
  // MonotonicSeconds() by which the handshake must be done.
  double deadline() const { return deadline_; }
  // The stream's PollHandle() (-1: none; drive it with Advance(wait)).
  int poll_handle() const { return poll_handle_; }
  const std::string& remote() const;
  // True once some of the peer's bytes were read (it is not silent).
  bool progressed() const { return got_hello_ || !buffer_.empty(); }
  // Closes the stream (thread-safe).
  void Close();

 private:
  Status Fail(Status s);
  Status ReadFailure(const Status& s) const;
  Status TimeoutStatus() const;
  Status OnHello(const Message& hello);
  Status OnResponse(const Message& response);

  std::unique_ptr<Impl> impl_;
  double deadline_ = 0;
  int poll_handle_ = -1;
  std::vector<uint8_t> buffer_;  // the message being read (<= 20 + 1024 bytes)
  transport::MessageHeader header_;
  bool have_header_ = false;
  bool got_hello_ = false;
  bool done_ = false;
  std::string client_id_;
  std::vector<uint8_t> transcript_;
  Status failed_;
};

}  // namespace kvserve

#endif  // KVSERVE_TRANSPORT_SERVER_HANDSHAKE_H_
