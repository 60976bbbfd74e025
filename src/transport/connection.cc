// Copyright kvserve authors. Framed, authenticated connections
// (docs/transport.md §Framing, §Authentication).
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "kvserve/transport.h"
#include "transport/auth.h"
#include "transport/server_handshake.h"
#include "transport/token_bucket.h"
#include "transport/wire.h"

namespace kvserve {

using transport::kMessageHeaderBytes;

namespace {

constexpr char kHelloMagic[4] = {'K', 'V', 'S', 'A'};
constexpr uint8_t kAuthVersion = 1;
constexpr std::string_view kServerLabel = "kvserve-auth-v1 server";
constexpr std::string_view kClientLabel = "kvserve-auth-v1 client";
// Payloads up to this size are copied next to the header and written with
// one Write call (one segment with TCP_NODELAY).
constexpr size_t kCoalesceBytes = 64 * 1024;
constexpr size_t kFirstReadChunk = 64 * 1024;

}  // namespace

class Connection::Impl {
 public:
  Impl(std::unique_ptr<Stream> stream, const ConnectionOptions& options)
      : options_(options), remote_(stream->RemoteAddress()) {
    if (options_.shared_link) {
      stream = transport::NewSharedLinkStream(std::move(stream), options_.shared_link);
    } else if (options_.shape_bytes_per_second > 0) {
      stream = transport::NewShapedStream(std::move(stream), options_.shape_bytes_per_second,
                                          options_.shape_burst_bytes);
    }
    stream_ = std::move(stream);
    peer_id_ = remote_;
  }

  ~Impl() { stream_->Close(); }

  // Sends with any type (reserved ones included).
  Status SendRaw(uint8_t type, uint8_t flags, std::span<const std::span<const uint8_t>> parts,
                 double timeout_seconds) {
    uint64_t length = 0;
    uint32_t checksum;
    if (parts.size() == 1) {
      length = parts[0].size();
      checksum = Checksum32(parts[0].data(), parts[0].size());
    } else {
      Checksum64Stream hash;
      for (auto p : parts) {
        length += p.size();
        hash.Update(p.data(), p.size());
      }
      checksum = static_cast<uint32_t>(hash.Digest());
    }
    const uint64_t limit = authenticated_ ? options_.max_message_bytes
                                          : transport::kMaxHandshakeMessageBytes;
    if (length > limit)
      return Status::ResourceExhausted("message of " + std::to_string(length) +
                                       " bytes exceeds the limit of " + std::to_string(limit));
    std::lock_guard<std::mutex> lock(send_mu_);
    KVSERVE_RETURN_IF_ERROR(BrokenStatus());
    uint8_t header[kMessageHeaderBytes];
    transport::EncodeMessageHeader({type, flags, length, checksum}, header);
    const double start = MonotonicSeconds();
    Status s;
    if (length <= kCoalesceBytes) {
      send_scratch_.assign(header, header + kMessageHeaderBytes);
      for (auto p : parts) send_scratch_.insert(send_scratch_.end(), p.begin(), p.end());
      s = stream_->Write(send_scratch_, timeout_seconds);
    } else {
      s = stream_->Write(std::span<const uint8_t>(header, kMessageHeaderBytes), timeout_seconds);
      for (auto p : parts) {
        if (!s.ok()) break;
        if (!p.empty()) s = stream_->Write(p, timeout_seconds);
      }
    }
    const double end = MonotonicSeconds();
    {
      std::lock_guard<std::mutex> stats_lock(stats_mu_);
      stats_.send_busy_seconds += end - start;
      if (s.ok()) {
        stats_.bytes_sent += kMessageHeaderBytes + length;
        ++stats_.messages_sent;
      }
    }
    if (!s.ok()) (void)Break(s);
    return s;
  }

