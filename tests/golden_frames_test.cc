// The committed golden frames (tests/fuzz/corpus/frame/<preset>.kvsf) are
// what today's encoder writes for the golden cache, and they decode. A
// change that alters frame bytes must be a deliberate format change:
// regenerate with `fuzz_make_corpus tests/fuzz/corpus` and bump the version
// in docs/format.md if old frames no longer decode.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "golden_cache.h"
#include "kvserve/codec.h"
#include "kvserve/profile.h"

namespace kvserve {
namespace {

std::vector<uint8_t> ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(GoldenFrames, EncoderReproducesEveryPresetsFrame) {
  const std::filesystem::path dir = std::filesystem::path(KVSERVE_SOURCE_DIR) / "tests/fuzz/corpus/frame";
  KvCache kv = testing::MakeGoldenCache();
  HeadScores scores = testing::GoldenHeadScores();
  int checked = 0;
  for (const Preset& preset : Presets()) {
    const auto path = dir / (std::string(preset.name) + ".kvsf");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto golden = ReadFile(path);
    auto profile = Profile::Parse(preset.spec);
    ASSERT_TRUE(profile.ok());
    EncodeOptions options;
    options.head_scores = &scores;
    auto enc = EncoderContext::Create(*profile, options);
    ASSERT_TRUE(enc.ok());
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    ASSERT_TRUE((*enc)->Encode(kv.view(), sink).ok());
    EXPECT_EQ(frame, golden) << preset.name << ": encoder output changed";
    KvCache out(kv.dtype(), kv.shape());
    auto dec = DecoderContext::Create();
    EXPECT_TRUE((*dec)->Decode(golden, out.mutable_view()).ok()) << preset.name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace kvserve
