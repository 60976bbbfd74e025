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
};

int RunDecompress(const DecompressArgs& a) {
  auto frame = ReadBinaryFile(a.input);
  if (!frame.ok()) return ReportError("decompress", frame.status());
  DecodeOptions options;
  options.threads = a.threads;
  auto decoder = DecoderContext::Create(options);
  if (!decoder.ok()) return ReportError("decompress", decoder.status());
  // Parse the header first: it gives the shape and dtype to allocate.
  auto header = (*decoder)->Start(*frame);
  if (!header.ok()) return ReportError("decompress", header.status().WithContext(a.input));
  const FrameInfo info = (*decoder)->info();
  KvCache cache(info.dtype, info.shape);
  std::vector<uint8_t> keep_mask;
  Progress("decompress", "decoding {} {} ({})", DTypeName(info.dtype), ShapeString(info.shape),
           info.profile.ToString());
  const double start = NowSeconds();
  if (Status s = (*decoder)->Decode(*frame, cache.mutable_view(), &keep_mask); !s.ok())
    return ReportError("decompress", s.WithContext(a.input));
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
      "are verified; a malformed frame is an error, never a partial output. Tokens a pruning "
      "profile (duo) dropped are written as zeros and counted in the metadata.");
  sub.add_option("input", a->input, "frame file to read")->required();
  sub.add_option("-o,--output", a->output, "KV file to write")->required();
  sub.add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  return [a] { return RunDecompress(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(decompress, "Decode a frame file into a KV file", kvserve::cli::SetupDecompress);
