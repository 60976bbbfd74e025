// Copyright kvserve authors. Moving bytes between kvserve processes: a
// leveldb-Env-style Transport (so tests inject faults), framed and
// authenticated Connections on top of it, and layer-wise frame streaming with
// goodput measurement. docs/transport.md is the normative wire protocol.
//
// Layers, bottom up:
//   Transport / Listener / Stream   raw reliable byte streams. Implementations:
//                                   TCP (asio), in-process loopback, and a
//                                   fault-injecting wrapper around either.
//   Connection                      framed messages (type, flags, payload)
//                                   with size limits checked before any
//                                   allocation, payload checksums, timeouts,
//                                   optional token-bucket shaping, and a
//                                   mutual HMAC-SHA256 handshake.
//   FrameSender / ReceiveFrame      a KV frame's header and chunk records
//                                   streamed as they are produced; the
//                                   receiver sees each record on arrival.
//
// Units: bytes and seconds. Gbps only at the CLI (1 Gbps = 1.25e8 bytes/s).
// Timeouts are idle timeouts: the longest a blocking call waits without any
// progress, not a bound on a whole transfer. A negative timeout waits forever.
#ifndef KVSERVE_TRANSPORT_H_
#define KVSERVE_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/status.h"

namespace kvserve {

// ---------------------------------------------------------------------------
// Raw byte streams (the Env layer).

// A reliable, ordered, bidirectional byte stream.
//
// Thread safety: one thread may Write while another Reads; Close may be
// called from any thread at any time and unblocks both.
class Stream {
 public:
  virtual ~Stream() = default;
  // Writes all of `bytes`, blocking while the peer's or the OS's bounded
  // buffers are full (back-pressure: a slow reader slows the writer, memory
  // does not grow). Timeout when no byte could be written for
  // `timeout_seconds`; Unavailable when the stream is closed (by either
  // side); IOError for other OS errors. After an error an unknown prefix of
  // `bytes` may have been written.
  [[nodiscard]] virtual Status Write(std::span<const uint8_t> bytes, double timeout_seconds) = 0;
  // Reads between 1 and buffer.size() bytes into `buffer` (which must be
  // non-empty) and returns the count. Timeout when nothing arrives within
  // `timeout_seconds`; Unavailable at end of stream or after Close.
  [[nodiscard]] virtual Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) = 0;
  // Shuts the stream down in both directions. Idempotent.
  virtual void Close() = 0;
  // "127.0.0.1:5000", "loopback:name", ...: for messages and as a default
  // peer id.
  virtual std::string RemoteAddress() const = 0;
  // A file descriptor that poll() reports readable (POLLIN) when Read would
  // return without waiting, or -1 when the stream has none (loopback).
  // Servers use it to wait for many unauthenticated peers on one thread
  // (docs/transport.md §3, admission); it stays owned by the stream.
  virtual int PollHandle() const { return -1; }
};

// A Stream that forwards to a shared one: hands Connection (which wants
// unique ownership) a stream while the caller keeps a handle to Close it from
// another thread (a server's Stop) or to write raw bytes under it (tests).
// Thread safety: that of the wrapped stream.
class SharedStream final : public Stream {
 public:
  explicit SharedStream(std::shared_ptr<Stream> s) : s_(std::move(s)) {}
  [[nodiscard]] Status Write(std::span<const uint8_t> b, double t) override { return s_->Write(b, t); }
  [[nodiscard]] Result<size_t> Read(std::span<uint8_t> b, double t) override { return s_->Read(b, t); }
  void Close() override { s_->Close(); }
  std::string RemoteAddress() const override { return s_->RemoteAddress(); }
  int PollHandle() const override { return s_->PollHandle(); }

 private:
  std::shared_ptr<Stream> s_;
};

// Accepts incoming streams. Thread safety: Accept from one thread; Close
// from any thread (it makes a pending Accept return Unavailable soon).
class Listener {
 public:
  virtual ~Listener() = default;
  // Waits up to `timeout_seconds` for a peer. Timeout when none came;
  // Unavailable after Close.
  [[nodiscard]] virtual Result<std::unique_ptr<Stream>> Accept(double timeout_seconds) = 0;
  // The bound address, with the real port when ":0" was requested; pass it
  // to Transport::Connect.
  virtual std::string Address() const = 0;
  virtual void Close() = 0;
};

