// Copyright kvserve authors. experiments/frame_files.h.
#include "experiments/frame_files.h"

#include <fmt/format.h>

#include <algorithm>

#include "experiments/profile_inputs.h"
#include "kvserve/kv_file.h"

namespace kvserve::lab {

std::string FrameFileResult::CompressText(const std::string& input,
                                          const std::string& output) const {
  return fmt::format("{} -> {}: {} -> {} (CR {:.2f}x), {} chunks, encode {:.3f} s ({:.2f} GB/s)\n",
                     input, output, HumanBytes(kv_bytes), HumanBytes(frame_bytes),
                     frame_bytes == 0 ? 0.0 : static_cast<double>(kv_bytes) / frame_bytes, chunks,
                     seconds, GBPerSecond(kv_bytes, seconds));
}

std::string FrameFileResult::DecompressText(const std::string& input,
                                            const std::string& output) const {
  return fmt::format(
      "{} -> {}: {} -> {}, decode {:.3f} s ({:.2f} GB/s){}\n", input, output,
      HumanBytes(frame_bytes), HumanBytes(kv_bytes), seconds, GBPerSecond(kv_bytes, seconds),
      pruned_rows
          ? fmt::format(", {} pruned (layer, K/V, head, token) rows written as 0", pruned_rows)
          : std::string());
}

Result<FrameFileResult> CompressKvFile(const std::string& input, const std::string& output,
                                       const Profile& profile, const std::string& head_scores_path,
                                       int threads, const Progress& progress) {
  Note(progress, "reading {}", input);
  KVSERVE_ASSIGN_OR_RETURN(KvCache cache, LoadKvFile(input));
  KVSERVE_ASSIGN_OR_RETURN(auto scores,
                           LoadHeadScoresFor(profile, head_scores_path, cache.shape()));
  KVSERVE_ASSIGN_OR_RETURN(
      auto encoder,
      EncoderContext::Create(profile, {.threads = threads, .head_scores = scores.get()}));
  const KvView view = cache.view();
  Note(progress, "encoding {} {} with {}", DTypeName(view.dtype), ShapeString(view.shape),
       profile.ToString());
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  FrameFileResult r;
  const double start = NowSeconds();
  KVSERVE_RETURN_IF_ERROR(encoder->Encode(view, sink));
  r.seconds = NowSeconds() - start;
  KVSERVE_RETURN_IF_ERROR(WriteBinaryFile(output, frame));
  r.kv_bytes = static_cast<uint64_t>(view.LogicalBytes());
  r.frame_bytes = frame.size();
  r.chunks = encoder->stats().chunks;
  return r;
}

Result<FrameFileResult> DecompressFrameFile(const std::string& input, const std::string& output,
                                            uint64_t max_output_bytes, int threads,
                                            const Progress& progress) {
  KVSERVE_ASSIGN_OR_RETURN(auto frame, ReadBinaryFile(input));
  FrameInfo info;
  std::vector<uint8_t> keep_mask;
  FrameFileResult r;
  const double start = NowSeconds();
  auto decoded = DecodeFrame(frame, max_output_bytes, {.threads = threads}, &info, &keep_mask);
  if (!decoded.ok()) {
    Status s = decoded.status();
    if (s.code() == StatusCode::kResourceExhausted)
      s = s.WithContext("raise --max-output-mb to decode it");
    return s.WithContext(input);
  }
  Note(progress, "decoded {} {} ({})", DTypeName(info.dtype), ShapeString(info.shape),
       info.profile.ToString());
  r.seconds = NowSeconds() - start;
  r.pruned_rows = static_cast<uint64_t>(std::count(keep_mask.begin(), keep_mask.end(), 0));
  const KvFileMetadata meta{{"synthetic", "unknown"},
                            {"decoded_from", input},
                            {"profile", info.profile.ToString()},
                            {"lossless", info.profile.IsLossless() ? "true" : "false"},
                            {"pruned_token_rows", std::to_string(r.pruned_rows)}};
  KVSERVE_RETURN_IF_ERROR(SaveKvFile(output, decoded->view(), meta));
  r.kv_bytes = static_cast<uint64_t>(decoded->view().LogicalBytes());
  r.frame_bytes = frame.size();
  return r;
}

}  // namespace kvserve::lab
