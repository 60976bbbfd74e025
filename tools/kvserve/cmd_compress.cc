// Copyright kvserve authors. `kvserve compress`: KV file -> frame file.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"

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
  Progress("compress", "reading {}", a.input);
  auto cache = LoadKvFile(a.input);
  if (!cache.ok()) return ReportError("compress", cache.status());
  auto scores = LoadHeadScoresFor(*profile, a.head_scores, cache->shape());
  if (!scores.ok()) return ReportError("compress", scores.status());

  EncodeOptions options;
  options.threads = a.threads;
  options.head_scores = scores->get();
  auto encoder = EncoderContext::Create(*profile, options);
  if (!encoder.ok()) return ReportError("compress", encoder.status());
  const KvView view = cache->view();
  Progress("compress", "encoding {} {} with {}", DTypeName(view.dtype), ShapeString(view.shape),
           profile->ToString());
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  const double start = NowSeconds();
  if (Status s = (*encoder)->Encode(view, sink); !s.ok()) return ReportError("compress", s);
  const double seconds = NowSeconds() - start;
  if (Status s = WriteBinaryFile(a.output, frame); !s.ok()) return ReportError("compress", s);
  const uint64_t in = static_cast<uint64_t>(view.LogicalBytes());
  fmt::print("{} -> {}: {} -> {} (CR {:.2f}x), {} chunks, encode {:.3f} s ({:.2f} GB/s)\n",
             a.input, a.output, HumanBytes(in), HumanBytes(frame.size()),
             frame.empty() ? 0.0 : static_cast<double>(in) / frame.size(),
             (*encoder)->stats().chunks, seconds, GBPerSecond(in, seconds));
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
