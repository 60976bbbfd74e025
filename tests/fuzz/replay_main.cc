// Standalone driver that replays corpus files through a libFuzzer target,
// so the corpus runs in every build (GCC, ASan, TSan) without libFuzzer:
//   fuzz_replay_<target> [--rss-limit-mb N] FILE_OR_DIR...
// Exits non-zero if a path cannot be read or the process's peak resident
// set exceeds N MiB (default 512, as the fuzzers' -rss_limit_mb) after an
// input, naming that input; a crash is the test failure.
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

long PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

long g_limit_mb = 512;

// 0 ok, 2 unreadable, 4 over the RSS limit.
int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 2;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  if (g_limit_mb > 0 && PeakRssMb() > g_limit_mb) {
    std::fprintf(stderr, "%s: peak RSS %ld MiB exceeds the limit of %ld MiB\n", path.c_str(),
                 PeakRssMb(), g_limit_mb);
    return 4;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  // Sanitizer builds raise the limit (their shadow memory is resident too).
  if (const char* env = std::getenv("KVSERVE_REPLAY_RSS_LIMIT_MB")) g_limit_mb = std::atol(env);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rss-limit-mb") == 0 && i + 1 < argc) {
      ++i;
      if (!std::getenv("KVSERVE_REPLAY_RSS_LIMIT_MB")) g_limit_mb = std::atol(argv[i]);
      continue;
    }
    std::filesystem::path p(argv[i]);
    std::vector<std::filesystem::path> inputs;
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.push_back(p);
    }
    for (const auto& input : inputs) {
      const int rc = RunFile(input);
      if (rc == 2) std::fprintf(stderr, "cannot read %s\n", input.c_str());
      if (rc != 0) return rc;
      ++files;
    }
  }
  std::printf("replayed %d inputs, peak RSS %ld MiB\n", files, PeakRssMb());
  return files > 0 ? 0 : 3;
}