  // Reads exactly buffer.size() bytes; the first read waits up to
  // `first_timeout`, later ones `rest_timeout`. *any is set once a byte came.
  Status ReadFull(std::span<uint8_t> buffer, double first_timeout, double rest_timeout,
                  bool* any) {
    size_t have = 0;
    while (have < buffer.size()) {
      auto n = stream_->Read(buffer.subspan(have), *any ? rest_timeout : first_timeout);
      if (!n.ok()) return n.status();
      have += *n;
      *any = true;
    }
    return Status::Ok();
  }

  // `place` (may be null): where user payloads go (Connection::ReceiveInto).
  Status ReceiveRaw(Message* message, double first_timeout, double rest_timeout,
                    const PayloadPlacer* place = nullptr) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    KVSERVE_RETURN_IF_ERROR(BrokenStatus());
    uint8_t header_bytes[kMessageHeaderBytes];
    bool any = false;
    Status s = ReadFull(header_bytes, first_timeout, rest_timeout, &any);
    if (!s.ok()) {
      if (s.code() == StatusCode::kTimeout && !any) return s;  // still usable
      return Break(s);
    }
    const uint64_t limit = authenticated_ ? options_.max_message_bytes
                                          : transport::kMaxHandshakeMessageBytes;
    transport::MessageHeader header;
    s = transport::DecodeMessageHeader(header_bytes, limit, &header);
    if (!s.ok()) return Break(s.WithContext("message from " + remote_));
    std::vector<uint8_t>& payload = message->payload;
    message->placed = {};
    std::span<uint8_t> placed;
    if (place != nullptr && *place && authenticated_ && header.length > 0 &&
        header.type <= kMaxUserMessageType) {
      placed = (*place)(header.type, header.length);
      if (!placed.empty() && placed.size() != header.length)
        return Break(Status::InvalidArgument("ReceiveInto: placer gave " +
                                             std::to_string(placed.size()) + " bytes for a " +
                                             std::to_string(header.length) + "-byte payload"));
    }
    if (!placed.empty()) {
      payload.clear();
      s = ReadFull(placed, rest_timeout, rest_timeout, &any);
      if (!s.ok()) return Break(s.WithContext("truncated message from " + remote_));
    } else {
      // Grow the buffer only as bytes arrive: a peer that declares a large
      // length but sends little costs little memory (memory the buffer
      // already has is used at once). Bytes the buffer already holds are
      // overwritten, not cleared first (resize zeroes only what it adds).
      // A payload of more than the first read chunk that does not fit the
      // message's buffer takes the recycled one if that is larger
      // (Connection::Recycle); small payloads leave it for the large ones.
      if (header.length > kFirstReadChunk && header.length > payload.capacity() &&
          spare_.capacity() > payload.capacity())
        payload.swap(spare_);
      size_t have = 0;
      while (have < header.length) {
        size_t target = static_cast<size_t>(std::min<uint64_t>(
            header.length, std::max<uint64_t>({kFirstReadChunk, 2 * have, payload.capacity()})));
        if (payload.size() < target) payload.resize(target);
        s = ReadFull(std::span<uint8_t>(payload).subspan(have, target - have), rest_timeout,
                     rest_timeout, &any);
        if (!s.ok()) return Break(s.WithContext("truncated message from " + remote_));
        have = target;
      }
      payload.resize(header.length);
    }
    const std::span<const uint8_t> bytes =
        placed.empty() ? std::span<const uint8_t>(payload) : std::span<const uint8_t>(placed);
    if (Checksum32(bytes.data(), bytes.size()) != header.payload_checksum)
      return Break(Status::Corruption("message payload checksum mismatch from " + remote_));
    message->placed = placed;
    message->type = header.type;
    message->flags = header.flags;
    {
      std::lock_guard<std::mutex> stats_lock(stats_mu_);
      stats_.bytes_received += kMessageHeaderBytes + header.length;
      ++stats_.messages_received;
    }
    if (header.type == transport::kMsgError) {
      Status carried = transport::DecodeStatus(payload);
      if (carried.ok()) carried = Status::Corruption("peer sent an ERROR message with code ok");
      return Break(carried.WithContext("peer " + peer_id_));
    }
    if (authenticated_ && header.type > kMaxUserMessageType)
      return Break(Status::Corruption("unexpected reserved message type " +
                                      std::to_string(header.type) + " from " + remote_));
    return Status::Ok();
  }

