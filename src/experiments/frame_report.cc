// Copyright kvserve authors. experiments/frame_report.h.
#include "experiments/frame_report.h"

namespace kvserve::lab {

Result<FrameReport> ReportFrame(std::span<const uint8_t> frame) {
  FrameReport r;
  KVSERVE_ASSIGN_OR_RETURN(r.info, InspectFrame(frame));
  const FrameInfo& info = r.info;
  const FrameStats& s = info.stats;
  r.file_bytes = frame.size();
  r.logical_bytes = static_cast<uint64_t>(info.shape.NumElements()) * DTypeSize(info.dtype);
  r.compression_ratio = frame.empty() ? 0.0 : static_cast<double>(r.logical_bytes) / frame.size();
  r.sections = {
      {"header", "frame header (incl. profile, state)", s.header_bytes},
      {"record_headers", "chunk record headers + checksums", s.record_header_bytes},
      {"transform", "transform side info", s.transform_bytes},
      {"params", "quantizer scales / zero points", s.param_bytes},
      {"codes", "codec payload: quantised codes", s.code_bytes},
      {"raw", "codec payload: raw tokens", s.raw_bytes},
  };
  r.layer_bytes.assign(static_cast<size_t>(info.shape.layers) * 2, 0);
  for (const auto& c : info.chunks) {
    if (c.layer >= 0 && c.layer < info.shape.layers && (c.kind == 0 || c.kind == 1))
      r.layer_bytes[static_cast<size_t>(c.layer) * 2 + c.kind] += c.size;
  }
  return r;
}

nlohmann::json FrameReport::Json(const std::string& file) const {
  nlohmann::json j;
  j["file"] = file;
  j["file_bytes"] = file_bytes;
  j["version"] = info.version;
  j["dtype"] = DTypeName(info.dtype);
  j["shape"] = {{"layers", info.shape.layers},
                {"kv_heads", info.shape.kv_heads},
                {"tokens", info.shape.tokens},
                {"head_dim", info.shape.head_dim}};
  j["profile"] = nlohmann::json::parse(info.profile.ToJson());
  j["logical_bytes"] = logical_bytes;
  j["compression_ratio"] = compression_ratio;
  j["chunk_count"] = info.chunk_count;
  for (const auto& s : sections) j["sections"][s.key] = s.bytes;
  j["sections"]["total"] = info.stats.total_bytes;
  for (int l = 0; l < info.shape.layers; ++l)
    j["layers"].push_back({{"layer", l},
                           {"key_bytes", layer_bytes[static_cast<size_t>(l) * 2]},
                           {"value_bytes", layer_bytes[static_cast<size_t>(l) * 2 + 1]}});
  for (const auto& c : info.chunks)
    j["chunks"].push_back({{"offset", c.offset},
                           {"size", c.size},
                           {"layer", c.layer},
                           {"kind", c.kind == 0 ? "K" : "V"},
                           {"token_begin", c.token_begin},
                           {"tokens", c.tokens},
                           {"raw", c.raw}});
  return j;
}

}  // namespace kvserve::lab