// Creates streams. Thread safety: thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  // Opens a stream to `address`. Unavailable when refused or unreachable,
  // Timeout when not established within `timeout_seconds`, InvalidArgument
  // for a malformed address.
  [[nodiscard]] virtual Result<std::unique_ptr<Stream>> Connect(const std::string& address,
                                                                double timeout_seconds) = 0;
  // Listens on `address`. IOError/Unavailable when it cannot bind
  // (e.g. in use), InvalidArgument for a malformed address.
  [[nodiscard]] virtual Result<std::unique_ptr<Listener>> Listen(const std::string& address) = 0;
};

struct TcpTransportOptions {
  // SO_SNDBUF / SO_RCVBUF in bytes; 0 keeps the OS default (autotuning).
  int socket_buffer_bytes = 0;
};

// TCP over asio. Addresses are "host:port" with a numeric IPv4 host, a
// bracketed IPv6 host ("[::1]:7400") or "localhost"; port 0 in Listen picks
// a free port. Sockets use TCP_NODELAY and never raise SIGPIPE.
std::unique_ptr<Transport> NewTcpTransport(TcpTransportOptions options = {});

struct UcxTransportOptions {
  // UCX transports to use, in UCX_TLS syntax: "tcp", "sm,self", "rc,dc,
  // cuda_ipc", ... Empty: $UCX_TLS, else every transport UCX finds (on one
  // host that includes shared memory, which bypasses any network shaping).
  std::string tls;
  // Network devices in UCX_NET_DEVICES syntax ("eth0", "mlx5_0:1"). Empty:
  // $UCX_NET_DEVICES, else all.
  std::string net_devices;
  // Shared secret both sides prove (HMAC-SHA256 challenge-response) on the
  // TCP bootstrap connection before any UCX endpoint exists; the parameters
  // that key the UCX channel are MACed with it. Empty on both sides: no
  // check. Usually the same bytes as ConnectionOptions::secret.
  std::string secret;
  // Per stream and direction: the most bytes a sender may have in flight
  // and unread by the receiver (the receiver's memory bound); the sender
  // blocks beyond it. >= 64 KiB.
  size_t window_bytes = size_t{8} << 20;
  // Largest active message a write is cut into, 4 KiB .. window_bytes.
  size_t segment_bytes = size_t{1} << 20;
  // Write-behind, per stream: a Write of at most min(write_behind_bytes,
  // max(segment_bytes, write_behind_bytes / 4)) (1 MiB by default) is
  // copied, segment by segment, and returns once its sends are started (as
  // a TCP write returns once the kernel holds the bytes), so the next
  // Write overlaps this one's transfer; at most this many copied bytes are in
  // flight (a Write waits for room). A failed buffered send fails the
  // stream's next Write or Read. Larger Writes, and all Writes when 0, are
  // zero-copy and return once UCP completed them.
  size_t write_behind_bytes = size_t{4} << 20;
  // Deadline of the bootstrap exchange on each new connection.
  double bootstrap_timeout_seconds = 5.0;
  // Bootstrapped streams waiting for Accept plus bootstraps in progress, per
  // listener; beyond it new connections are closed at once.
  size_t backlog = 64;
};

// UCX (UCP active messages) behind the Transport interface: what NIXL,
// Dynamo and Mooncake's transfer engine move KV with. Addresses are TCP
// "host:port" of a bootstrap connection (as for NewTcpTransport: port 0 in
// Listen picks one); the bootstrap authenticates, exchanges UCX worker
// addresses and random stream ids, and stays open as the control channel
// (graceful close, peer-failure detection); the bytes go over UCX with
// credit-based flow control (docs/transport.md §UCX). Write, Read and Close
// keep the Stream contract: idle timeouts, bounded buffers, back-pressure,
// Unavailable when either side closed or the peer died.
// InvalidArgument for bad options; IOError when UCX cannot start (e.g. none
// of `tls` is available).
Result<std::unique_ptr<Transport>> NewUcxTransport(UcxTransportOptions options = {});

