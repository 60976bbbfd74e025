// Copyright kvserve authors. Test helpers for runtime tests: random-weight
// model directories (no Python needed) and temporary directories.
#ifndef KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
#define KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_

#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"

namespace kvserve::testing {

using TinyModelSpec = RandomModelSpec;

inline nlohmann::json TinyConfigJson(const TinyModelSpec& s) {
  return nlohmann::json::parse(RandomModelConfigJson(s));
}

inline bool WriteTinyModel(const std::string& dir, const TinyModelSpec& s) {
  return WriteRandomModel(dir, s).ok();
}

// A fresh directory under the system temp dir.
inline std::string TempDir(const std::string& tag) {
  static std::mt19937_64 rng(std::random_device{}());
  auto dir = std::filesystem::temp_directory_path() /
             ("kvserve_" + tag + "_" + std::to_string(rng() % 1000000000));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace kvserve::testing

#endif  // KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
