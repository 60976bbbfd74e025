// Copyright kvserve authors. The UCX side of the UCX transport
// (docs/transport.md §UCX): one UCP context and worker per transport, driven
// by a progress thread, every UCP call under one mutex (sends are made from
// the writer's own thread, so a write costs no thread hand-off), and the
// per-stream state that Stream::Write/Read share with it. Internal to
// src/transport.
//
// Data path: a stream's bytes travel as UCP active messages (id kAmId) whose
// 32-byte header names the receiving stream by a random 128-bit id (so an
// endpoint that does not know the id cannot inject into the stream) and
// carries the byte offset of the segment. The receiver accepts at most
// `window` unread bytes; the sender learns what was read from CREDIT
// messages and blocks (back-pressure) when a full window is unread. Large
// segments go by rendezvous straight into the receiver's segment buffer.
//
// Control path: the TCP connection of the bootstrap stays open. A stream
// closed locally flushes its endpoint and then sends CLOSE(total bytes sent)
// on it; the peer delivers exactly that many bytes before reporting end of
// stream. A control connection that ends without CLOSE means the peer
// process died (peer-failure detection independent of the UCX transport in
// use); a UCP endpoint error means the UCX path failed.
#ifndef KVSERVE_TRANSPORT_UCX_ENGINE_H_
#define KVSERVE_TRANSPORT_UCX_ENGINE_H_

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve::transport::ucx {

using StreamId = std::array<uint8_t, 16>;

// Active-message header, little-endian: u8 kind, 7 reserved (0), stream id
// (16), u64 value (DATA: byte offset of the segment; CREDIT: bytes the
// receiver has read in total).
inline constexpr size_t kAmHeaderBytes = 32;
inline constexpr uint8_t kAmData = 1;
inline constexpr uint8_t kAmCredit = 2;

// One received (or being received) run of stream bytes.
struct Segment {
  std::unique_ptr<uint8_t[]> data;
  size_t length = 0;
  size_t consumed = 0;
  bool complete = false;
  bool pooled = false;  // data is a segment_bytes buffer from the pool
};

struct StreamState;
// Gives `seg` (length set) a buffer: a pooled segment_bytes one for
// segments of a quarter segment or more, else its own. Called with s.mu held.
void AllocateSegment(StreamState& s, Segment& seg);

// Counts the sends of one Write. Shared with the sends: a Write that gives
// up on sends that will never complete (see Engine::SendsAlwaysComplete)
// leaves them a live object to complete into. A buffered (write-behind)
// Write owns a copy of its bytes here; the copy lives until its last send
// completes, when the op is released.
struct WriteOp {
  int outstanding = 0;
  Status error;
  std::unique_ptr<uint8_t[]> owned;  // write-behind copy, or null
  size_t owned_bytes = 0;
  bool pooled = false;  // owned is a segment_bytes buffer of the stream's send pool
};

struct StreamState;
// The largest Write that is buffered (write-behind):
// min(write_behind_limit, max(segment_bytes, write_behind_limit / 4)), 0
// when write-behind is off; also the size of the send pool's buffers.
uint64_t BufferedWriteMax(const StreamState& s);
// Called with s.mu held when op.outstanding dropped to 0: a buffered op's
// bytes leave s.buffered and its failure becomes the stream's.
void FinishWriteOp(StreamState& s, WriteOp& op);

// State shared by a UcxStream (the user's threads) and the engine thread.
// Fields under `mu` unless marked engine-only.
struct StreamState {
  StreamId local_id{};
  StreamId peer_id{};
  std::string remote;        // "host:port" of the peer's control connection
  uint64_t window = 0;       // bytes we accept unread (advertised to the peer)
  uint64_t peer_window = 0;  // bytes the peer accepts unread
  size_t segment_bytes = 0;  // largest segment we send
  std::shared_ptr<Stream> control;  // the bootstrap TCP stream (engine-only after Open)

  std::mutex mu;
  std::condition_variable cv;
  double last_progress = 0;  // MonotonicSeconds() of the last send completion or credit
  // Send side.
  uint64_t send_offset = 0;     // bytes handed to UCP
  uint64_t send_completed = 0;  // bytes whose send completed successfully
  uint64_t peer_read = 0;       // the peer's read total from its last CREDIT
  // Write-behind: bytes of buffered Writes whose sends have not all
  // completed, at most write_behind_limit (0: every Write waits for its
  // sends, zero-copy).
  uint64_t buffered = 0;
  uint64_t write_behind_limit = 0;
  // Reused BufferedWriteMax buffers for large write-behind copies (fresh
  // megabyte allocations would page-fault on every copy).
  std::vector<std::unique_ptr<uint8_t[]>> send_free_buffers;
  // Receive side: segments by stream offset, all at or after read_offset.
  std::map<uint64_t, Segment> segments;
  uint64_t read_offset = 0;
  uint64_t granted = 0;  // read_offset last sent in a CREDIT
  std::vector<std::unique_ptr<uint8_t[]>> free_buffers;
  // Lifecycle.
  bool local_closed = false;
  bool peer_closed = false;  // CLOSE received on the control connection
  uint64_t peer_total = 0;   // ... with this many bytes sent
  Status failure;            // control lost, endpoint error, protocol violation, write timeout

  // An eventfd that is readable whenever Read may have something to return
  // (data, a close, a failure), or -1 until PollHandle() asks for one: a
  // server waits on it for many unauthenticated peers at once
  // (docs/transport.md §3, admission). Closed with the state.
  int poll_fd = -1;
  // Whether poll_fd's counter is non-zero: it is written and drained only
  // on a change, so a stream read steadily costs no eventfd system calls.
  bool poll_signaled = false;
  // Wakes a blocked Read/Write and signals poll_fd. Called with mu held.
  void Notify();
  ~StreamState();

  // Engine-only (under the engine's worker mutex).
  void* ep = nullptr;  // ucp_ep_h
  bool closing = false;
  bool flushed = false;  // the close's endpoint flush completed
  double flush_deadline = 0;
  std::vector<uint8_t> control_buffer;
  bool control_done = false;
};

// A UCP context + worker driven by one thread. Thread safety: thread-safe;
// every UCP call holds the engine's worker mutex. Send and Credit must be
// called without holding the stream's mutex (their completion takes it).
class Engine {
 public:
  struct Options {
    std::string tls;
    std::string net_devices;
  };
  // Starts the engine thread and initialises UCP on it. IOError when UCP
  // cannot be initialised (e.g. no transport in `tls` is available).
  static Result<std::shared_ptr<Engine>> Create(const Options& options);
  ~Engine();  // Closes every endpoint, stops the thread, releases UCP.
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // This worker's address, for the peer's endpoint.
  const std::vector<uint8_t>& worker_address() const { return worker_address_; }
  // The transports UCP chose for this worker ("tcp, posix, cma, self ...").
  const std::string& description() const { return description_; }

  // Registers `state` (its local id, window and control stream set): from
  // now on data addressed to its id is accepted, before its endpoint
  // exists, so nothing the peer sends right after the bootstrap is lost.
  Status Register(const std::shared_ptr<StreamState>& state);
  // Creates the registered stream's endpoint to the worker at
  // `peer_address` (peer id and window set) and starts watching its control
  // connection. IOError when UCP refuses the address.
  Status Open(const std::shared_ptr<StreamState>& state, std::span<const uint8_t> peer_address);
  // Sends bytes[0, length) of the stream at the stream's send_offset; the
  // caller already advanced send_offset and counted the send in `op`.
  // `bytes` must stay valid until op->outstanding drops (or, where sends do
  // not always complete, until the stream's endpoint is closed).
  void Send(const std::shared_ptr<StreamState>& state, const uint8_t* bytes, size_t length,
            uint64_t offset, const std::shared_ptr<WriteOp>& op);
  // Whether UCX completes every send of a force-closed endpoint (UCX's
  // peer-failure mode, network transports). Without it (shared memory) the
  // sends to a dead peer never complete, and nothing will read their bytes.
  bool SendsAlwaysComplete() const;
  // Sends CREDIT(read_total) to the peer.
  void Credit(const std::shared_ptr<StreamState>& state, uint64_t read_total);
  // Flushes and closes the stream's endpoint, then sends CLOSE on its
  // control connection and closes that; the state is forgotten afterwards.
  // With `force` the endpoint is closed at once (outstanding sends fail).
  void Close(const std::shared_ptr<StreamState>& state, bool force);

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<uint8_t> worker_address_;
  std::string description_;
};

// Random stream id from OpenSSL's CSPRNG.
Status RandomStreamId(StreamId* id);

}  // namespace kvserve::transport::ucx

#endif  // KVSERVE_TRANSPORT_UCX_ENGINE_H_
