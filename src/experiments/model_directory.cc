// Copyright kvserve authors. Which model the serve commands load (the flag,
// the first shipped model under models/, or the random-weight model when it
// is asked for by name) and which measured profile table goes with it.
#include "experiments/model_directory.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace kvserve::lab {

std::string DefaultModelDirectory(const std::string& models_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(models_dir, ec)) return "";
  std::vector<std::string> dirs;
  for (const auto& entry : fs::directory_iterator(models_dir, ec))
    if (entry.is_directory(ec) && fs::exists(entry.path() / "config.json", ec))
      dirs.push_back(entry.path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs.empty() ? "" : dirs.front();
}

RandomModelSpec FallbackModelSpec() {
  RandomModelSpec s;
  s.family = "qwen2";
  s.vocab = 1024;
  s.hidden = 256;
  s.intermediate = 512;
  s.layers = 8;
  s.heads = 4;
  s.kv_heads = 4;
  s.seed = 20261130;
  return s;
}

Result<std::string> ResolveModelDirectory(const std::string& flag, const std::string& models_dir,
                                          const std::string& fallback_dir, std::string* note) {
  namespace fs = std::filesystem;
  if (!flag.empty() && flag != "random") {
    if (note) *note = "model " + flag + " (--model)";
    return flag;
  }
  if (flag.empty()) {
    const std::string shipped = DefaultModelDirectory(models_dir);
    if (shipped.empty())
      return Status::NotFound("no model under " + models_dir +
                              "/ and no --model: pass --model DIR (a Hugging Face checkpoint "
                              "directory), or --model random for a random-weight Qwen2 model "
                              "(meaningless output; for plumbing tests)");
    if (note) *note = "model " + shipped + " (first under " + models_dir + "/)";
    return shipped;
  }
  std::error_code ec;
  if (!fs::exists(fs::path(fallback_dir) / "model.safetensors", ec)) {
    // Write to a sibling and rename, so concurrent callers never see half a model.
    const std::string tmp = fallback_dir + ".tmp" + std::to_string(::getpid());
    KVSERVE_RETURN_IF_ERROR(WriteRandomModel(tmp, FallbackModelSpec()));
    fs::rename(tmp, fallback_dir, ec);
    if (ec && !fs::exists(fs::path(fallback_dir) / "model.safetensors")) {
      return Status::IOError("cannot create the fallback model at " + fallback_dir + ": " + ec.message());
    }
    fs::remove_all(tmp, ec);
  }
  if (note)
    *note = "model " + fallback_dir +
            " (--model random: random-weight Qwen2, 8 layers, 16 KiB KV per token; meaningless output)";
  return fallback_dir;
}

std::string DefaultProfileTablePath(const std::string& model_dir, const std::string& profiles_dir) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "models/x/"
  const std::string name = dir.filename().string();
  if (name.empty()) return "";
  const fs::path table = fs::path(profiles_dir) / (name + "-unified.json");
  std::error_code ec;
  return fs::is_regular_file(table, ec) ? table.string() : "";
}

}  // namespace kvserve::lab
