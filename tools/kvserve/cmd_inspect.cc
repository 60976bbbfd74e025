// Copyright kvserve authors. `kvserve inspect`: what a frame holds.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "experiments/frame_report.h"
#include "kvserve/codec.h"

namespace kvserve::cli {
namespace {

struct InspectArgs {
  std::string input;
  int chunks = 16;
  bool json = false;
};

int RunInspect(const InspectArgs& a) {
  auto frame = ReadBinaryFile(a.input);
  if (!frame.ok()) return ReportError("inspect", frame.status());
  auto report = lab::ReportFrame(*frame);
  if (!report.ok()) return ReportError("inspect", report.status().WithContext(a.input));
  const FrameInfo& info = report->info;
  const uint64_t logical = report->logical_bytes;
  const double cr = report->compression_ratio;
  const std::vector<uint64_t>& layer_bytes = report->layer_bytes;
  if (a.json) {
    std::cout << report->Json(a.input).dump(2) << "\n";
    return 0;
  }

  fmt::print("frame      {} ({} bytes), format version {}\n", a.input, frame->size(), info.version);
  fmt::print("profile    {}\n", info.profile.ToString());
  fmt::print("cache      {} {} (layers x kv_heads x tokens x head_dim), {} uncompressed\n",
             DTypeName(info.dtype), ShapeString(info.shape), HumanBytes(logical));
  fmt::print("CR         {:.3f}x (every frame byte counted)\n", cr);
  fmt::print("chunks     {}\n\n", info.chunk_count);

  fmt::print("{:<36} {:>14} {:>7}\n", "section (pipeline stage)", "bytes", "share");
  const double total = info.stats.total_bytes ? static_cast<double>(info.stats.total_bytes) : 1.0;
  for (const auto& s : report->sections)
    fmt::print("{:<36} {:>14} {:>6.2f}%\n", s.label, s.bytes, 100.0 * s.bytes / total);
  fmt::print("{:<36} {:>14} {:>6.2f}%\n\n", "total", info.stats.total_bytes, 100.0);

  fmt::print("{:>5} {:>14} {:>14} {:>9} {:>9}\n", "layer", "K bytes", "V bytes", "K CR", "V CR");
  const uint64_t per_kind = logical / 2 / std::max(1, info.shape.layers);
  auto ratio = [&](uint64_t b) { return b ? static_cast<double>(per_kind) / b : 0.0; };
  for (int l = 0; l < info.shape.layers; ++l) {
    const uint64_t k = layer_bytes[static_cast<size_t>(l) * 2];
    const uint64_t v = layer_bytes[static_cast<size_t>(l) * 2 + 1];
    fmt::print("{:>5} {:>14} {:>14} {:>8.2f}x {:>8.2f}x\n", l, k, v, ratio(k), ratio(v));
  }

  const size_t shown =
      a.chunks < 0 ? info.chunks.size() : std::min(info.chunks.size(), static_cast<size_t>(a.chunks));
  fmt::print("\nchunk table ({} of {} records{})\n", shown, info.chunks.size(),
             shown < info.chunks.size() ? "; --chunks -1 shows all" : "");
  fmt::print("{:>6} {:>12} {:>10} {:>5} {:>3} {:>11} {:>7} {:>5}\n", "#", "offset", "bytes",
             "layer", "K/V", "token_begin", "tokens", "raw");
  for (size_t i = 0; i < shown; ++i) {
    const auto& c = info.chunks[i];
    fmt::print("{:>6} {:>12} {:>10} {:>5} {:>3} {:>11} {:>7} {:>5}\n", i, c.offset, c.size,
               c.layer, c.kind == 0 ? "K" : "V", c.token_begin, c.tokens, c.raw ? "yes" : "no");
  }
  return 0;
}

RunFn SetupInspect(CLI::App& sub) {
  auto a = std::make_shared<InspectArgs>();
  sub.description(
      "Show a frame's header (format version, dtype, shape, profile), its bytes per section "
      "and pipeline stage (header, record headers, transform side info, scales/zero points, "
      "coded values, raw tokens), bytes per layer and K/V, and the chunk table. Every "
      "checksum is verified; values are not decoded.");
  sub.add_option("input", a->input, "frame file to read")->required();
  sub.add_option("--chunks", a->chunks, "chunk records to list (-1 = all)")->capture_default_str();
  sub.add_flag("--json", a->json, "print JSON (all chunks) instead of tables");
  return [a] { return RunInspect(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(inspect, "Show a frame's header, sections and chunk table", kvserve::cli::SetupInspect);