  Status Break(Status s) {
    std::lock_guard<std::mutex> lock(broken_mu_);
    if (broken_.ok()) broken_ = s;
    stream_->Close();
    return s;
  }
  Status BrokenStatus() {
    std::lock_guard<std::mutex> lock(broken_mu_);
    return broken_;
  }

  void SendError(const Status& status, double timeout_seconds) {
    std::vector<uint8_t> payload;
    transport::EncodeStatus(status, &payload);
    std::span<const uint8_t> part(payload);
    (void)SendRaw(transport::kMsgError, 0, {&part, 1}, timeout_seconds);
  }

  Status ClientHandshake() {
    const double deadline = MonotonicSeconds() + options_.handshake_timeout_seconds;
    auto left = [&] { return std::max(0.0, deadline - MonotonicSeconds()); };
    transport::Nonce client_nonce;
    KVSERVE_RETURN_IF_ERROR(transport::RandomNonce(&client_nonce));
    std::vector<uint8_t> hello(kHelloMagic, kHelloMagic + 4);
    hello.push_back(kAuthVersion);
    hello.insert(hello.end(), client_nonce.begin(), client_nonce.end());
    hello.push_back(static_cast<uint8_t>(options_.local_id.size()));
    hello.insert(hello.end(), options_.local_id.begin(), options_.local_id.end());
    std::span<const uint8_t> part(hello);
    KVSERVE_RETURN_IF_ERROR(SendRaw(transport::kMsgHello, 0, {&part, 1}, left()));

    Message challenge;
    KVSERVE_RETURN_IF_ERROR(ReceiveRaw(&challenge, left(), left()));
    const auto& c = challenge.payload;
    if (challenge.type != transport::kMsgChallenge || c.size() < transport::kNonceBytes + 1 ||
        c.size() != transport::kNonceBytes + 1 + c[transport::kNonceBytes] + transport::kMacBytes)
      return Break(Status::Corruption("malformed CHALLENGE from " + remote_));
    const size_t id_len = c[transport::kNonceBytes];
    std::string server_id(c.begin() + transport::kNonceBytes + 1,
                          c.begin() + transport::kNonceBytes + 1 + id_len);
    std::vector<uint8_t> transcript =
        Transcript(client_nonce, std::span<const uint8_t>(c).first(transport::kNonceBytes),
                   options_.local_id, server_id);
    auto expected = transport::ComputeMac(options_.secret, kServerLabel, transcript);
    if (!transport::MacEquals(std::span<const uint8_t>(c).last(transport::kMacBytes), expected))
      return Break(Status::PermissionDenied("server " + remote_ +
                                            " did not prove the shared secret"));
    auto proof = transport::ComputeMac(options_.secret, kClientLabel, transcript);
    std::span<const uint8_t> proof_part(proof);
    KVSERVE_RETURN_IF_ERROR(SendRaw(transport::kMsgResponse, 0, {&proof_part, 1}, left()));
    Message ok;
    Status s = ReceiveRaw(&ok, left(), left());
    if (!s.ok()) {
      if (s.code() == StatusCode::kPermissionDenied) return s;
      return Status::PermissionDenied("server " + remote_ + " refused the handshake: " +
                                      s.ToString());
    }
    if (ok.type != transport::kMsgAuthOk) return Break(Status::Corruption("expected AUTH_OK"));
    peer_id_ = server_id.empty() ? remote_ : server_id;
    authenticated_ = true;
    return Status::Ok();
  }