struct LoopbackTransportOptions {
  // Capacity of each direction's in-memory pipe: a writer blocks when the
  // reader lags by this many bytes. >= 1.
  size_t buffer_bytes = 1 << 20;
  // Pending, not yet accepted connections per listener; more are refused.
  size_t backlog = 64;
};

// In-process streams between threads of one process; any non-empty string
// is an address (Listen on "name", Connect to "name"); Listen on a name in
// use is Unavailable, Connect to a name without a listener is Unavailable
// ("connection refused"). Listener::Address() returns the name.
std::unique_ptr<Transport> NewLoopbackTransport(LoopbackTransportOptions options = {});

// Faults applied to streams created by a FaultInjectingTransport. Byte
// offsets count the bytes written to one stream since it was created.
struct FaultPlan {
  bool refuse_connect = false;     // Connect returns Unavailable
  int64_t drop_after_bytes = -1;   // close the stream once this many bytes
                                   // were written (the rest of that write is
                                   // lost); -1 = never
  int64_t corrupt_byte_at = -1;    // XOR 0x5A into the byte at this offset
  double write_delay_seconds = 0;  // sleep before each Write (slow sender)
  double read_delay_seconds = 0;   // sleep before each Read (slow consumer)
  size_t max_read_bytes = 0;       // cap on bytes per Read; 0 = none
  // Once this many bytes have been written to a stream, on_event runs (once
  // per stream, on the writing thread, before the rest of that write): a
  // test acts at an exact byte of a transfer, e.g. kills the peer process.
  // -1 = never.
  int64_t event_after_bytes = -1;
  std::function<void()> on_event;
};

// Counters of a FaultInjectingTransport. Values are totals since creation.
struct FaultCounters {
  int64_t connects = 0;          // Connect calls that reached the base
  int64_t refused_connects = 0;  // Connect calls refused by the plan
  int64_t accepts = 0;
  int64_t drops = 0;             // streams closed by drop_after_bytes
  int64_t corruptions = 0;       // bytes corrupted
  int64_t events = 0;            // on_event calls
};

// Wraps `base` (not owned; must outlive this) and applies a FaultPlan to
// every stream it creates: `connect_plan` to streams from Connect,
// `accept_plan` to streams from Accept of its listeners. A stream takes the
// plan current when it is created. Thread safety: thread-safe.
class FaultInjectingTransport final : public Transport {
 public:
  explicit FaultInjectingTransport(Transport* base);
  ~FaultInjectingTransport() override;
  void SetConnectPlan(const FaultPlan& plan);
  void SetAcceptPlan(const FaultPlan& plan);
  FaultCounters counters() const;

  Result<std::unique_ptr<Stream>> Connect(const std::string& address,
                                          double timeout_seconds) override;
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override;

  struct State;

 private:
  Transport* base_;
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------------------
// Framed, authenticated connections.

// Message types 0x00-0xDF belong to users of Connection (the serve and pool
// protocols); 0xE0-0xFF are reserved for the transport itself
// (docs/transport.md lists them).
inline constexpr uint8_t kMaxUserMessageType = 0xDF;

// Called with a goodput sample: `bytes` moved to or from `peer` in `seconds`
// of actual transfer (idle time excluded). The controller's
// BandwidthEstimator::Observe consumes exactly this. Must be thread-safe and
// quick; it runs on the transferring thread.
using GoodputCallback = std::function<void(std::string_view peer, double bytes, double seconds)>;

// A link several connections share: one token bucket (the rate, and a depth
// of max(16 KiB, 2 ms at the rate) unless given) for every byte any of them
// writes, so transfers in flight at once contend for it as they would for a
// real link between two hosts; each writer takes pieces of at most the
// depth in turn. The rate may change while connections use it.
// Thread safety: thread-safe.
class SharedLink {
 public:
  // rate > 0 bytes/s. InvalidArgument otherwise.
  static Result<std::shared_ptr<SharedLink>> Create(double bytes_per_second, double burst_bytes = 0);
  ~SharedLink();
  double rate() const;
  double burst() const;
  // Sets the rate (> 0; else ignored) from now on; the depth follows it
  // unless it was given.
  void SetRate(double bytes_per_second);
  // Takes `bytes` at time `now_seconds` (MonotonicSeconds) and returns how
  // long the caller must wait before sending them (>= 0).
  double Reserve(double bytes, double now_seconds);
  // Bytes reserved so far, by every connection on the link.
  double bytes() const;
  // Frame transfers on the link now: a FrameSender on a connection with
  // this link counts each of its transfers from Begin until its ack (or
  // its abort, or the sender's end). What a controller's bandwidth
  // estimate under contention is compared with: rate() / transfers().
  int transfers() const;
  // Counting, for FrameSender: EnterTransfer when a transfer begins,
  // LeaveTransfer once for each when it is over.
  void EnterTransfer();
  void LeaveTransfer();

