// Standalone driver that replays corpus files through a libFuzzer target,
// so the corpus runs in every build (GCC, ASan) without libFuzzer:
//   fuzz_replay_<target> FILE_OR_DIR...
// Exits non-zero if a path cannot be read; a crash is the test failure.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (!e.is_regular_file()) continue;
        if (!RunFile(e.path())) { std::fprintf(stderr, "cannot read %s\n", e.path().c_str()); return 2; }
        ++files;
      }
    } else {
      if (!RunFile(p)) { std::fprintf(stderr, "cannot read %s\n", argv[i]); return 2; }
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return files > 0 ? 0 : 3;
}
