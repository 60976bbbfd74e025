// Copyright kvserve authors. Test helper: temporary directories that are
// removed when the test process exits. Header-only, the standard library
// only, so any test binary can use it.
#ifndef KVSERVE_CORE_TEMP_DIR_H_
#define KVSERVE_CORE_TEMP_DIR_H_

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kvserve::testing {

// A fresh directory "kvserve_<tag>_<random>" under the system temp dir
// ($TMPDIR), removed with everything in it when the process exits, only by
// the process that created it (a forked child that exits leaves its
// parent's directories alone).
inline std::string TempDir(const std::string& tag) {
  struct Registry {
    std::mutex mu;
    std::vector<std::pair<pid_t, std::filesystem::path>> dirs;
    ~Registry() {
      const pid_t self = ::getpid();
      for (const auto& [pid, dir] : dirs) {
        std::error_code ec;
        if (pid == self) std::filesystem::remove_all(dir, ec);
      }
    }
  };
  static Registry registry;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(registry.mu);
  auto dir = std::filesystem::temp_directory_path() /
             ("kvserve_" + tag + "_" + std::to_string(rng() % 1000000000));
  std::filesystem::create_directories(dir);
  registry.dirs.emplace_back(::getpid(), dir);
  return dir.string();
}

}  // namespace kvserve::testing

#endif  // KVSERVE_CORE_TEMP_DIR_H_