 private:
  SharedLink(double bytes_per_second, double burst_bytes);
  struct State;
  std::unique_ptr<State> state_;
};

struct ConnectionOptions {
  // Shared secret for the HMAC-SHA256 challenge-response. Both peers must
  // hold the same bytes. Empty disables authentication only when both sides
  // leave it empty (any peer is then accepted): use that on loopback only.
  std::string secret;
  // This side's id, sent in the handshake; the peer sees it as peer_id().
  // At most 255 bytes.
  std::string local_id = "kvserve";
  // Largest payload accepted; a larger declared length is refused before
  // anything is allocated (ResourceExhausted). Also bounds what Send accepts.
  uint64_t max_message_bytes = uint64_t{1} << 30;
  // Idle timeout of every blocking step inside a Send or Receive, and of
  // Receive's wait for a message when it is given no timeout of its own.
  double io_timeout_seconds = 30.0;
  double connect_timeout_seconds = 5.0;
  // Deadline for the whole authentication handshake.
  double handshake_timeout_seconds = 5.0;
  // Sender-side token bucket emulating a link of this rate (bytes/s) over
  // every byte written; 0 = unshaped.
  double shape_bytes_per_second = 0.0;
  // Token bucket depth in bytes; 0 = max(16 KiB, 2 ms at the rate).
  double shape_burst_bytes = 0.0;
  // A link this connection shares with others (one token bucket for all
  // their bytes, e.g. every prefill->decode transfer of a host pair): when
  // set, it paces every byte written and shape_* are ignored.
  std::shared_ptr<SharedLink> shared_link;
  // Receives goodput samples: FrameSender transfers, large RemotePool Gets,
  // and users calling ReportGoodput (docs/transport.md §5). May be empty.
  GoodputCallback goodput;
};

// How a server admits peers (docs/transport.md §3, "Admission"). Peers that
// have not authenticated yet wait in a separate, small budget, all of them
// on one thread (a silent socket costs its file descriptor and a few hundred
// bytes, never a thread or a connection slot), under a short deadline, with
// a per-source cap; only an authenticated peer takes one of the
// max_connections slots (a thread each).
struct AdmissionOptions {
  // Authenticated connections served at once. One more authenticated peer
  // is sent ERROR(resource_exhausted) and closed.
  int max_connections = 64;
  // Connections in the handshake, all sources together. When a new one
  // arrives at the limit, the one that has waited longest is dropped.
  int max_unauthenticated = 4096;
  // Of those, from one source address (the host, port ignored); at the
  // limit the source's longest-waiting one is dropped.
  int max_unauthenticated_per_source = 2048;
  // A peer must finish the handshake within this many seconds of being
  // accepted (and within ConnectionOptions::handshake_timeout_seconds).
  double unauthenticated_deadline_seconds = 2.0;
};

struct Message {
  uint8_t type = 0;
  uint8_t flags = 0;
  std::vector<uint8_t> payload;  // reused across Receive calls
  // Set by ReceiveInto when the payload was read straight into the
  // caller's memory (payload is then empty); empty otherwise.
  std::span<const uint8_t> placed;
  // The payload, wherever it was read to.
  std::span<const uint8_t> bytes() const {
    return placed.data() != nullptr ? placed : std::span<const uint8_t>(payload);
  }
};

// Where ReceiveInto reads a payload: called once the message header was
// verified (checksums, magic, length limit), before any payload byte is
// read. Returns a span of exactly `length` writable bytes, or an empty span
// for the connection's own buffer (Message::payload).
using PayloadPlacer = std::function<std::span<uint8_t>(uint8_t type, uint64_t length)>;

struct ConnectionStats {
  // Totals since creation, handshake messages included.
  uint64_t bytes_sent = 0;      // wire bytes incl. message headers
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  double send_busy_seconds = 0;  // time spent inside Stream::Write
};

// A message-oriented, authenticated connection over a Stream.
//
// Every message on the wire is a 20-byte header (magic, type, flags, length,
// payload checksum, header checksum) and the payload. A receiver verifies
// the header checksum, the magic and the length limit before allocating,
// grows the payload buffer only as bytes arrive (a truncated message costs at
// most about twice what was actually received), and verifies the payload
// checksum before returning it.
//
// After an error that leaves the byte stream at an unknown position
// (corruption, a timeout or failure in the middle of a message, a closed
// stream) the connection is broken: every later Send/Receive returns that
// same error. A Receive that times out before any byte of a message arrived
// leaves the connection usable.
//
// Thread safety: thread-safe. Sends are serialised with each other, receives
// with each other; one thread may send while another receives; Close may be
// called from any thread and unblocks both.
class Connection {
 public:
  enum class Role : uint8_t { kClient = 0, kServer = 1 };

