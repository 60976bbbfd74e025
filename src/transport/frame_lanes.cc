// Copyright kvserve authors. transport/frame_lanes.h.
#include "transport/frame_lanes.h"

#include <algorithm>
#include <string>
#include <utility>

#include "transport/wire.h"

namespace kvserve::transport {

size_t NextLane(std::span<const uint64_t> lane_bytes) {
  return static_cast<size_t>(std::min_element(lane_bytes.begin(), lane_bytes.end()) - lane_bytes.begin());
}

Result<TransferStats> AcknowledgeTransfer(Connection& connection, Status verdict,
                                          const TransferStats& stats, uint64_t sent_records,
                                          uint64_t sent_bytes) {
  if (verdict.ok() && (sent_records != stats.records || sent_bytes != stats.frame_bytes))
    verdict = Status::Corruption("transfer " + std::to_string(stats.transfer_id) + ": sender sent " +
                                 std::to_string(sent_records) + " records, received " +
                                 std::to_string(stats.records));
  std::vector<uint8_t> ack;
  EncodeStatus(verdict, &ack);
  KVSERVE_RETURN_IF_ERROR(connection.Send(kMsgFrameAck, 0, ack));
  if (!verdict.ok()) return verdict;
  return stats;
}

LaneSenders::LaneSenders(std::vector<Connection*> lanes)
    : lanes_(std::move(lanes)), lane_bytes_(lanes_.size()), jobs_(lanes_.size()) {
  for (size_t k = 1; k < lanes_.size(); ++k) threads_.emplace_back([this, k] { Run(k); });
}

LaneSenders::~LaneSenders() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status LaneSenders::SendAll(size_t lane, const Job& job) {
  for (std::span<const uint8_t> r : job.records)
    KVSERVE_RETURN_IF_ERROR(lanes_[lane]->Send(job.type, 0, r));
  return Status::Ok();
}

void LaneSenders::Run(size_t lane) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return jobs_[lane].pending || stopping_; });
    if (!jobs_[lane].pending) return;
    lock.unlock();
    Status s = SendAll(lane, jobs_[lane]);
    lock.lock();
    jobs_[lane].status = std::move(s);
    jobs_[lane].pending = false;
    cv_.notify_all();
  }
}

Status LaneSenders::SendRecords(std::span<const std::span<const uint8_t>> records,
                                uint64_t first_index) {
  const size_t n = lanes_.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : jobs_) {
      j.records.clear();
      j.type = kMsgFrameRecord;
      j.status = Status::Ok();
    }
    if (first_index == 0) std::fill(lane_bytes_.begin(), lane_bytes_.end(), 0);
    for (std::span<const uint8_t> r : records) {
      const size_t k = NextLane(lane_bytes_);
      lane_bytes_[k] += r.size();
      jobs_[k].records.push_back(r);
    }
    for (size_t k = 1; k < n; ++k) jobs_[k].pending = !jobs_[k].records.empty();
  }
  cv_.notify_all();
  Status first = SendAll(0, jobs_[0]);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    for (size_t k = 1; k < n; ++k)
      if (jobs_[k].pending) return false;
    return true;
  });
  for (size_t k = 1; k < n && first.ok(); ++k) first = jobs_[k].status;
  return first;
}

Status LaneSenders::SendOnEveryLane(uint8_t type, std::span<const uint8_t> payload) {
  Status first;
  for (Connection* c : lanes_) {
    Status s = c->Send(type, 0, payload);
    if (first.ok()) first = s;
  }
  return first;
}

namespace {

// A lane's next messages, read ahead of delivery into a ring of slots.
struct LaneSlot {
  enum class Kind { kEmpty, kRecord, kEnd, kAbort, kError };
  Kind kind = Kind::kEmpty;
  Message message;
  Status error;
};
constexpr size_t kSlotsPerLane = 4;
struct Lane {
  LaneSlot slots[kSlotsPerLane];
  uint64_t filled = 0;    // messages read into the ring
  uint64_t released = 0;  // messages delivered and handed back
  std::condition_variable cv;  // this lane's reader: a free slot, its turn to place
};

class StripedReceiver {
 public:
  StripedReceiver(std::vector<Connection*> connections, const FrameHandler& handler)
      : connections_(std::move(connections)),
        handler_(handler),
        lanes_(connections_.size()),
        lane_bytes_(connections_.size()) {}