  static std::vector<uint8_t> Transcript(std::span<const uint8_t> client_nonce,
                                         std::span<const uint8_t> server_nonce,
                                         const std::string& client_id,
                                         const std::string& server_id) {
    std::vector<uint8_t> t(client_nonce.begin(), client_nonce.end());
    t.insert(t.end(), server_nonce.begin(), server_nonce.end());
    t.push_back(static_cast<uint8_t>(client_id.size()));
    t.insert(t.end(), client_id.begin(), client_id.end());
    t.push_back(static_cast<uint8_t>(server_id.size()));
    t.insert(t.end(), server_id.begin(), server_id.end());
    return t;
  }

  ConnectionOptions options_;
  std::string remote_;
  std::string peer_id_;
  std::unique_ptr<Stream> stream_;
  std::atomic<bool> authenticated_{false};
  std::mutex send_mu_, recv_mu_, stats_mu_, broken_mu_;
  std::vector<uint8_t> send_scratch_;
  std::vector<uint8_t> spare_;  // a recycled receive buffer (guarded by recv_mu_)
  ConnectionStats stats_;
  Status broken_;
};

// ---------------------------------------------------------------------------
// The server side of the handshake, one readiness event at a time.

Connection::ServerHandshake::ServerHandshake(std::unique_ptr<Stream> stream,
                                             const ConnectionOptions& options,
                                             double deadline_seconds)
    : impl_(std::make_unique<Impl>(std::move(stream), options)) {
  double limit = options.handshake_timeout_seconds;
  if (deadline_seconds >= 0) limit = std::min(limit, deadline_seconds);
  deadline_ = MonotonicSeconds() + std::max(0.0, limit);
  poll_handle_ = impl_->stream_->PollHandle();
  buffer_.reserve(kMessageHeaderBytes);
}

Connection::ServerHandshake::~ServerHandshake() {
  if (impl_) impl_->stream_->Close();
}

const std::string& Connection::ServerHandshake::remote() const { return impl_->remote_; }

void Connection::ServerHandshake::Close() {
  if (impl_) impl_->stream_->Close();
}

Status Connection::ServerHandshake::Fail(Status s) {
  failed_ = s;
  (void)impl_->Break(s);
  return s;
}

Result<bool> Connection::ServerHandshake::Advance(double wait_seconds) {
  if (!failed_.ok()) return failed_;
  if (done_) return true;
  const double left = deadline_ - MonotonicSeconds();
  if (left <= 0) return Fail(TimeoutStatus());
  double wait = std::clamp(wait_seconds, 0.0, left);
  for (;;) {
    const size_t want = have_header_ ? kMessageHeaderBytes + header_.length : kMessageHeaderBytes;
    if (buffer_.size() < want) {
      const size_t have = buffer_.size();
      buffer_.resize(want);
      auto n = impl_->stream_->Read(std::span<uint8_t>(buffer_).subspan(have, want - have), wait);
      if (!n.ok()) {
        buffer_.resize(have);
        if (n.status().code() == StatusCode::kTimeout) {
          if (MonotonicSeconds() < deadline_) return false;  // nothing more yet
          return Fail(TimeoutStatus());
        }
        return Fail(ReadFailure(n.status()));
      }
      buffer_.resize(have + *n);
      wait = 0;  // what else is there, without waiting
      continue;
    }
    if (!have_header_) {
      Status s = transport::DecodeMessageHeader(buffer_, transport::kMaxHandshakeMessageBytes,
                                                &header_);
      if (!s.ok()) return Fail(ReadFailure(s.WithContext("message from " + remote())));
      have_header_ = true;
      continue;
    }
    // One whole handshake message.
    Message m;
    m.type = header_.type;
    m.flags = header_.flags;
    m.payload.assign(buffer_.begin() + kMessageHeaderBytes, buffer_.end());
    buffer_.clear();
    have_header_ = false;
    if (Checksum32(m.payload.data(), m.payload.size()) != header_.payload_checksum)
      return Fail(
          ReadFailure(Status::Corruption("message payload checksum mismatch from " + remote())));
    {
      std::lock_guard<std::mutex> lock(impl_->stats_mu_);
      impl_->stats_.bytes_received += kMessageHeaderBytes + m.payload.size();
      ++impl_->stats_.messages_received;
    }
    if (m.type == transport::kMsgError) {
      Status carried = transport::DecodeStatus(m.payload);
      if (carried.ok()) carried = Status::Corruption("peer sent an ERROR message with code ok");
      return Fail(ReadFailure(carried.WithContext("peer " + remote())));
    }
    KVSERVE_RETURN_IF_ERROR(got_hello_ ? OnResponse(m) : OnHello(m));
    if (done_) return true;
  }
}

