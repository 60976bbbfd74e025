// Writes the seed corpora of the fuzz targets and the golden frames:
//   fuzz_make_corpus OUT_DIR
// OUT_DIR/frame/<preset>.kvsf  one frame per preset of a small seeded
//                              synthetic cache (also the golden frames that
//                              tests/golden_frames_test.cc re-encodes);
// OUT_DIR/frame/hostile-*.kvsf   valid headers declaring huge caches with
//                              no or few records behind them (docs/format.md
//                              §7; tests/decoder_memory_cli_test.sh);
// OUT_DIR/roundtrip/, OUT_DIR/rans/  seeded random inputs.
// Deterministic: the same binary writes the same bytes.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "golden_cache.h"
#include "hostile_frame.h"

namespace {

bool WriteFile(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvserve;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  for (const char* d : {"frame", "roundtrip", "rans"}) std::filesystem::create_directories(root / d);

  KvCache kv = testing::MakeGoldenCache();
  HeadScores scores = testing::GoldenHeadScores();
  std::mt19937 rng(20261130);
  for (const Preset& preset : Presets()) {
    auto profile = Profile::Parse(preset.spec);
    if (!profile.ok()) return 1;
    EncodeOptions options;
    options.threads = 1;
    options.head_scores = &scores;
    auto enc = EncoderContext::Create(*profile, options);
    if (!enc.ok()) return 1;
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    if (!(*enc)->Encode(kv.view(), sink).ok()) return 1;
    if (!WriteFile(root / "frame" / (std::string(preset.name) + ".kvsf"), frame)) return 1;
  }
  {
    using testing::HostileHeader;
    const KvShape many{100, 1, 1 << 24, 1}, most{1024, 1, 1 << 24, 1}, wide{4, 4, 1 << 20, 16};
    if (!WriteFile(root / "frame" / "hostile-records.kvsf", HostileHeader(many))) return 1;
    if (!WriteFile(root / "frame" / "hostile-max.kvsf", HostileHeader(most))) return 1;
    std::vector<uint8_t> few = HostileHeader(wide);
    for (int t = 0; t < 48; t += 16) {
      auto r = testing::RawRecord(wide, DType::kF32, 0, 0, t, 16, 0x3c);
      few.insert(few.end(), r.begin(), r.end());
    }
    if (!WriteFile(root / "frame" / "hostile-few.kvsf", few)) return 1;
  }
  for (int i = 0; i < 24; ++i) {
    std::vector<uint8_t> bytes(6 + rng() % 3000);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (!WriteFile(root / "roundtrip" / ("seed" + std::to_string(i)), bytes)) return 1;
    std::vector<uint8_t> r(8 + rng() % 2000);
    for (size_t k = 0; k < r.size(); ++k) r[k] = static_cast<uint8_t>(k < 8 ? rng() : rng() % 5);
    if (!WriteFile(root / "rans" / ("seed" + std::to_string(i)), r)) return 1;
  }
  std::printf("wrote corpora under %s\n", root.c_str());
  return 0;
}
