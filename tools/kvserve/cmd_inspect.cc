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
  if (a.json) {
    std::cout << report->Json(a.input).dump(2) << "\n";
    return 0;
  }

  fmt::print("{}", report->Text(a.input, a.chunks));
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
