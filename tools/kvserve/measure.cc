// Copyright kvserve authors.
#include "measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "cli_util.h"

namespace kvserve::cli {

Result<CodecRun> RunCodec(const KvView& kv, const Profile& profile, const MeasureOptions& options) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  const int repeat = std::max(1, options.repeat);
  auto report = [&](const std::string& phase) {
    if (options.progress) options.progress(phase);
  };
  CodecRun run;
  run.input_bytes = static_cast<uint64_t>(kv.LogicalBytes());

  EncodeOptions encode_options;
  encode_options.threads = options.threads;
  encode_options.head_scores = options.head_scores;
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<EncoderContext> encoder,
                           EncoderContext::Create(profile, encode_options));
  run.frame.reserve(run.input_bytes + (1 << 20));
  run.encode_seconds = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeat; ++r) {
    report(fmt::format("encode {}/{}", r + 1, repeat));
    run.frame.clear();
    VectorSink sink(&run.frame);
    const double start = NowSeconds();
    KVSERVE_RETURN_IF_ERROR(encoder->Encode(kv, sink));
    run.encode_seconds = std::min(run.encode_seconds, NowSeconds() - start);
  }
  run.stats = encoder->stats();

  DecodeOptions decode_options;
  decode_options.threads = options.threads;
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<DecoderContext> decoder,
                           DecoderContext::Create(decode_options));
  run.decoded = KvCache(kv.dtype, kv.shape);
  MutableKvView out = run.decoded.mutable_view();
  run.decode_seconds = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeat; ++r) {
    report(fmt::format("decode {}/{}", r + 1, repeat));
    const double start = NowSeconds();
    KVSERVE_RETURN_IF_ERROR(decoder->Decode(run.frame, out, &run.keep_mask));
    run.decode_seconds = std::min(run.decode_seconds, NowSeconds() - start);
  }
  return run;
}

double MeasureMemcpySeconds(const void* src, size_t bytes, int threads, int repeat) {
  threads = std::max(1, threads);
  std::vector<std::byte> dst(bytes);
  std::memset(dst.data(), 1, bytes);  // prefault
  const auto* from = static_cast<const std::byte*>(src);
  const size_t slice = (bytes + threads - 1) / threads;
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, repeat); ++r) {
    const double start = NowSeconds();
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      const size_t begin = std::min(bytes, slice * t);
      const size_t end = std::min(bytes, begin + slice);
      workers.emplace_back(
          [&, begin, end] { std::memcpy(dst.data() + begin, from + begin, end - begin); });
    }
    std::memcpy(dst.data(), from, std::min(bytes, slice));
    for (auto& w : workers) w.join();
    best = std::min(best, NowSeconds() - start);
  }
  return best;
}

}  // namespace kvserve::cli