// Errors while waiting for a message: before the HELLO they are returned as
// they are; after it (the client failed to answer the challenge) they mean
// the peer did not authenticate.
Status Connection::ServerHandshake::ReadFailure(const Status& s) const {
  if (!got_hello_) return s;
  return Status::PermissionDenied("client " + impl_->remote_ +
                                  " did not complete the handshake: " + s.ToString());
}

Status Connection::ServerHandshake::TimeoutStatus() const {
  return ReadFailure(Status::Timeout("handshake with " + impl_->remote_ +
                                     " did not finish within its deadline"));
}

Status Connection::ServerHandshake::OnHello(const Message& hello) {
  const auto& h = hello.payload;
  constexpr size_t kFixed = 4 + 1 + transport::kNonceBytes + 1;
  if (hello.type != transport::kMsgHello || h.size() < kFixed ||
      !std::equal(kHelloMagic, kHelloMagic + 4, h.begin()) || h.size() != kFixed + h[kFixed - 1])
    return Fail(Status::Corruption("malformed HELLO from " + remote()));
  const double left = std::max(0.0, deadline_ - MonotonicSeconds());
  if (h[4] != kAuthVersion) {
    Status s = Status::NotSupported("auth version " + std::to_string(h[4]));
    impl_->SendError(s, left);
    return Fail(s);
  }
  std::span<const uint8_t> client_nonce = std::span<const uint8_t>(h).subspan(5, transport::kNonceBytes);
  client_id_.assign(h.begin() + kFixed, h.end());
  transport::Nonce server_nonce;
  if (Status s = transport::RandomNonce(&server_nonce); !s.ok()) return Fail(s);
  const ConnectionOptions& o = impl_->options_;
  transcript_ = Impl::Transcript(client_nonce, server_nonce, client_id_, o.local_id);
  auto proof = transport::ComputeMac(o.secret, kServerLabel, transcript_);
  std::vector<uint8_t> challenge(server_nonce.begin(), server_nonce.end());
  challenge.push_back(static_cast<uint8_t>(o.local_id.size()));
  challenge.insert(challenge.end(), o.local_id.begin(), o.local_id.end());
  challenge.insert(challenge.end(), proof.begin(), proof.end());
  std::span<const uint8_t> part(challenge);
  if (Status s = impl_->SendRaw(transport::kMsgChallenge, 0, {&part, 1}, left); !s.ok())
    return Fail(s);
  got_hello_ = true;
  return Status::Ok();
}

Status Connection::ServerHandshake::OnResponse(const Message& response) {
  const double left = std::max(0.0, deadline_ - MonotonicSeconds());
  const ConnectionOptions& o = impl_->options_;
  auto expected = transport::ComputeMac(o.secret, kClientLabel, transcript_);
  if (response.type != transport::kMsgResponse ||
      !transport::MacEquals(response.payload, expected)) {
    impl_->SendError(Status::PermissionDenied("authentication failed"), left);
    return Fail(Status::PermissionDenied("client " + remote() + " failed authentication"));
  }
  if (Status s = impl_->SendRaw(transport::kMsgAuthOk, 0, {}, left); !s.ok()) return Fail(s);
  impl_->peer_id_ = client_id_.empty() ? impl_->remote_ : client_id_;
  impl_->authenticated_ = true;
  done_ = true;
  return Status::Ok();
}

