// Copyright kvserve authors. SplitFrame and ReadOnce: see frame_units.h.
#include "pool/frame_units.h"

#include <string>
#include <utility>

#include "pipeline/frame_format.h"

namespace kvserve::pool {

Result<FrameUnits> SplitFrame(std::span<const uint8_t> frame, uint64_t max_record_bytes) {
  FrameUnits units;
  auto header = pipeline::FrameHeaderSize(frame);
  if (!header.ok()) return header.status().WithContext("stored frame");
  if (*header == 0 || *header > frame.size())
    return Status::Corruption("stored frame: truncated header (" + std::to_string(frame.size()) +
                              " bytes)");
  units.header = frame.first(*header);
  std::span<const uint8_t> rest = frame.subspan(*header);
  while (!rest.empty()) {
    const uint64_t size = pipeline::RecordSize(rest);
    if (size == 0 || size > rest.size())
      return Status::Corruption("stored frame: truncated record at byte " +
                                std::to_string(frame.size() - rest.size()));
    if (size > max_record_bytes)
      return Status::Corruption("stored frame: record of " + std::to_string(size) +
                                " bytes exceeds the message limit");
    units.records.push_back(rest.first(size));
    rest = rest.subspan(size);
  }
  return units;
}

PoolFrameReader ReadOnce(bool* ran, std::function<Status(const FrameHandler& handler)> read) {
  return [ran, read = std::move(read)](const FrameHandler& handler) {
    if (*ran) return Status::InvalidArgument("GetRecordsInOrder: a frame's reader ran twice");
    *ran = true;
    return read(handler);
  };
}

}  // namespace kvserve::pool
