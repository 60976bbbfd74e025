// Copyright kvserve authors. KvPool's default implementations: GetMany,
// GetShared, GetRecords and GetRecordsInOrder in terms of Get.
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvserve/pool.h"
#include "pool/frame_units.h"

namespace kvserve {

std::vector<Status> KvPool::GetMany(std::span<const PoolKey> keys,
                                    std::vector<std::vector<uint8_t>>* frames) {
  frames->assign(keys.size(), {});
  std::vector<Status> statuses;
  statuses.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) statuses.push_back(Get(keys[i], &(*frames)[i]));
  return statuses;
}

Result<std::shared_ptr<const std::vector<uint8_t>>> KvPool::GetShared(const PoolKey& key) {
  auto value = std::make_shared<std::vector<uint8_t>>();
  KVSERVE_RETURN_IF_ERROR(Get(key, value.get()));
  return std::shared_ptr<const std::vector<uint8_t>>(std::move(value));
}

Status KvPool::GetRecords(const PoolKey& key, const FrameHandler& handler) {
  KVSERVE_ASSIGN_OR_RETURN(auto value, GetShared(key));
  KVSERVE_ASSIGN_OR_RETURN(pool::FrameUnits units,
                           pool::SplitFrame(*value, std::numeric_limits<uint64_t>::max()));
  KVSERVE_RETURN_IF_ERROR(handler.on_header(0, units.header));
  for (std::span<const uint8_t> record : units.records) {
    std::span<uint8_t> placed = handler.place_record ? handler.place_record(record.size())
                                                     : std::span<uint8_t>();
    if (!placed.empty()) {
      if (placed.size() != record.size())
        return Status::InvalidArgument("GetRecords: place_record gave " +
                                       std::to_string(placed.size()) + " bytes for a " +
                                       std::to_string(record.size()) + "-byte record");
      std::memcpy(placed.data(), record.data(), record.size());
      record = placed;
    }
    KVSERVE_RETURN_IF_ERROR(handler.on_record(record));
  }
  return Status::Ok();
}

void KvPool::GetRecordsInOrder(std::span<const PoolKey> keys,
                               const std::function<bool(size_t, const PoolFrameReader&)>& each) {
  for (size_t i = 0; i < keys.size(); ++i) {
    bool ran = false;
    Status status;
    const PoolFrameReader read = pool::ReadOnce(&ran, [&](const FrameHandler& handler) {
      status = GetRecords(keys[i], handler);
      return status;
    });
    if (!each(i, read) || !ran || !status.ok()) return;
  }
}

FrameSource PoolFrameSource(KvPool& pool, PoolKey key, uint64_t transfer_id) {
  return PoolFrameSource(
      [&pool, key = std::move(key)](const FrameHandler& handler) { return pool.GetRecords(key, handler); },
      transfer_id);
}

FrameSource PoolFrameSource(const PoolFrameReader& read, uint64_t transfer_id) {
  return [read, transfer_id](const FrameHandler& handler) -> Result<TransferStats> {
    TransferStats stats;
    stats.transfer_id = transfer_id;
    FrameHandler counted;
    counted.on_header = [&](uint64_t, std::span<const uint8_t> header) {
      stats.frame_bytes += header.size();
      return handler.on_header(transfer_id, header);
    };
    counted.on_record = [&](std::span<const uint8_t> record) {
      stats.frame_bytes += record.size();
      ++stats.records;
      return handler.on_record(record);
    };
    counted.place_record = handler.place_record;
    const double start = MonotonicSeconds();
    KVSERVE_RETURN_IF_ERROR(read(counted));
    stats.wire_bytes = stats.frame_bytes;
    stats.elapsed_seconds = MonotonicSeconds() - start;
    return stats;
  };
}

}  // namespace kvserve
