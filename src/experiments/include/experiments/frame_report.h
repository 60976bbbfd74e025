// Copyright kvserve authors. What `kvserve inspect` shows of a frame: its
// header, bytes per section and pipeline stage, per layer and K/V, and the
// chunk table. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_FRAME_REPORT_H_
#define KVSERVE_EXPERIMENTS_FRAME_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kvserve/codec.h"

namespace kvserve::lab {

// One section of a frame's bytes (FrameStats), in pipeline order.
struct FrameSection {
  const char* key;    // JSON key: "header", "record_headers", ...
  const char* label;  // for a table
  uint64_t bytes;
};

// A frame, inspected (InspectFrame: every checksum verified, nothing decoded).
struct FrameReport {
  FrameInfo info;
  uint64_t file_bytes = 0;
  uint64_t logical_bytes = 0;    // the uncompressed KV the frame holds
  double compression_ratio = 0;  // logical / file bytes (0 for no bytes)
  std::vector<FrameSection> sections;
  // Chunk bytes per (layer, K/V), at layer * 2 + kind; they add up to the
  // chunk records' sizes.
  std::vector<uint64_t> layer_bytes;
  // `kvserve inspect --json`: the fields above, every chunk included, with
  // `file` as the file's name.
  nlohmann::json Json(const std::string& file) const;
  // `kvserve inspect`'s tables: the header, bytes and share per section,
  // bytes and CR per layer and K/V, and the first `chunks` chunk records
  // (-1: all).
  std::string Text(const std::string& file, int chunks) const;
};

// Inspects `frame`; InspectFrame's errors (Corruption for damaged bytes).
Result<FrameReport> ReportFrame(std::span<const uint8_t> frame);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_FRAME_REPORT_H_