std::unique_ptr<Connection> Connection::ServerHandshake::Take() {
  if (!done_ || !impl_) return nullptr;
  return std::unique_ptr<Connection>(new Connection(std::move(impl_)));
}

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

Result<std::unique_ptr<Connection>> Connection::Establish(std::unique_ptr<Stream> stream, Role role,
                                                          const ConnectionOptions& options) {
  if (stream == nullptr) return Status::InvalidArgument("null stream");
  if (options.local_id.size() > 255)
    return Status::InvalidArgument("local_id longer than 255 bytes");
  if (options.max_message_bytes == 0)
    return Status::InvalidArgument("max_message_bytes must be positive");
  if (role == Role::kServer) {
    ServerHandshake handshake(std::move(stream), options);
    for (;;) {
      auto done = handshake.Advance(handshake.deadline() - MonotonicSeconds());
      if (!done.ok()) return done.status();
      if (*done) return handshake.Take();
    }
  }
  auto impl = std::make_unique<Impl>(std::move(stream), options);
  Status s = impl->ClientHandshake();
  if (!s.ok()) {
    impl->stream_->Close();
    return s;
  }
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

Result<std::unique_ptr<Connection>> Connection::Dial(Transport& transport,
                                                     const std::string& address,
                                                     const ConnectionOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           transport.Connect(address, options.connect_timeout_seconds));
  return Establish(std::move(stream), Role::kClient, options);
}

Result<std::unique_ptr<Connection>> Connection::Accept(Listener& listener,
                                                       const ConnectionOptions& options,
                                                       double timeout_seconds) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, listener.Accept(timeout_seconds));
  return Establish(std::move(stream), Role::kServer, options);
}

Status Connection::SendParts(uint8_t type, uint8_t flags,
                             std::span<const std::span<const uint8_t>> parts) {
  if (type > kMaxUserMessageType)
    return Status::InvalidArgument("message type " + std::to_string(type) + " is reserved");
  return impl_->SendRaw(type, flags, parts, impl_->options_.io_timeout_seconds);
}

Status Connection::Send(uint8_t type, uint8_t flags, std::span<const uint8_t> payload) {
  return SendParts(type, flags, {&payload, 1});
}

Status Connection::Receive(Message* message, double timeout_seconds) {
  const double io = impl_->options_.io_timeout_seconds;
  return impl_->ReceiveRaw(message, timeout_seconds < 0 ? io : timeout_seconds, io);
}

Status Connection::ReceiveInto(Message* message, const PayloadPlacer& place,
                               double timeout_seconds) {
  const double io = impl_->options_.io_timeout_seconds;
  return impl_->ReceiveRaw(message, timeout_seconds < 0 ? io : timeout_seconds, io, &place);
}

void Connection::Recycle(Message&& message) {
  std::lock_guard<std::mutex> lock(impl_->recv_mu_);
  if (message.payload.capacity() > impl_->spare_.capacity()) impl_->spare_.swap(message.payload);
  message.placed = {};
}

void Connection::Fail(const Status& status) {
  impl_->SendError(status, std::min(1.0, impl_->options_.io_timeout_seconds));
  Close();
}

void Connection::Close() { (void)impl_->Break(Status::Unavailable("connection closed locally")); }

const std::string& Connection::peer_id() const { return impl_->peer_id_; }
std::string Connection::remote_address() const { return impl_->remote_; }
const ConnectionOptions& Connection::options() const { return impl_->options_; }
ConnectionStats Connection::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu_);
  return impl_->stats_;
}
void Connection::ReportGoodput(double bytes, double seconds) const {
  if (impl_->options_.goodput && bytes > 0 && seconds > 0)
    impl_->options_.goodput(impl_->peer_id_, bytes, seconds);
}

}  // namespace kvserve
