// Copyright kvserve authors. Our tokenizer.json implementation against the
// reference (@huggingface/tokenizers, run by scripts/data/
// tokenizer_reference.mjs) on the real Llama-3 and Qwen3 tokenizer files:
// for every one of >= 10,000 seeded strings (prose, code, Unicode,
// whitespace runs, digits, special tokens, edge cases) our Encode ids,
// EncodePrompt ids and Decode text equal the reference's, and
// Decode(Encode(s)) == s (Qwen's NFC normalizer: == NFC(s)); random id
// sequences decode to the reference's text. ctest's fixture writes the
// reference files into $KVSERVE_TOKENIZER_REFERENCE_DIR.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"
#include "runtime/unicode_text.h"

namespace kvserve {
namespace {

std::string Escaped(const std::string& s) {
  std::string out = nlohmann::json(s).dump(-1, ' ', true);
  return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + (ids.size() > 40 ? ",..." : "");
}

class HfTokenizerReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerReference, EqualsReferenceOnEveryString) {
  const char* dir = std::getenv("KVSERVE_TOKENIZER_REFERENCE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "KVSERVE_TOKENIZER_REFERENCE_DIR not set (ctest sets it)";
  const std::string path = std::string(dir) + "/" + GetParam() + ".jsonl";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " missing (the fixture skipped: no npm tokenizer packages)";
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto meta = nlohmann::json::parse(line);
  ASSERT_EQ(meta.at("kind"), "meta");
  auto tokenizer = Tokenizer::Load(meta.at("tokenizer").get<std::string>());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();

  std::map<std::string, int> strings, equal;
  int cases = 0, ids_equal = 0, prompt_equal = 0, decode_equal = 0, roundtrip = 0;
  int not_nfc = 0, decodes = 0, decodes_equal = 0, failures = 0;
  auto report = [&](const std::string& what) {
    if (++failures <= 12) ADD_FAILURE() << GetParam() << ": " << what;
  };
  while (std::getline(in, line)) {
    const auto c = nlohmann::json::parse(line);
    const std::string kind = c.at("kind");
    if (kind == "decode") {
      ++decodes;
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      auto text = (*tokenizer)->Decode(ids);
      if (text.ok() && *text == c.at("decoded").get<std::string>()) {
        ++decodes_equal;
      } else {
        report("decode [" + Ids(ids) + "]: ours " + (text.ok() ? Escaped(*text) : text.status().ToString()) +
               ", reference " + Escaped(c.at("decoded")));
      }
      continue;
    }
    ++cases;
    ++strings[kind];
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    bool all = true;
    if (*ids == want) {
      ++ids_equal;
    } else {
      all = false;
      report(kind + " " + Escaped(text) + ": ours [" + Ids(*ids) + "], reference [" + Ids(want) + "]");
    }
    auto prompt = (*tokenizer)->EncodePrompt(text, /*bos_token_id=*/-1);
    ASSERT_TRUE(prompt.ok());
    if (*prompt == c.at("prompt_ids").get<std::vector<int32_t>>()) {
      ++prompt_equal;
    } else {
      all = false;
      report(kind + " " + Escaped(text) + ": prompt ids differ: ours [" + Ids(*prompt) + "]");
    }
    auto decoded = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    if (*decoded == c.at("decoded").get<std::string>()) {
      ++decode_equal;
    } else {
      all = false;
      report(kind + " " + Escaped(text) + ": decode ours " + Escaped(*decoded) + ", reference " +
             Escaped(c.at("decoded")));
    }
    // Round trip: the text itself, or its NFC form where the tokenizer
    // normalizes (Qwen) and the text is not NFC.
    std::string expect = text;
    if (GetParam() == "qwen3") {
      auto nfc = runtime::Normalize(text, runtime::NormalForm::kNfc);
      ASSERT_TRUE(nfc.ok());
      if (*nfc != text) ++not_nfc;
      expect = *nfc;
    }
    if (*decoded == expect) {
      ++roundtrip;
    } else {
      all = false;
      report(kind + " " + Escaped(text) + ": decode(encode(s)) = " + Escaped(*decoded));
    }
    equal[kind] += all;
  }
  std::string by_kind;
  for (const auto& [kind, n] : strings) {
    by_kind += " " + kind + " " + std::to_string(equal[kind]) + "/" + std::to_string(n);
  }
  std::printf(
      "[%s] %d strings: ids equal %d/%d, prompt ids equal %d/%d, decode equal %d/%d, "
      "decode(encode(s)) == s %d/%d (%d not NFC, compared with NFC(s)); random-id decodes equal "
      "%d/%d\n  by kind:%s\n",
      GetParam().c_str(), cases, ids_equal, cases, prompt_equal, cases, decode_equal, cases,
      roundtrip, cases, not_nfc, decodes_equal, decodes, by_kind.c_str());
  EXPECT_GE(cases, GetParam() == "llama3-bos" ? 1000 : 10000);
  EXPECT_EQ(ids_equal, cases);
  EXPECT_EQ(prompt_equal, cases);
  EXPECT_EQ(decode_equal, cases);
  EXPECT_EQ(roundtrip, cases);
  EXPECT_EQ(decodes_equal, decodes);
}

INSTANTIATE_TEST_SUITE_P(Files, HfTokenizerReference,
                         ::testing::Values("llama3", "qwen3", "llama3-bos"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kvserve
