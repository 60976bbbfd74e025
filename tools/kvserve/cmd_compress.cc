// Copyright kvserve authors. `kvserve compress`: KV file -> frame file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/frame_files.h"

namespace kvserve::cli {
namespace {

struct CompressArgs {
  std::string input;
  std::string output;
  std::string profile = "kivi-2";
  std::string head_scores;
  int threads = 0;
};

int RunCompress(const CompressArgs& a) {
  auto profile = ResolveProfile(a.profile);
  if (!profile.ok()) return ReportError("compress", profile.status());
  auto r = lab::CompressKvFile(a.input, a.output, *profile, a.head_scores, a.threads,
                               ProgressTo("compress"));
  if (!r.ok()) return ReportError("compress", r.status());
  fmt::print("{}", r->CompressText(a.input, a.output));
  return 0;
}

RunFn SetupCompress(CLI::App& sub) {
  auto a = std::make_shared<CompressArgs>();
  sub.description(
      "Compress a KV file (docs/kv-files.md) into a frame file (docs/format.md) with one "
      "profile. The frame holds everything needed to decode it, profile included.");
  sub.add_option("input", a->input, "KV file to read")->required();
  sub.add_option("-o,--output", a->output, "frame file to write")->required();
  sub.add_option("-p,--profile", a->profile,
                 "profile spec (e.g. 'hadamard+kivi(k=2,v=2)+rans') or preset name "
                 "(`kvserve presets`)")
      ->capture_default_str();
  sub.add_option("--head-scores", a->head_scores,
                 "per-head retrieval scores (JSON), required by mixhq and duo profiles");
  sub.add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub.footer("Example: kvserve compress kv.safetensors --profile kivi-2 -o kv.kvf");
  return [a] { return RunCompress(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(compress, "Compress a KV file into a frame file", kvserve::cli::SetupCompress);
