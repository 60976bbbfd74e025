// Copyright kvserve authors. transport/frame_lanes.h.
#include "transport/frame_lanes.h"

#include <string>
#include <utility>

#include "transport/wire.h"

namespace kvserve::transport {

LaneSenders::LaneSenders(std::vector<Connection*> lanes)
    : lanes_(std::move(lanes)), jobs_(lanes_.size()) {
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
    for (size_t j = 0; j < records.size(); ++j) jobs_[(first_index + j) % n].records.push_back(records[j]);
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
      : connections_(std::move(connections)), handler_(handler), lanes_(connections_.size()) {}

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

  // Lane k: records k, k + n, ... then its END (or ABORT).
  void Read(size_t k) {
    const size_t n = lanes_.size();
    Lane& lane = lanes_[k];
    uint64_t index = k;
    for (;;) {
      LaneSlot* slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        lane.cv.wait(lock, [&] { return lane.filled - lane.released < kSlotsPerLane || stop_; });
        if (stop_) return;
        slot = &lane.slots[lane.filled % kSlotsPerLane];
      }
      // Records are placed in transfer order: this one once the one before
      // it (on another lane) has its place.
      PayloadPlacer place = [&](uint8_t type, uint64_t length) -> std::span<uint8_t> {
        if (type != kMsgFrameRecord) return {};
        std::unique_lock<std::mutex> lock(mu_);
        lane.cv.wait(lock, [&] { return next_place_ == index || stop_; });
        if (stop_) return {};
        std::span<uint8_t> out;
        if (handler_.place_record && VerdictOk()) out = handler_.place_record(length);
        ++next_place_;
        lanes_[next_place_ % n].cv.notify_all();
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
      }
      delivered_cv_.notify_one();
      if (kind != LaneSlot::Kind::kRecord) return;
      index += n;
    }
  }

  // Waits for lane k's next message; Release hands its slot back.
  LaneSlot& Next(size_t k) {
    Lane& lane = lanes_[k];
    std::unique_lock<std::mutex> lock(mu_);
    delivered_cv_.wait(lock, [&] { return lane.filled > lane.released; });
    return lane.slots[lane.released % kSlotsPerLane];
  }
  void Release(size_t k) {
    Lane& lane = lanes_[k];
    {
      std::lock_guard<std::mutex> lock(mu_);
      lane.slots[lane.released % kSlotsPerLane].kind = LaneSlot::Kind::kEmpty;
      ++lane.released;
    }
    lane.cv.notify_all();
  }

  Result<TransferStats> Deliver(TransferStats& stats) {
    const size_t n = lanes_.size();
    size_t ended = 0;
    for (uint64_t i = 0;; ++i) {
      LaneSlot& slot = Next(i % n);
      if (slot.kind == LaneSlot::Kind::kError) return Broken(slot.error);
      if (slot.kind != LaneSlot::Kind::kRecord) {
        ended = i % n;
        break;
      }
      const std::span<const uint8_t> record = slot.message.bytes();
      ++stats.records;
      stats.frame_bytes += record.size();
      stats.wire_bytes += kMessageHeaderBytes + record.size();
      if (VerdictOk() && handler_.on_record) SetVerdict(handler_.on_record(record));
      Release(i % n);
    }
    // Every lane ends after the last record: each one's next message is its END.
    Status aborted;
    uint64_t sent_records = 0, sent_bytes = 0;
    for (size_t j = 0; j < n; ++j) {
      LaneSlot& slot = Next((ended + j) % n);
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
    if (VerdictOk() && (sent_records != stats.records || sent_bytes != stats.frame_bytes))
      SetVerdict(Status::Corruption("transfer " + std::to_string(stats.transfer_id) + ": sender sent " +
                                    std::to_string(sent_records) + " records, received " +
                                    std::to_string(stats.records)));
    Status verdict;
    {
      std::lock_guard<std::mutex> lock(verdict_mu_);
      verdict = verdict_;
    }
    std::vector<uint8_t> ack;
    EncodeStatus(verdict, &ack);
    KVSERVE_RETURN_IF_ERROR(connections_[0]->Send(kMsgFrameAck, 0, ack));
    if (!verdict.ok()) return verdict;
    return stats;
  }

  Status Broken(Status s) {
    broken_ = true;
    return s;
  }

  std::vector<Connection*> connections_;
  const FrameHandler& handler_;
  std::vector<Lane> lanes_;
  std::mutex mu_;
  std::condition_variable delivered_cv_;  // the delivering thread: a slot filled
  uint64_t next_place_ = 0;
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
