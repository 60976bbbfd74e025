// Copyright kvserve authors. Layer-wise streaming of frames
// (docs/transport.md §Streaming): FrameSender, its record splitter, and
// ReceiveFrame.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvserve/transport.h"
#include "pipeline/frame_format.h"
#include "transport/frame_lanes.h"
#include "transport/wire.h"

namespace kvserve {

// Splits a frame's byte stream into the header and whole records.
class FrameSender::Splitter final : public ByteSink {
 public:
  explicit Splitter(FrameSender* sender) : sender_(sender) {}

  void Reset(uint64_t transfer_id) {
    transfer_id_ = transfer_id;
    header_done_ = false;
    buffer_.clear();
    failed_ = Status::Ok();
  }

  Status Append(std::span<const uint8_t> bytes) override {
    KVSERVE_RETURN_IF_ERROR(failed_);
    Status s = AppendImpl(bytes);
    if (s.ok()) s = Flush();  // the batch points into `bytes`
    batch_.clear();
    if (!s.ok()) failed_ = s;
    return s;
  }

  bool has_partial() const { return !buffer_.empty(); }

 private:
  Status AppendImpl(std::span<const uint8_t> bytes) {
    while (!bytes.empty()) {
      if (buffer_.empty()) {
        // Fast path: whole units straight from the caller's bytes.
        KVSERVE_ASSIGN_OR_RETURN(size_t need, UnitSize(bytes));
        if (need > 0 && bytes.size() >= need) {
          KVSERVE_RETURN_IF_ERROR(Emit(bytes.first(need)));
          bytes = bytes.subspan(need);
          continue;
        }
      }
      // Slow path: accumulate until the unit's size is known and complete.
      KVSERVE_ASSIGN_OR_RETURN(size_t need, UnitSize(buffer_));
      size_t want = need > 0 ? need - buffer_.size()
                             : (header_done_ ? pipeline::kRecordHeaderBytes
                                             : pipeline::kFrameFixedHeaderBytes) -
                                   buffer_.size();
      size_t take = std::min(want, bytes.size());
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + take);
      bytes = bytes.subspan(take);
      KVSERVE_ASSIGN_OR_RETURN(need, UnitSize(buffer_));
      if (need > 0 && buffer_.size() == need) {
        KVSERVE_RETURN_IF_ERROR(Emit(buffer_));
        KVSERVE_RETURN_IF_ERROR(Flush());  // before buffer_ is reused
        buffer_.clear();
      }
    }
    return Status::Ok();
  }

  // Size of the unit (header or record) starting at `prefix`, or 0 when the
  // prefix is too short to tell.
  Result<size_t> UnitSize(std::span<const uint8_t> prefix) const {
    if (!header_done_) {
      auto size = pipeline::FrameHeaderSize(prefix);
      if (!size.ok()) return size.status().WithContext("frame stream");
      return *size;
    }
    const uint64_t size = pipeline::RecordSize(prefix);
    if (size == 0) return size_t{0};
    if (size > sender_->connection_->options().max_message_bytes)
      return Status::Corruption("frame stream: record of " + std::to_string(size) +
                                " bytes exceeds the message limit");
    return static_cast<size_t>(size);
  }

  // Records collect into a batch (sent together: on lanes, in parallel).
  Status Emit(std::span<const uint8_t> unit) {
    if (!header_done_) {
      header_done_ = true;
      return sender_->Begin(transfer_id_, unit);
    }
    batch_.push_back(unit);
    return Status::Ok();
  }
  Status Flush() {
    if (batch_.empty()) return Status::Ok();
    Status s = sender_->SendRecords(batch_);
    batch_.clear();
    return s;
  }

  FrameSender* sender_;
  uint64_t transfer_id_ = 0;
  bool header_done_ = false;
  std::vector<uint8_t> buffer_;
  std::vector<std::span<const uint8_t>> batch_;
  Status failed_;
};

FrameSender::FrameSender(Connection* connection, std::vector<Connection*> lanes)
    : connection_(connection), splitter_(std::make_unique<Splitter>(this)) {
  lanes.insert(lanes.begin(), connection);
  lanes_ = std::make_unique<transport::LaneSenders>(std::move(lanes));
}
FrameSender::~FrameSender() { LeaveLink(); }