  // Runs the handshake over `stream` (client: HELLO ... wait for OK; server:
  // answer a HELLO) and returns the connection. PermissionDenied when the
  // peer does not prove the secret or rejects ours; Corruption for a
  // malformed handshake; Timeout when it does not finish within
  // options.handshake_timeout_seconds. The stream is closed on failure.
  static Result<std::unique_ptr<Connection>> Establish(std::unique_ptr<Stream> stream, Role role,
                                                       const ConnectionOptions& options);
  // Connect + Establish as client.
  static Result<std::unique_ptr<Connection>> Dial(Transport& transport, const std::string& address,
                                                  const ConnectionOptions& options);
  // Accept (waiting up to `timeout_seconds`) + Establish as server.
  static Result<std::unique_ptr<Connection>> Accept(Listener& listener,
                                                    const ConnectionOptions& options,
                                                    double timeout_seconds);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one message whose payload is the concatenation of `parts`.
  // InvalidArgument for a reserved type; ResourceExhausted when the payload
  // exceeds options.max_message_bytes; otherwise as Stream::Write. Blocks
  // under back-pressure and shaping.
  [[nodiscard]] Status SendParts(uint8_t type, uint8_t flags,
                                 std::span<const std::span<const uint8_t>> parts);
  [[nodiscard]] Status Send(uint8_t type, uint8_t flags, std::span<const uint8_t> payload);

  // Receives the next message into `message` (its buffer is reused).
  // Waits up to `timeout_seconds` for the message to begin (negative: the
  // options' io_timeout_seconds; use a large value to wait long); Timeout if
  // none began. Corruption for a bad header or payload checksum;
  // ResourceExhausted when the declared length exceeds max_message_bytes;
  // Unavailable when the peer closed; an ERROR message from the peer is
  // returned as the Status it carries (and breaks the connection).
  [[nodiscard]] Status Receive(Message* message, double timeout_seconds = -1);
  // As Receive, but a payload `place` gives memory for is read straight
  // into it (no copy, no allocation): message->placed then views it and
  // message->payload is empty. The payload checksum is verified there; on
  // any error the placed bytes are unspecified. ERROR messages and
  // handshake messages never go to `place`. A span of the wrong length is
  // InvalidArgument (the connection is then broken).
  [[nodiscard]] Status ReceiveInto(Message* message, const PayloadPlacer& place,
                                   double timeout_seconds = -1);

  // Gives a received message's payload buffer back, so that a later
  // Receive of a payload above 64 KiB that does not fit its Message's buffer
  // reuses this memory
  // instead of allocating (and faulting in) a new one: loops that make a
  // Message per unit of work (ReceiveFrame does, per frame) call it when
  // done with the message. The connection keeps the larger of this buffer
  // and the one it holds.
  void Recycle(Message&& message);

