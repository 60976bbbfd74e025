// Copyright kvserve authors. experiments/frame_report.h.
#include "experiments/frame_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "experiments/lab.h"

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

std::string FrameReport::Text(const std::string& file, int chunks) const {
  std::string out;
  out +=
      fmt::format("frame      {} ({} bytes), format version {}\n", file, file_bytes, info.version);
  out += fmt::format("profile    {}\n", info.profile.ToString());
  out += fmt::format("cache      {} {} (layers x kv_heads x tokens x head_dim), {} uncompressed\n",
                     DTypeName(info.dtype), ShapeString(info.shape), HumanBytes(logical_bytes));
  out += fmt::format("CR         {:.3f}x (every frame byte counted)\n", compression_ratio);
  out += fmt::format("chunks     {}\n\n", info.chunk_count);

  out += fmt::format("{:<36} {:>14} {:>7}\n", "section (pipeline stage)", "bytes", "share");
  const double total = info.stats.total_bytes ? static_cast<double>(info.stats.total_bytes) : 1.0;
  for (const auto& s : sections)
    out += fmt::format("{:<36} {:>14} {:>6.2f}%\n", s.label, s.bytes, 100.0 * s.bytes / total);
  out += fmt::format("{:<36} {:>14} {:>6.2f}%\n\n", "total", info.stats.total_bytes, 100.0);

  out += fmt::format("{:>5} {:>14} {:>14} {:>9} {:>9}\n", "layer", "K bytes", "V bytes", "K CR",
                     "V CR");
  const uint64_t per_kind = logical_bytes / 2 / std::max(1, info.shape.layers);
  auto ratio = [&](uint64_t b) { return b ? static_cast<double>(per_kind) / b : 0.0; };
  for (int l = 0; l < info.shape.layers; ++l) {
    const uint64_t k = layer_bytes[static_cast<size_t>(l) * 2];
    const uint64_t v = layer_bytes[static_cast<size_t>(l) * 2 + 1];
    out += fmt::format("{:>5} {:>14} {:>14} {:>8.2f}x {:>8.2f}x\n", l, k, v, ratio(k), ratio(v));
  }

  const size_t shown =
      chunks < 0 ? info.chunks.size() : std::min(info.chunks.size(), static_cast<size_t>(chunks));
  out += fmt::format("\nchunk table ({} of {} records{})\n", shown, info.chunks.size(),
                     shown < info.chunks.size() ? "; --chunks -1 shows all" : "");
  out += fmt::format("{:>6} {:>12} {:>10} {:>5} {:>3} {:>11} {:>7} {:>5}\n", "#", "offset", "bytes",
                     "layer", "K/V", "token_begin", "tokens", "raw");
  for (size_t i = 0; i < shown; ++i) {
    const auto& c = info.chunks[i];
    out += fmt::format("{:>6} {:>12} {:>10} {:>5} {:>3} {:>11} {:>7} {:>5}\n", i, c.offset, c.size,
                       c.layer, c.kind == 0 ? "K" : "V", c.token_begin, c.tokens,
                       c.raw ? "yes" : "no");
  }
  return out;
}

}  // namespace kvserve::lab
