#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "core/temp_dir.h"
#include "kvserve/codec.h"

namespace kvserve {
namespace {

std::string TempPath(const std::string& name) {
  static const std::string dir = kvserve::testing::TempDir("head_scores");
  return (std::filesystem::path(dir) / name).string();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

HeadScores RandomScores(std::mt19937_64& rng) {
  HeadScores hs;
  hs.layers = std::uniform_int_distribution<int>(1, 40)(rng);
  hs.kv_heads = std::uniform_int_distribution<int>(1, 16)(rng);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 127);
  for (int i = 0; i < hs.layers * hs.kv_heads; ++i) {
    // Scores across the whole float range, subnormals included.
    hs.scores.push_back(std::ldexp(unit(rng), exponent(rng)));
  }
  return hs;
}

// Save then Load reproduces every float bit-exactly.
TEST(HeadScores, SaveLoadRoundTripsRandomScores) {
  std::mt19937_64 rng(0x4ead);
  std::string path = TempPath("round_trip.json");
  for (int i = 0; i < 50; ++i) {
    HeadScores hs = RandomScores(rng);
    ASSERT_TRUE(hs.Save(path).ok());
    Result<HeadScores> back = HeadScores::Load(path);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->layers, hs.layers);
    EXPECT_EQ(back->kv_heads, hs.kv_heads);
    ASSERT_EQ(back->scores.size(), hs.scores.size());
    for (size_t j = 0; j < hs.scores.size(); ++j) {
      EXPECT_EQ(std::bit_cast<uint32_t>(back->scores[j]), std::bit_cast<uint32_t>(hs.scores[j]));
    }
    int l = std::uniform_int_distribution<int>(0, hs.layers - 1)(rng);
    int h = std::uniform_int_distribution<int>(0, hs.kv_heads - 1)(rng);
    EXPECT_EQ(back->at(l, h), hs.at(l, h));
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(HeadScores, MissingFileIsNotFoundWithPath) {
  std::string path = TempPath("does_not_exist.json");
  std::filesystem::remove(path);
  Result<HeadScores> r = HeadScores::Load(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos);
  Result<HeadScores> dir = HeadScores::Load(::testing::TempDir());
  EXPECT_EQ(dir.status().code(), StatusCode::kIOError);
}

TEST(HeadScores, MalformedFilesAreCorruptionWithPath) {
  std::string path = TempPath("malformed.json");
  const char* cases[] = {
      "",
      "{",
      "not json",
      "[]",
      R"({"kv_heads":2,"scores":[[1,2]]})",
      R"({"layers":1,"scores":[[1,2]]})",
      R"({"layers":1,"kv_heads":2})",
      R"({"layers":1,"kv_heads":2,"scores":{}})",
      R"({"layers":0,"kv_heads":2,"scores":[]})",
      R"({"layers":-1,"kv_heads":2,"scores":[]})",
      R"({"layers":1.5,"kv_heads":2,"scores":[[1,2]]})",
      R"({"layers":"1","kv_heads":2,"scores":[[1,2]]})",
      R"({"layers":100000,"kv_heads":2,"scores":[]})",
      R"({"layers":65536,"kv_heads":65536,"scores":[]})",
      R"({"layers":18446744073709551615,"kv_heads":2,"scores":[]})",
      R"({"layers":2,"kv_heads":2,"scores":[[1,2]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,2,3]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,"x"]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,null]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,1e39]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,-1e400]]})",
      R"({"layers":1,"kv_heads":2,"scores":[[1,NaN]]})",
      R"({"layers":1,"kv_heads":2,"scores":[1,2]})",
  };
  for (const char* text : cases) {
    WriteFile(path, text);
    Result<HeadScores> r = HeadScores::Load(path);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
}

// Every strict truncation and random byte flips of a valid file are
// rejected or load to a well-formed value; nothing crashes.
TEST(HeadScores, TruncationsAndMutationsNeverCrash) {
  std::mt19937_64 rng(0x7b);
  std::string path = TempPath("fuzz.json");
  HeadScores hs = RandomScores(rng);
  ASSERT_TRUE(hs.Save(path).ok());
  const std::string valid = ReadFile(path);
  ASSERT_FALSE(valid.empty());
  for (size_t n = 0; n + 1 < valid.size(); n += 1 + valid.size() / 200) {
    WriteFile(path, valid.substr(0, n));
    EXPECT_EQ(HeadScores::Load(path).status().code(), StatusCode::kCorruption) << n;
  }
  for (int i = 0; i < 300; ++i) {
    std::string s = valid;
    s[std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng)] =
        static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    WriteFile(path, s);
    Result<HeadScores> r = HeadScores::Load(path);
    if (r.ok()) {
      EXPECT_EQ(r->scores.size(), static_cast<size_t>(r->layers) * r->kv_heads);
      for (float f : r->scores) EXPECT_TRUE(std::isfinite(f));
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    }
  }
}

TEST(HeadScores, SaveRejectsInconsistentValues) {
  std::string path = TempPath("bad_save.json");
  HeadScores hs;
  hs.layers = 2;
  hs.kv_heads = 3;
  hs.scores.assign(5, 0.5f);
  EXPECT_EQ(hs.Save(path).code(), StatusCode::kInvalidArgument);
  hs.scores.assign(6, 0.5f);
  hs.scores[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(hs.Save(path).code(), StatusCode::kInvalidArgument);
  hs.scores[4] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(hs.Save(path).code(), StatusCode::kInvalidArgument);
  hs.scores[4] = 1.0f;
  hs.layers = 0;
  EXPECT_EQ(hs.Save(path).code(), StatusCode::kInvalidArgument);
  hs.layers = 2;
  EXPECT_TRUE(hs.Save(path).ok());
  EXPECT_EQ(hs.Save(TempPath("no_such_dir/x.json")).code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace kvserve
