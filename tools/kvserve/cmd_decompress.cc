// Copyright kvserve authors. `kvserve decompress`: frame file -> KV file.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"

namespace kvserve::cli {
namespace {

struct DecompressArgs {
  std::string input;
  std::string output;
  int threads = 0;
  uint64_t max_output_mb = 4096;
};

int RunDecompress(const DecompressArgs& a) {
  auto frame = ReadBinaryFile(a.input);
  if (!frame.ok()) return ReportError("decompress", frame.status());
  DecodeOptions options;
  options.threads = a.threads;
  // DecodeFrame checks every record is there (and its checksum) before it
  // allocates the output, and the output against --max-output-mb.
  FrameInfo info;
  std::vector<uint8_t> keep_mask;
  const double start = NowSeconds();
  auto decoded = DecodeFrame(*frame, a.max_output_mb << 20, options, &info, &keep_mask);
  if (!decoded.ok()) {
    Status s = decoded.status();
    if (s.code() == StatusCode::kResourceExhausted)
      s = s.WithContext("raise --max-output-mb to decode it");
    return ReportError("decompress", s.WithContext(a.input));
  }
  KvCache& cache = *decoded;
  Progress("decompress", "decoded {} {} ({})", DTypeName(info.dtype), ShapeString(info.shape),
           info.profile.ToString());
  const double seconds = NowSeconds() - start;
  const size_t pruned = static_cast<size_t>(std::count(keep_mask.begin(), keep_mask.end(), 0));
  KvFileMetadata meta{{"synthetic", "unknown"},
                      {"decoded_from", a.input},
                      {"profile", info.profile.ToString()},
                      {"lossless", info.profile.IsLossless() ? "true" : "false"},
                      {"pruned_token_rows", std::to_string(pruned)}};
  if (Status s = SaveKvFile(a.output, cache.view(), meta); !s.ok())
    return ReportError("decompress", s);
  const uint64_t out = static_cast<uint64_t>(cache.view().LogicalBytes());
  fmt::print("{} -> {}: {} -> {}, decode {:.3f} s ({:.2f} GB/s){}\n", a.input, a.output,
             HumanBytes(frame->size()), HumanBytes(out), seconds, GBPerSecond(out, seconds),
             pruned ? fmt::format(", {} pruned (layer, K/V, head, token) rows written as 0", pruned)
                    : std::string());
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
