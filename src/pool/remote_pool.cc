// Copyright kvserve authors. The client of `kvserve pool serve`.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvserve/pool.h"
#include "pool/frame_units.h"
#include "pool/pool_wire.h"

namespace kvserve {
namespace {

class RemotePool final : public KvPool {
 public:
  RemotePool(Transport* transport, RemotePoolOptions options)
      : transport_(transport), options_(std::move(options)) {}

  Status Put(const PoolKey& key, std::span<const uint8_t> frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::vector<uint8_t> k;
    pool::EncodeKey(key, &k);
    std::span<const uint8_t> parts[2] = {k, frame};
    std::span<const uint8_t> body;
    std::lock_guard<std::mutex> lock(mu_);
    return Request(pool::kMsgPut, parts, &body);
  }

  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::vector<uint8_t> k;
    pool::EncodeKey(key, &k);
    std::span<const uint8_t> parts[1] = {k};
    std::span<const uint8_t> body;
    std::lock_guard<std::mutex> lock(mu_);
    const double start = MonotonicSeconds();
    KVSERVE_RETURN_IF_ERROR(Request(pool::kMsgGet, parts, &body));
    const double seconds = MonotonicSeconds() - start;
    frame->assign(body.begin(), body.end());
    if (conn_ && body.size() >= options_.goodput_min_bytes)
      conn_->ReportGoodput(static_cast<double>(reply_.payload.size()), seconds);
    return Status::Ok();
  }

  // The server streams the frame after its reply; a connection lost before
  // the first byte reached `handler` is redialled and the request retried,
  // one lost later is Unavailable (what was delivered cannot be taken back).
  Status GetRecords(const PoolKey& key, const FrameHandler& handler) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::vector<uint8_t> k;
    pool::EncodeKey(key, &k);
    std::lock_guard<std::mutex> lock(mu_);
    return FirstFrame(pool::kMsgGetFrame, k, handler);
  }

  // One kMsgGetFrames request for every key: the server streams frame i+1
  // as soon as the reader has acknowledged frame i. The first frame is
  // retried as GetRecords is; a connection lost later ends the sequence
  // with Unavailable. A reader that stops while the server still streams
  // is answered by refusing the next frame, so the connection stays usable.
  void GetRecordsInOrder(std::span<const PoolKey> keys,
                         const std::function<bool(size_t, const PoolFrameReader&)>& each) override {
    if (keys.empty()) return;
    Status invalid;
    for (const PoolKey& key : keys)
      if (invalid.ok()) invalid = ValidatePoolKey(key);
    std::vector<uint8_t> request;
    if (invalid.ok()) pool::EncodeKeys(keys, &request);
    std::lock_guard<std::mutex> lock(mu_);
    bool streaming = false;  // the server may still send a reply and frame for keys[i]
    for (size_t i = 0; i < keys.size(); ++i) {
      bool ran = false;
      Status status;
      const PoolFrameReader read = pool::ReadOnce(&ran, [&](const FrameHandler& handler) {
        if (!invalid.ok()) {
          status = invalid;
        } else if (i == 0) {
          status = FirstFrame(pool::kMsgGetFrames, request, handler);
        } else {
          bool delivered = false;
          if (ReceiveStreamedFrame(handler, &delivered, &status) != Next::kReturn) {
            conn_.reset();
            status = GaveUp(status);
          }
        }
        // An ok frame is followed by the next key's reply; a refused one
        // (the handler's error) or a server's not-ok reply ends the request.
        streaming = status.ok() && conn_ && i + 1 < keys.size();
        return status;
      });
      if (!each(i, read) || !ran || !status.ok()) break;
    }
    if (streaming) DrainFrames();
  }

