// Copyright kvserve authors. Split pre-tokenizer behaviors, on the cases of
// the Rust `tokenizers` crate's own tests (pre_tokenizers/split.rs).
#include "runtime/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve::runtime {
namespace {

std::vector<std::string> PreTokenize(const nlohmann::json& config, const std::string& text) {
  auto pre = PreTokenizer::FromJson(config);
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  Pieces pieces;
  EXPECT_TRUE(pre->Run(text, &pieces).ok());
  return {pieces.views.begin(), pieces.views.end()};
}

nlohmann::json Split(const std::string& behavior) {
  return {{"type", "Split"}, {"pattern", {{"Regex", R"(\w+|[^\w\s]+)"}}}, {"behavior", behavior},
          {"invert", true}};
}

TEST(PreTokenizerTest, SplitBehaviorsMatchTheCrate) {
  const std::string s = "How are you doing?";
  using V = std::vector<std::string>;
  EXPECT_EQ(PreTokenize(Split("Removed"), s), (V{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(PreTokenize(Split("Isolated"), s), (V{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(PreTokenize(Split("MergedWithPrevious"), s), (V{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(PreTokenize(Split("MergedWithNext"), s), (V{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(PreTokenize(Split("Contiguous"), s), (V{"How", " ", "are", " ", "you", " ", "doing?"}));
}

TEST(PreTokenizerTest, StringPatternEqualsTheRegex) {
  const nlohmann::json by_regex = {{"type", "Split"}, {"pattern", {{"Regex", R"(\s+)"}}},
                                   {"behavior", "Removed"}, {"invert", false}};
  const nlohmann::json by_string = {{"type", "Split"}, {"pattern", {{"String", " "}}},
                                    {"behavior", "Removed"}, {"invert", false}};
  EXPECT_EQ(PreTokenize(by_regex, "Hey, man!"), (std::vector<std::string>{"Hey,", "man!"}));
  EXPECT_EQ(PreTokenize(by_string, "Hey, man!"), PreTokenize(by_regex, "Hey, man!"));
}

TEST(PreTokenizerTest, ByteLevelAddsPrefixSpaceAndSplitsWithGpt2Pattern) {
  const nlohmann::json config = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(PreTokenize(config, "Hello world's  end"),
            (std::vector<std::string>{" Hello", " world", "'s", " ", " end"}));
  auto pre = PreTokenizer::FromJson(config);
  ASSERT_TRUE(pre.ok());
  EXPECT_TRUE(pre->byte_level());
  EXPECT_EQ(PreTokenizer::FromJson({{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Weird"}})
                .status()
                .code(),
            StatusCode::kNotSupported);
}

}  // namespace
}  // namespace kvserve::runtime
