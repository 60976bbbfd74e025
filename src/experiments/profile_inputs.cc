// Copyright kvserve authors. experiments/profile_inputs.h.
#include "experiments/profile_inputs.h"

#include <fmt/format.h>

#include <algorithm>

#include "experiments/lab.h"

namespace kvserve::lab {

Result<Profile> ResolveProfile(std::string_view spec) {
  auto profile = Profile::Parse(spec);
  if (!profile.ok()) {
    return profile.status().WithContext("profile '" + std::string(spec) +
                                        "' (a spec or a preset; see `kvserve presets`)");
  }
  return profile;
}

std::vector<std::string> SplitProfileList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  auto flush = [&](std::string piece) {
    const size_t b = piece.find_first_not_of(" \t");
    if (b == std::string::npos) return;
    const size_t e = piece.find_last_not_of(" \t");
    out.push_back(piece.substr(b, e - b + 1));
  };
  for (const std::string& item : items) {
    int depth = 0;
    std::string piece;
    for (char c : item) {
      if (c == '(') ++depth;
      if (c == ')') depth = std::max(0, depth - 1);
      if (c == ',' && depth == 0) {
        flush(piece);
        piece.clear();
      } else {
        piece += c;
      }
    }
    flush(piece);
  }
  return out;
}

Result<std::unique_ptr<HeadScores>> LoadHeadScoresFor(const Profile& profile,
                                                      const std::string& path,
                                                      const KvShape& shape) {
  if (path.empty()) {
    if (!NeedsHeadScores(profile)) return std::unique_ptr<HeadScores>();
    return Status::InvalidArgument(
        "profile '" + profile.ToString() +
        "' needs per-head retrieval scores: pass --head-scores FILE (for a synthetic cache, "
        "`kvserve synth --head-scores FILE` writes matching synthetic scores)");
  }
  KVSERVE_ASSIGN_OR_RETURN(HeadScores scores, HeadScores::Load(path));
  if (scores.layers != shape.layers || scores.kv_heads != shape.kv_heads) {
    return Status::InvalidArgument(
        fmt::format("head scores {} are for {} layers x {} heads, the cache has {} x {}", path,
                    scores.layers, scores.kv_heads, shape.layers, shape.kv_heads));
  }
  return std::make_unique<HeadScores>(std::move(scores));
}

}  // namespace kvserve::lab