  // Sends an ERROR message carrying `status` (best effort) and closes.
  void Fail(const Status& status);
  // Closes the underlying stream. Idempotent.
  void Close();

  // The peer's id from the handshake (its local_id), or its address when it
  // sent none.
  const std::string& peer_id() const;
  std::string remote_address() const;
  const ConnectionOptions& options() const;
  ConnectionStats stats() const;
  // Forwards a goodput sample for this peer to options().goodput, if set.
  void ReportGoodput(double bytes, double seconds) const;

  class Impl;
  // The server side of the handshake as a state machine driven by
  // readiness (src/transport/server_handshake.h), for servers that wait on
  // many unauthenticated peers at once; Establish(kServer) runs it to the
  // end on the calling thread.
  class ServerHandshake;

 private:
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Layer-wise frame streaming (docs/format.md frames over a Connection).

namespace transport {
class LaneSenders;  // src/transport/frame_lanes.h
}  // namespace transport

// Message types used by frame streaming (docs/transport.md §Streaming).
inline constexpr uint8_t kMsgFrameBegin = 0x10;
inline constexpr uint8_t kMsgFrameRecord = 0x11;
inline constexpr uint8_t kMsgFrameEnd = 0x12;
inline constexpr uint8_t kMsgFrameAbort = 0x13;
inline constexpr uint8_t kMsgFrameAck = 0x14;

struct TransferStats {
  uint64_t transfer_id = 0;
  uint64_t records = 0;
  uint64_t frame_bytes = 0;      // header + records, as in the frame
  uint64_t wire_bytes = 0;       // incl. message headers
  double busy_seconds = 0;       // sender: write time + final drain (from Finish or the last write)
  double elapsed_seconds = 0;    // Begin to ack (sender) / Begin to End (receiver)
};

// Sends one frame at a time over a connection: Begin(header), then each
// chunk record as soon as it is produced, then Finish, which waits for the
// receiver's acknowledgement and returns the receiver's verdict. The goodput
// sample (frame bytes / busy seconds, where busy = time blocked writing plus
// the drain from the last write to the ack) goes to the connection's
// goodput callback. Time between calls (waiting for the model or encoder) is
// not counted.
//
// sink() adapts an EncoderContext: pass it to EncoderContext::Begin and each
// EncodeLayer's records are sent as they are appended, split at record
// boundaries using the layout of docs/format.md (the sink does not depend on
// how the encoder chunks its Append calls).
//
// Lanes: with `lanes` (more authenticated connections to the same
// receiver, which must pass the same lanes to ReceiveFrame in the same
// order) the records are striped: each goes on the lane that carried the
// fewest record bytes of the transfer so far (lowest index on a tie), lane 0
// being `connection`, which also carries FRAME_BEGIN and the ACK; every lane gets
// FRAME_END (or FRAME_ABORT). Each lane is written by its own thread, so a
// frame moves over n sockets at once (one TCP stream runs at about one
// core's copy rate). Goodput samples cover all lanes together.
//
// Thread safety: not thread-safe; one sender per connection at a time.
class FrameSender {
 public:
  explicit FrameSender(Connection* connection, std::vector<Connection*> lanes = {});
  ~FrameSender();
  FrameSender(const FrameSender&) = delete;
  FrameSender& operator=(const FrameSender&) = delete;

