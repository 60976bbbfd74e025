// Copyright kvserve authors.
#include "cli_util.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <thread>

#include "kvserve/kv.h"

namespace kvserve::cli {

int ReportError(std::string_view command, const Status& status) {
  fmt::print(stderr, "kvserve {}: error: {}\n", command, status.ToString());
  return 1;
}

Result<std::vector<uint8_t>> ReadBinaryFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("no such file: " + path);
    return Status::IOError("cannot open " + path + ": " + std::strerror(err));
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Status::IOError("cannot read " + path);
  return bytes;
}

Status WriteBinaryFile(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

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
    return Status::InvalidArgument(fmt::format(
        "head scores {} are for {} layers x {} heads, the cache has {} x {}", path, scores.layers,
        scores.kv_heads, shape.layers, shape.kv_heads));
  }
  return std::make_unique<HeadScores>(std::move(scores));
}

std::string& DataDirFlag() {
  static std::string flag;
  return flag;
}

Result<std::string> DataDirectory() { return lab::FindDataDirectory(DataDirFlag()); }

Result<std::string> DefaultDataFile(const std::string& path, bool user_set) {
  if (user_set) return path;
  KVSERVE_ASSIGN_OR_RETURN(std::string dir, DataDirectory());
  return lab::DataPath(dir, path);
}

}  // namespace kvserve::cli