void FrameSender::LeaveLink() {
  if (counted_link_ != nullptr) counted_link_->LeaveTransfer();
  counted_link_.reset();
}

Status FrameSender::Begin(uint64_t transfer_id, std::span<const uint8_t> header) {
  if (open_) return Status::InvalidArgument("FrameSender::Begin: a transfer is open");
  if (ack_pending_) return Status::InvalidArgument("FrameSender::Begin: the last transfer awaits its ack");
  stats_ = TransferStats{};
  stats_.transfer_id = transfer_id;
  begin_time_ = MonotonicSeconds();
  uint8_t id[8];
  transport::PutU64(id, transfer_id);
  std::span<const uint8_t> parts[2] = {std::span<const uint8_t>(id, 8), header};
  const double start = MonotonicSeconds();
  KVSERVE_RETURN_IF_ERROR(connection_->SendParts(kMsgFrameBegin, 0, parts));
  last_write_end_ = MonotonicSeconds();
  stats_.busy_seconds += last_write_end_ - start;
  stats_.frame_bytes += header.size();
  stats_.wire_bytes += transport::kMessageHeaderBytes + 8 + header.size();
  open_ = true;
  if (const auto& link = connection_->options().shared_link; link != nullptr) {
    link->EnterTransfer();
    counted_link_ = link;
  }
  return Status::Ok();
}

Status FrameSender::SendRecord(std::span<const uint8_t> record) { return SendRecords({&record, 1}); }

Status FrameSender::SendRecords(std::span<const std::span<const uint8_t>> records) {
  if (!open_) return Status::InvalidArgument("FrameSender::SendRecord outside a transfer");
  const double start = MonotonicSeconds();
  Status s = lanes_->SendRecords(records, stats_.records);
  if (!s.ok()) {
    open_ = false;
    return s;
  }
  last_write_end_ = MonotonicSeconds();
  stats_.busy_seconds += last_write_end_ - start;
  for (std::span<const uint8_t> r : records) {
    stats_.frame_bytes += r.size();
    stats_.wire_bytes += transport::kMessageHeaderBytes + r.size();
  }
  stats_.records += records.size();
  return Status::Ok();
}

Result<TransferStats> FrameSender::Finish() {
  KVSERVE_RETURN_IF_ERROR(End());
  return AwaitAck();
}

Status FrameSender::End() {
  if (!open_) return Status::InvalidArgument("FrameSender::End outside a transfer");
  open_ = false;
  if (splitter_->has_partial())
    return Status::InvalidArgument("FrameSender::End: the sink holds an incomplete record");
  uint8_t end[16];
  transport::PutU64(end, stats_.records);
  transport::PutU64(end + 8, stats_.frame_bytes);
  const double start = MonotonicSeconds();
  const std::span<const uint8_t> end_payload(end, 16);
  KVSERVE_RETURN_IF_ERROR(lanes_->SendOnEveryLane(kMsgFrameEnd, end_payload));
  last_write_end_ = MonotonicSeconds();
  stats_.busy_seconds += last_write_end_ - start;
  stats_.wire_bytes += lanes_->size() * (transport::kMessageHeaderBytes + 16);
  ack_pending_ = true;
  return Status::Ok();
}

Result<TransferStats> FrameSender::AwaitAck() {
  if (!ack_pending_) return Status::InvalidArgument("FrameSender::AwaitAck: no ended transfer awaits its ack");
  ack_pending_ = false;
  const double start = MonotonicSeconds();
  Message ack;
  const Status received = connection_->Receive(&ack);
  LeaveLink();  // acknowledged or lost: off the link either way
  KVSERVE_RETURN_IF_ERROR(received);
  const double now = MonotonicSeconds();
  if (ack.type != kMsgFrameAck)
    return Status::Corruption("expected a frame ack, got message type " + std::to_string(ack.type));
  KVSERVE_RETURN_IF_ERROR(transport::DecodeStatus(ack.payload)
                              .WithContext("receiver " + connection_->peer_id() +
                                           " rejected transfer " +
                                           std::to_string(stats_.transfer_id)));
  // The drain to the ack is transfer time too (the socket buffers
  // emptying), plus about one round trip. It starts at the last write, or
  // at this call when the caller waited before finishing (e.g. for the
  // prefill that produces the frame, or another transfer sent meanwhile):
  // that wait is the caller's, not the link's, and counting it would make
  // a fast link look slow.
  stats_.busy_seconds += now - std::max(last_write_end_, start);
  stats_.elapsed_seconds = now - begin_time_;
  connection_->ReportGoodput(static_cast<double>(stats_.wire_bytes), stats_.busy_seconds);
  return stats_;
}