  Result<TransferStats> Run(const Message& begin) {
    const double start = MonotonicSeconds();
    TransferStats stats;
    stats.transfer_id = GetU64(begin.payload.data());
    stats.frame_bytes = begin.payload.size() - 8;
    stats.wire_bytes = kMessageHeaderBytes + begin.payload.size();
    if (handler_.on_header) {
      SetVerdict(handler_.on_header(stats.transfer_id, std::span<const uint8_t>(begin.payload).subspan(8)));
    }
    std::vector<std::thread> readers;
    for (size_t k = 0; k < lanes_.size(); ++k) readers.emplace_back([this, k] { Read(k); });
    Result<TransferStats> out = Deliver(stats);
    if (!out.ok() && broken_) {
      for (Connection* c : connections_) c->Close();  // unblocks every reader
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    for (Lane& l : lanes_) l.cv.notify_all();
    for (std::thread& t : readers) t.join();
    if (out.ok()) out->elapsed_seconds = MonotonicSeconds() - start;
    return out;
  }

 private:
  bool VerdictOk() {
    std::lock_guard<std::mutex> lock(verdict_mu_);
    return verdict_.ok();
  }
  void SetVerdict(Status s) {
    std::lock_guard<std::mutex> lock(verdict_mu_);
    if (verdict_.ok()) verdict_ = std::move(s);
  }

  // Lane k: the records NextLane assigns to it, then its END (or ABORT).
  void Read(size_t k) {
    Lane& lane = lanes_[k];
    for (;;) {
      LaneSlot* slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        lane.cv.wait(lock, [&] { return lane.filled - lane.released < kSlotsPerLane || stop_; });
        if (stop_) return;
        slot = &lane.slots[lane.filled % kSlotsPerLane];
      }
      // Records are placed in transfer order: this one once the transfer's
      // next record is this lane's (the sizes before it decide).
      PayloadPlacer place = [&](uint8_t type, uint64_t length) -> std::span<uint8_t> {
        if (type != kMsgFrameRecord) return {};
        std::unique_lock<std::mutex> lock(mu_);
        lane.cv.wait(lock, [&] { return NextLane(lane_bytes_) == k || stop_; });
        if (stop_) return {};
        std::span<uint8_t> out;
        if (handler_.place_record && VerdictOk()) out = handler_.place_record(length);
        lane_bytes_[k] += length;
        lane_of_.push_back(k);
        for (Lane& l : lanes_) l.cv.notify_all();
        delivered_cv_.notify_one();
        return out;
      };
      Status s = connections_[k]->ReceiveInto(&slot->message, place);
      LaneSlot::Kind kind;
      if (!s.ok()) {
        kind = LaneSlot::Kind::kError;
        slot->error = std::move(s);
      } else if (slot->message.type == kMsgFrameRecord) {
        kind = LaneSlot::Kind::kRecord;
      } else if (slot->message.type == kMsgFrameEnd && slot->message.payload.size() == 16) {
        kind = LaneSlot::Kind::kEnd;
      } else if (slot->message.type == kMsgFrameAbort) {
        kind = LaneSlot::Kind::kAbort;
      } else {
        kind = LaneSlot::Kind::kError;
        slot->error = Status::Corruption("unexpected message type " + std::to_string(slot->message.type) +
                                         " on lane " + std::to_string(k) + " of a transfer");
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot->kind = kind;
        ++lane.filled;
        if (kind == LaneSlot::Kind::kError && failure_.ok()) failure_ = slot->error;
      }
      delivered_cv_.notify_one();
      if (kind != LaneSlot::Kind::kRecord) return;
    }
  }

  // The head of lane k's ring once it is filled; Release hands it back.
  LaneSlot& Head(size_t k) { return lanes_[k].slots[lanes_[k].released % kSlotsPerLane]; }
  bool HeadFilled(size_t k) { return lanes_[k].filled > lanes_[k].released; }
  void Release(size_t k) {
    Lane& lane = lanes_[k];
    {
      std::lock_guard<std::mutex> lock(mu_);
      lane.slots[lane.released % kSlotsPerLane].kind = LaneSlot::Kind::kEmpty;
      ++lane.released;
    }
    lane.cv.notify_all();
  }

