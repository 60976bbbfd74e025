// Copyright kvserve authors. Frames striped over several connections
// ("lanes") between the same two peers (docs/transport.md §4, "Lanes"):
// each record of a transfer travels on the lane that has carried the fewest
// record bytes of that transfer so far (the lowest-numbered one on a tie) --
// a rule both ends apply to the records in order, so the receiver knows
// where the next record is once it knows the sizes before it. Lane 0 is the
// connection that carries FRAME_BEGIN and the ACK; every lane ends the
// transfer with its own FRAME_END (or FRAME_ABORT). Each lane is written
// and read by its own thread, so the kernel's copies for n sockets run on n
// cores (one TCP stream is bound to about one core's copy rate).
#ifndef KVSERVE_TRANSPORT_FRAME_LANES_H_
#define KVSERVE_TRANSPORT_FRAME_LANES_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kvserve/transport.h"

namespace kvserve::transport {

// The lane of a transfer's next record: the one with the fewest bytes in
// `lane_bytes` (record bytes so far per lane), the lowest index on a tie.
size_t NextLane(std::span<const uint64_t> lane_bytes);

// Checks the counts a sender put in FRAME_END (`sent_records`,
// `sent_bytes`) against `stats` (a mismatch becomes the verdict:
// Corruption), acknowledges on `connection` with the verdict, and returns
// `stats` or the verdict.
[[nodiscard]] Result<TransferStats> AcknowledgeTransfer(Connection& connection, Status verdict,
                                                        const TransferStats& stats,
                                                        uint64_t sent_records, uint64_t sent_bytes);

// Sends batches of records over lanes: lane 0 on the calling thread, lanes
// 1..n-1 on a thread each (started with the object, joined by its
// destructor; one lane starts none). Not thread-safe: one batch at a time.
class LaneSenders {
 public:
  // `lanes`: lane 0 first; all outlive this object.
  explicit LaneSenders(std::vector<Connection*> lanes);
  ~LaneSenders();
  LaneSenders(const LaneSenders&) = delete;
  LaneSenders& operator=(const LaneSenders&) = delete;

  // Sends `records` as FRAME_RECORD messages, each on NextLane of the
  // transfer's bytes so far (`first_index`: the transfer's index of
  // records[0]; 0 starts a transfer), in order within each lane, and
  // returns once all of them were written (the spans need to live only
  // until then). The first error of any lane.
  [[nodiscard]] Status SendRecords(std::span<const std::span<const uint8_t>> records,
                                   uint64_t first_index);
  // Sends one message of `type` with `payload` on every lane (END, ABORT).
  [[nodiscard]] Status SendOnEveryLane(uint8_t type, std::span<const uint8_t> payload);

  size_t size() const { return lanes_.size(); }

 private:
  struct Job {
    std::vector<std::span<const uint8_t>> records;
    uint8_t type = 0;
    bool pending = false;
    Status status;
  };
  void Run(size_t lane);
  Status SendAll(size_t lane, const Job& job);

  std::vector<Connection*> lanes_;
  std::vector<uint64_t> lane_bytes_;  // this transfer's record bytes per lane
  std::vector<Job> jobs_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// ReceiveFrameFrom over lanes (lane 0 = `main`, which delivered `begin`):
// one reader thread per lane; records are placed (handler.place_record) and
// handed to handler.on_record in transfer order; ends once every lane sent
// its FRAME_END (counts checked against lane 0's) and acknowledges on
// `main`. A lane that fails breaks the transfer: every lane is closed so no
// reader stays blocked, and the error is returned.
[[nodiscard]] Result<TransferStats> ReceiveStriped(Connection& main,
                                                   std::span<Connection* const> lanes,
                                                   const Message& begin,
                                                   const FrameHandler& handler);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_FRAME_LANES_H_