  // Starts transfer `transfer_id` with the frame header bytes.
  // InvalidArgument when a transfer is open or awaits its ack; connection errors.
  [[nodiscard]] Status Begin(uint64_t transfer_id, std::span<const uint8_t> header);
  // Sends one complete chunk record. InvalidArgument outside a transfer.
  [[nodiscard]] Status SendRecord(std::span<const uint8_t> record);
  // Sends complete records in order (on lanes, in parallel); the spans need
  // to live only until it returns. As SendRecord otherwise.
  [[nodiscard]] Status SendRecords(std::span<const std::span<const uint8_t>> records);
  // Ends the transfer and waits (up to the connection's io timeout) for the
  // receiver's ack. Returns the stats, or the receiver's error (e.g.
  // Corruption when a record failed to decode there), or a connection error.
  [[nodiscard]] Result<TransferStats> Finish();
  // Finish in two steps, so that the caller can send more (e.g. the next
  // transfer, through another FrameSender on the same connection) while the
  // receiver finishes this one: End sends the transfer's end without
  // waiting; AwaitAck then waits for its ack as Finish does. Acks arrive in
  // the order the transfers ended, so await them in that order.
  // InvalidArgument outside a transfer (End) or with no ended transfer
  // awaiting its ack (AwaitAck).
  [[nodiscard]] Status End();
  [[nodiscard]] Result<TransferStats> AwaitAck();
  // Tells the receiver the transfer is abandoned (it gets `reason`). A
  // no-op when no transfer is open (none began, or it ended or broke).
  [[nodiscard]] Status Abort(const Status& reason);

  // A ByteSink fed with a frame's bytes in order: it calls Begin (with the
  // transfer id given here) once the header is complete and SendRecord per
  // complete record. Corruption when the bytes do not follow the frame
  // layout (a record longer than the connection's message limit included).
  ByteSink& sink(uint64_t transfer_id);
  // True when sink() holds bytes of an incomplete header or record.
  bool sink_has_partial() const;

 private:
  class Splitter;
  Connection* connection_;
  std::unique_ptr<Splitter> splitter_;
  std::unique_ptr<transport::LaneSenders> lanes_;  // `connection` first, then the lanes
  bool open_ = false;
  bool ack_pending_ = false;
  // The connection's shared link while this sender's transfer counts on it.
  std::shared_ptr<SharedLink> counted_link_;
  void LeaveLink();
  TransferStats stats_;
  double begin_time_ = 0;
  double last_write_end_ = 0;
};

// Receiver callbacks: the frame header on Begin, then each record as it
// arrives (the span is valid only during the call). A non-OK return stops
// delivery; the rest of the transfer is drained and the error is sent to
// the sender as the ack and returned.
struct FrameHandler {
  std::function<Status(uint64_t transfer_id, std::span<const uint8_t> header)> on_header;
  std::function<Status(std::span<const uint8_t> record)> on_record;
  // Optional: where to read the next record of `length` bytes (as
  // PayloadPlacer: exactly `length` bytes, or empty for the connection's
  // buffer). on_record then gets that span. Not called once a handler
  // returned an error.
  std::function<std::span<uint8_t>(uint64_t length)> place_record;
};

// Where a receiver's frame comes from: runs `handler` over one frame's
// header and records (ReceiveFrameFrom on a connection, KvPool::GetRecords
// through PoolFrameSource, ...) and returns its stats or the first error,
// the handler's included. The handler's calls happen on the calling thread.
using FrameSource = std::function<Result<TransferStats>(const FrameHandler& handler)>;

// Receives one streamed frame from `connection`: waits up to
// `timeout_seconds` for its Begin, then calls `handler` per record until
// End, checks the record count, and acknowledges. Returns the stats, the
// handler's error, Aborted transfers as the sender's reason (with context
// "aborted by sender"), Corruption for an unexpected message, or a
// connection error (the connection is then broken).
//
// `lanes`: the sender's lanes (see FrameSender), in its order. Each is read
// by its own thread; records are placed and handed to `handler` in
// transfer order, on the calling thread. A lane's failure closes every
// lane and `connection`.
[[nodiscard]] Result<TransferStats> ReceiveFrame(Connection& connection,
                                                 const FrameHandler& handler,
                                                 double timeout_seconds = -1,
                                                 std::span<Connection* const> lanes = {});

// As ReceiveFrame, for a receiver that has already received the transfer's
// Begin message `begin` itself (e.g. one that waits for either a frame or
// another message type). Corruption (and the connection failed) when
// `begin` is not a frame begin.
[[nodiscard]] Result<TransferStats> ReceiveFrameFrom(Connection& connection, const Message& begin,
                                                     const FrameHandler& handler,
                                                     std::span<Connection* const> lanes = {});

// Monotonic clock in seconds, the one goodput timing uses.
double MonotonicSeconds();

}  // namespace kvserve

#endif  // KVSERVE_TRANSPORT_H_
