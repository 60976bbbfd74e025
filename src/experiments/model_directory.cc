// Copyright kvserve authors. Which model the serve commands load: the flag,
// the first shipped model under models/, or a random-weight fallback.
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
  if (!flag.empty()) {
    if (note) *note = "model " + flag + " (--model)";
    return flag;
  }
  const std::string shipped = DefaultModelDirectory(models_dir);
  if (!shipped.empty()) {
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
    *note = "model " + fallback_dir + " (no model under " + models_dir +
            "/: random-weight Qwen2 fallback, 8 layers, 16 KiB KV per token)";
  return fallback_dir;
}

}  // namespace kvserve::lab