  Status Delete(const PoolKey& key) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::vector<uint8_t> k;
    pool::EncodeKey(key, &k);
    std::span<const uint8_t> parts[1] = {k};
    std::span<const uint8_t> body;
    std::lock_guard<std::mutex> lock(mu_);
    return Request(pool::kMsgDelete, parts, &body);
  }

  Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id,
                                            uint64_t prefix_hash) override {
    if (model_id.empty() || model_id.size() > kMaxPoolModelIdBytes)
      return Status::InvalidArgument("pool lookup: bad model id length");
    std::vector<uint8_t> p;
    pool::EncodePrefix(model_id, prefix_hash, &p);
    std::span<const uint8_t> parts[1] = {p};
    std::span<const uint8_t> body;
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_RETURN_IF_ERROR(Request(pool::kMsgLookup, parts, &body));
    return pool::DecodeLookup(body);
  }

  Result<PoolStats> Stats() override {
    std::span<const uint8_t> body;
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_RETURN_IF_ERROR(Request(pool::kMsgStats, {}, &body));
    return pool::DecodeStats(body);
  }

 private:
  // Dials the server into conn_ unless connected. Caller holds mu_.
  Status Connected() {
    if (conn_) return Status::Ok();
    auto c = Connection::Dial(*transport_, options_.address, options_.connection);
    if (!c.ok()) return c.status();
    conn_ = std::move(*c);
    return Status::Ok();
  }
  // A dial error that no retry can fix (a refused secret, a bad address).
  static bool Refused(const Status& s) {
    return s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kInvalidArgument;
  }
  // The error of a request whose attempts all failed with `last`.
  Status GaveUp(const Status& last) const {
    return Status(
        last.code() == StatusCode::kPermissionDenied ? last.code() : StatusCode::kUnavailable,
        "pool at " + options_.address + ": " + last.ToString());
  }

  // Sends a request and waits for its reply, redialling and retrying after a
  // connection failure. *body points into reply_. Caller holds mu_.
  Status Request(uint8_t type, std::span<const std::span<const uint8_t>> parts,
                 std::span<const uint8_t>* body) {
    return WithReconnects([&](Status* s) {
      *s = conn_->SendParts(type, 0, parts);
      if (s->ok()) *s = conn_->Receive(&reply_);
      if (s->ok()) {
        if (reply_.type == pool::kMsgReply) {
          *s = pool::DecodeReply(reply_.payload, body);
          return Next::kReturn;
        }
        *s = Status::Corruption("unexpected pool reply type " + std::to_string(reply_.type));
      }
      // Oversized request: no point retrying.
      return s->code() == StatusCode::kResourceExhausted ? Next::kReturn : Next::kRetry;
    });
  }

  // What an attempt asks next: return its status as the request's, redial
  // and try again, or stop trying (the request gives up with its status).
  enum class Next { kReturn, kRetry, kGiveUp };

  // Sends a frame request (kMsgGetFrame or kMsgGetFrames) and receives the
  // first frame into `handler`, redialling while nothing was delivered.
  // Caller holds mu_.
  Status FirstFrame(uint8_t type, std::span<const uint8_t> request, const FrameHandler& handler) {
    std::span<const uint8_t> parts[1] = {request};
    bool delivered = false;
    return WithReconnects([&](Status* s) {
      frame_start_ = MonotonicSeconds();
      *s = conn_->SendParts(type, 0, parts);
      if (s->ok()) return ReceiveStreamedFrame(handler, &delivered, s);
      return s->code() == StatusCode::kResourceExhausted ? Next::kGiveUp : Next::kRetry;
    });
  }

  // Receives a reply and, when it is ok, the frame the server streams after
  // it into `handler` (*delivered once the handler saw its header). kReturn
  // with the server's status (e.g. NotFound), the handler's error (the
  // frame drained and refused, the connection usable) or Ok; otherwise the
  // connection failed, kGiveUp once something was delivered. Caller holds mu_.
  Next ReceiveStreamedFrame(const FrameHandler& handler, bool* delivered, Status* s) {
    Status handler_error;
    FrameHandler wrapped;
    wrapped.on_header = [&](uint64_t id, std::span<const uint8_t> header) {
      *delivered = true;
      handler_error = handler.on_header(id, header);
      return handler_error;
    };
    wrapped.on_record = [&](std::span<const uint8_t> record) {
      handler_error = handler.on_record(record);
      return handler_error;
    };
    wrapped.place_record = handler.place_record;
    *s = conn_->Receive(&reply_);
    if (s->ok() && reply_.type != pool::kMsgReply)
      *s = Status::Corruption("unexpected pool reply type " + std::to_string(reply_.type));
    if (s->ok()) {
      std::span<const uint8_t> body;
      *s = pool::DecodeReply(reply_.payload, &body);  // e.g. NotFound
      if (!s->ok()) return Next::kReturn;
      auto stats = ReceiveFrame(*conn_, wrapped);
      if (stats.ok()) {
        // From the request (or the previous frame's end, when the server
        // streams frames back to back) to this frame's end.
        const double now = MonotonicSeconds();
        const double seconds = now - frame_start_;
        frame_start_ = now;
        if (stats->frame_bytes >= options_.goodput_min_bytes && seconds > 0)
          conn_->ReportGoodput(static_cast<double>(stats->frame_bytes), seconds);
        return Next::kReturn;
      }
      if (!handler_error.ok()) {
        *s = handler_error;
        return Next::kReturn;
      }
      *s = stats.status();
    }
    return *delivered || s->code() == StatusCode::kResourceExhausted ? Next::kGiveUp : Next::kRetry;
  }

  // Ends a kMsgGetFrames whose reader stopped early: the next frame, if the
  // server sends one, is refused at its header (drained and acknowledged as
  // refused), which stops the server. A failure drops the connection.
  // Caller holds mu_.
  void DrainFrames() {
    FrameHandler refuse;
    refuse.on_header = [](uint64_t, std::span<const uint8_t>) {
      return Status::OutOfRange("the reader stopped before this frame");
    };
    refuse.on_record = [](std::span<const uint8_t>) { return Status::Ok(); };
    bool delivered = false;
    Status s;
    const Next next = ReceiveStreamedFrame(refuse, &delivered, &s);
    if (next != Next::kReturn || s.code() == StatusCode::kCorruption) conn_.reset();
  }

  // Runs `attempt` on a live connection, at most 1 + reconnect_attempts
  // times: a dial that fails is retried (refused: given up at once), an
  // attempt that asks kRetry or kGiveUp drops the connection. Caller holds mu_.
  Status WithReconnects(const std::function<Next(Status*)>& attempt) {
    Status last;
    for (int tries = 0; tries <= options_.reconnect_attempts; ++tries) {
      last = Connected();
      if (!last.ok()) {
        if (Refused(last)) break;
        continue;
      }
      Status s;
      const Next next = attempt(&s);
      if (next == Next::kReturn) return s;
      conn_.reset();
      last = s;
      if (next == Next::kGiveUp) break;
    }
    return GaveUp(last);
  }

  Transport* transport_;
  RemotePoolOptions options_;
  std::mutex mu_;
  std::unique_ptr<Connection> conn_;
  Message reply_;
  double frame_start_ = 0;  // when the frame now received was asked for (or the last one ended)
};

}  // namespace

std::unique_ptr<KvPool> NewRemotePool(Transport* transport, RemotePoolOptions options) {
  return std::make_unique<RemotePool>(transport, std::move(options));
}

}  // namespace kvserve
