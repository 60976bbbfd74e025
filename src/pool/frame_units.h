// Copyright kvserve authors. A stored frame cut into the units a transfer
// carries (docs/format.md): its header, then each chunk record. Internal
// to src/pool: what the pool server streams and KvPool::GetRecords
// delivers.
#ifndef KVSERVE_POOL_FRAME_UNITS_H_
#define KVSERVE_POOL_FRAME_UNITS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvserve/pool.h"
#include "kvserve/status.h"

namespace kvserve::pool {

// Views into one frame's bytes.
struct FrameUnits {
  std::span<const uint8_t> header;
  std::vector<std::span<const uint8_t>> records;
};

// Cuts `frame` at its header and record boundaries from their length
// fields alone (checksums are the receiver's to verify). Corruption when
// the bytes do not follow the layout (a bad header, a record running past
// the end) or a record exceeds `max_record_bytes`.
Result<FrameUnits> SplitFrame(std::span<const uint8_t> frame, uint64_t max_record_bytes);

// A GetRecordsInOrder reader that runs `read` at most once (InvalidArgument
// when run again) and sets *ran when it does.
PoolFrameReader ReadOnce(bool* ran, std::function<Status(const FrameHandler& handler)> read);

}  // namespace kvserve::pool

#endif  // KVSERVE_POOL_FRAME_UNITS_H_