Status FrameSender::Abort(const Status& reason) {
  // Nothing began (or the transfer already ended): an abort now would reach
  // the receiver as a stray message before the next transfer's begin.
  if (!open_) return Status::Ok();
  open_ = false;
  LeaveLink();
  std::vector<uint8_t> payload;
  transport::EncodeStatus(reason.ok() ? Status::Internal("aborted") : reason, &payload);
  return lanes_->SendOnEveryLane(kMsgFrameAbort, payload);
}

ByteSink& FrameSender::sink(uint64_t transfer_id) {
  splitter_->Reset(transfer_id);
  return *splitter_;
}

bool FrameSender::sink_has_partial() const { return splitter_->has_partial(); }

Result<TransferStats> ReceiveFrame(Connection& connection, const FrameHandler& handler,
                                   double timeout_seconds, std::span<Connection* const> lanes) {
  Message m;
  KVSERVE_RETURN_IF_ERROR(connection.Receive(&m, timeout_seconds));
  return ReceiveFrameFrom(connection, m, handler, lanes);
}

Result<TransferStats> ReceiveFrameFrom(Connection& connection, const Message& begin_message,
                                       const FrameHandler& handler,
                                       std::span<Connection* const> lanes) {
  if (begin_message.type != kMsgFrameBegin || begin_message.payload.size() < 8) {
    Status s = Status::Corruption("expected a frame begin, got message type " +
                                  std::to_string(begin_message.type));
    connection.Fail(s);
    return s;
  }
  if (!lanes.empty()) return transport::ReceiveStriped(connection, lanes, begin_message, handler);
  Message m;
  // The records' buffer goes back to the connection for the next frame.
  struct Recycler {
    Connection& c;
    Message& m;
    ~Recycler() { c.Recycle(std::move(m)); }
  } recycler{connection, m};
  const double begin = MonotonicSeconds();
  TransferStats stats;
  stats.transfer_id = transport::GetU64(begin_message.payload.data());
  stats.frame_bytes = begin_message.payload.size() - 8;
  stats.wire_bytes = transport::kMessageHeaderBytes + begin_message.payload.size();
  Status verdict =
      handler.on_header
          ? handler.on_header(stats.transfer_id,
                              std::span<const uint8_t>(begin_message.payload).subspan(8))
          : Status::Ok();
  // Records go straight into the handler's memory while it accepts them.
  PayloadPlacer place;
  if (handler.place_record) {
    place = [&](uint8_t type, uint64_t length) -> std::span<uint8_t> {
      if (type != kMsgFrameRecord || !verdict.ok()) return {};
      return handler.place_record(length);
    };
  }
  for (;;) {
    KVSERVE_RETURN_IF_ERROR(connection.ReceiveInto(&m, place));
    const std::span<const uint8_t> payload = m.bytes();
    stats.wire_bytes += transport::kMessageHeaderBytes + payload.size();
    if (m.type == kMsgFrameRecord) {
      ++stats.records;
      stats.frame_bytes += payload.size();
      if (verdict.ok() && handler.on_record) verdict = handler.on_record(payload);
      continue;
    }
    if (m.type == kMsgFrameAbort) {
      return transport::DecodeStatus(m.payload).WithContext(
          "transfer " + std::to_string(stats.transfer_id) + " aborted by sender");
    }
    if (m.type == kMsgFrameEnd && m.payload.size() == 16) {
      stats.elapsed_seconds = MonotonicSeconds() - begin;
      return transport::AcknowledgeTransfer(connection, verdict, stats,
                                            transport::GetU64(m.payload.data()),
                                            transport::GetU64(m.payload.data() + 8));
    }
    Status s = Status::Corruption("unexpected message type " + std::to_string(m.type) +
                                  " inside transfer " + std::to_string(stats.transfer_id));
    connection.Fail(s);
    return s;
  }
}

}  // namespace kvserve