  // Record i's lane once it was placed and read, or -1 once the lane it
  // would be on ended instead (every record delivered); a lane's failure
  // is returned as soon as it happens.
  Result<int> NextRecordLane(uint64_t i) {
    std::unique_lock<std::mutex> lock(mu_);
    int lane = -1;
    delivered_cv_.wait(lock, [&] {
      if (!failure_.ok()) return true;
      if (lane_of_.size() > i) {
        lane = static_cast<int>(lane_of_[i]);
        return HeadFilled(lane_of_[i]);
      }
      const size_t k = NextLane(lane_bytes_);
      lane = -1;
      return HeadFilled(k) && Head(k).kind != LaneSlot::Kind::kRecord;
    });
    if (!failure_.ok()) return failure_;
    return lane;
  }

  Result<TransferStats> Deliver(TransferStats& stats) {
    const size_t n = lanes_.size();
    for (uint64_t i = 0;; ++i) {
      Result<int> lane = NextRecordLane(i);
      if (!lane.ok()) return Broken(lane.status());
      if (*lane < 0) break;
      LaneSlot& slot = Head(*lane);
      const std::span<const uint8_t> record = slot.message.bytes();
      ++stats.records;
      stats.frame_bytes += record.size();
      stats.wire_bytes += kMessageHeaderBytes + record.size();
      if (VerdictOk() && handler_.on_record) SetVerdict(handler_.on_record(record));
      Release(*lane);
    }
    // Every record delivered: each lane's next message is its END (or ABORT).
    Status aborted;
    uint64_t sent_records = 0, sent_bytes = 0;
    for (size_t j = 0; j < n; ++j) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        delivered_cv_.wait(lock, [&] { return HeadFilled(j) || !failure_.ok(); });
        if (!HeadFilled(j)) return Broken(failure_);
      }
      LaneSlot& slot = Head(j);
      if (slot.kind == LaneSlot::Kind::kError) return Broken(slot.error);
      if (slot.kind == LaneSlot::Kind::kRecord)
        return Broken(Status::Corruption("a record after the end of transfer " +
                                         std::to_string(stats.transfer_id)));
      stats.wire_bytes += kMessageHeaderBytes + slot.message.payload.size();
      if (slot.kind == LaneSlot::Kind::kAbort) {
        if (aborted.ok()) aborted = DecodeStatus(slot.message.payload);
        if (aborted.ok()) aborted = Status::Corruption("an ABORT with code ok");
      } else if (j == 0) {
        sent_records = GetU64(slot.message.payload.data());
        sent_bytes = GetU64(slot.message.payload.data() + 8);
      } else if (GetU64(slot.message.payload.data()) != sent_records ||
                 GetU64(slot.message.payload.data() + 8) != sent_bytes) {
        return Broken(Status::Corruption("the lanes of transfer " + std::to_string(stats.transfer_id) +
                                         " disagree on its size"));
      }
    }
    if (!aborted.ok())
      return aborted.WithContext("transfer " + std::to_string(stats.transfer_id) + " aborted by sender");
    Status verdict;
    {
      std::lock_guard<std::mutex> lock(verdict_mu_);
      verdict = verdict_;
    }
    return AcknowledgeTransfer(*connections_[0], std::move(verdict), stats, sent_records, sent_bytes);
  }

  Status Broken(Status s) {
    broken_ = true;
    return s;
  }

  std::vector<Connection*> connections_;
  const FrameHandler& handler_;
  std::vector<Lane> lanes_;
  std::mutex mu_;
  std::condition_variable delivered_cv_;  // the delivering thread: a slot filled, a record placed
  std::vector<uint64_t> lane_bytes_;      // record bytes placed per lane (NextLane's input)
  std::vector<size_t> lane_of_;           // the lane of each record placed so far
  Status failure_;                        // the first lane's error
  bool stop_ = false;
  bool broken_ = false;
  std::mutex verdict_mu_;
  Status verdict_;
};

}  // namespace

Result<TransferStats> ReceiveStriped(Connection& main, std::span<Connection* const> lanes,
                                     const Message& begin, const FrameHandler& handler) {
  std::vector<Connection*> all{&main};
  all.insert(all.end(), lanes.begin(), lanes.end());
  StripedReceiver receiver(std::move(all), handler);
  return receiver.Run(begin);
}

}  // namespace kvserve::transport
