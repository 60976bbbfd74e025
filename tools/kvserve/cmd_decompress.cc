// Copyright kvserve authors. `kvserve decompress`: frame file -> KV file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/frame_files.h"

namespace kvserve::cli {
namespace {

struct DecompressArgs {
  std::string input;
  std::string output;
  int threads = 0;
  uint64_t max_output_mb = 4096;
};

int RunDecompress(const DecompressArgs& a) {
  auto r = lab::DecompressFrameFile(a.input, a.output, a.max_output_mb << 20, a.threads,
                                    ProgressTo("decompress"));
  if (!r.ok()) return ReportError("decompress", r.status());
  fmt::print("{}", r->DecompressText(a.input, a.output));
  return 0;
}

RunFn SetupDecompress(CLI::App& sub) {
  auto a = std::make_shared<DecompressArgs>();
  sub.description(
      "Decode a frame file back into a KV file. Checksums of the header and of every chunk "
      "are verified before the output is allocated; a malformed frame is an error, never a "
      "partial output. Tokens a pruning "
      "profile (duo) dropped are written as zeros and counted in the metadata.");
  sub.add_option("input", a->input, "frame file to read")->required();
  sub.add_option("-o,--output", a->output, "KV file to write")->required();
  sub.add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub.add_option("--max-output-mb", a->max_output_mb,
                 "refuse frames that decode to more than this many MiB (a small frame of "
                 "constant KV can legitimately decode to gigabytes)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  return [a] { return RunDecompress(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(decompress, "Decode a frame file into a KV file", kvserve::cli::SetupDecompress);
