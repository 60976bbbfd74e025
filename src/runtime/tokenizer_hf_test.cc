// Copyright kvserve authors. tokenizer.json components on small hand-made
// files: merge order, ignore_merges, the split regex, added tokens and their
// flags, normalization, the post-processor template, decoding, and the
// errors for what is not implemented or malformed. The real Llama-3 / Qwen3
// files are checked against the reference in reference/
// hf_tokenizer_reference_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"
#include "runtime/bpe_model.h"
#include "runtime/onig_regex.h"
#include "runtime/unicode_text.h"

namespace kvserve {
namespace {

using nlohmann::json;

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string Utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// A byte-level tokenizer.json: ids 0..255 are the bytes (as their mapped
// characters), then `extra` tokens from 256 on, with `merges`.
json MakeTokenizer(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Utf8(runtime::ByteToChar()[b])] = b;
  int id = 256;
  for (const auto& t : extra) vocab[t] = id++;
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", kLlama3Pattern}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false},
                {"dropout", nullptr}, {"unk_token", nullptr}, {"byte_fallback", false}};
  return j;
}

std::unique_ptr<Tokenizer> Make(const json& j) {
  auto t = Tokenizer::FromHfJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> Enc(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(HfTokenizerTest, MergesApplyLowestRankFirst) {
  // "abc": with a+b ranked first the result is ab|c; with b+c first, a|bc.
  auto ab_first = Make(MakeTokenizer({"ab", "bc"}, {"a b", "b c"}));
  auto bc_first = Make(MakeTokenizer({"ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(Enc(*ab_first, "abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(Enc(*bc_first, "abc"), (std::vector<int32_t>{'a', 257}));
  // Equal pairs: the leftmost merges first ("aaa" -> aa|a).
  auto aa = Make(MakeTokenizer({"aa"}, {"a a"}));
  EXPECT_EQ(Enc(*aa, "aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(Enc(*aa, "aaaa"), (std::vector<int32_t>{256, 256}));
  // A merge result feeds later merges; pair form [a, b] is read too.
  json j = MakeTokenizer({"ab", "abc", "abcd"}, {});
  j["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"ab", "c"}),
                                      json::array({"abc", "d"})});
  EXPECT_EQ(Enc(*Make(j), "abcd"), (std::vector<int32_t>{258}));
}

TEST(HfTokenizerTest, IgnoreMergesTakesWholeVocabularyPieces) {
  json j = MakeTokenizer({"abc"}, {});  // no merge forms "abc"
  EXPECT_EQ(Enc(*Make(j), "abc"), (std::vector<int32_t>{'a', 'b', 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Enc(*Make(j), "abc"), (std::vector<int32_t>{256}));
}

TEST(HfTokenizerTest, SplitRegexIsolatesPiecesAndBytesMapThroughTheAlphabet) {
  // " world" is one piece (space + letters); merges never cross pieces.
  auto t = Make(MakeTokenizer({"Ġw", "Ġwo", "12", "123"}, {"Ġ w", "Ġw o", "1 2", "12 3"}));
  EXPECT_EQ(Enc(*t, " wo"), (std::vector<int32_t>{257}));
  // \p{N}{1,3}: "1234" -> "123" | "4".
  EXPECT_EQ(Enc(*t, "1234"), (std::vector<int32_t>{259, '4'}));
  // Non-ASCII bytes go through their mapped characters: é = C3 A9.
  EXPECT_EQ(Enc(*t, "é"), (std::vector<int32_t>{0xC3, 0xA9}));
  // Contractions are case-insensitive and Unicode-folded as Oniguruma
  // folds: 'ſ (long s) is the contraction 's.
  auto c = Make(MakeTokenizer({"'s", "'S"}, {"' s", "' S"}));
  EXPECT_EQ(Enc(*c, "it's"), (std::vector<int32_t>{'i', 't', 256}));
  EXPECT_EQ(Enc(*c, "IT'S"), (std::vector<int32_t>{'I', 'T', 257}));
}

TEST(HfTokenizerTest, OnigFindAllSkipsEmptyMatchAfterAMatch) {
  auto re = runtime::OnigRegex::Compile("a*");
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  ASSERT_TRUE(re->FindAll("baaac", &m).ok());
  // As the Rust onig crate's find_iter: (0,0), (1,4), (5,5).
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 4}, {5, 5}}));
  EXPECT_FALSE(runtime::OnigRegex::Compile("(unclosed").ok());
}

TEST(HfTokenizerTest, AddedTokensSplitTheTextFirst) {
  json j = MakeTokenizer({"ab"}, {"a b"});
  j["added_tokens"] = json::array({
      {{"id", 300}, {"content", "<|eot|>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "<|eot|>x"}, {"special", true}, {"normalized", false}},
      {{"id", 302}, {"content", "[L]"}, {"special", true}, {"normalized", false}, {"lstrip", true}},
      {{"id", 303}, {"content", "[R]"}, {"special", true}, {"normalized", false}, {"rstrip", true}},
      {{"id", 304}, {"content", "word"}, {"special", false}, {"normalized", false},
       {"single_word", true}},
  });
  auto t = Make(j);
  EXPECT_EQ(Enc(*t, "ab<|eot|>ab"), (std::vector<int32_t>{256, 300, 256}));
  // Leftmost-longest: "<|eot|>x" wins over "<|eot|>".
  EXPECT_EQ(Enc(*t, "<|eot|>xab"), (std::vector<int32_t>{301, 256}));
  // A near miss is ordinary text.
  EXPECT_EQ(Enc(*t, "<|eot|").size(), 6u);
  // lstrip / rstrip swallow the whitespace on their side.
  EXPECT_EQ(Enc(*t, "ab  [L]ab"), (std::vector<int32_t>{256, 302, 256}));
  EXPECT_EQ(Enc(*t, "ab[R] \t ab"), (std::vector<int32_t>{256, 303, 256}));
  // single_word: not inside a word.
  EXPECT_EQ(Enc(*t, "a word b"), (std::vector<int32_t>{'a', ' ', 304, ' ', 'b'}));
  EXPECT_EQ(Enc(*t, "awordb").size(), 6u);
  EXPECT_EQ(t->vocab_size(), 305);
  auto text = t->Decode(std::vector<int32_t>{256, 300, ' ', 304});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "ab<|eot|> word");
}

TEST(HfTokenizerTest, NfcNormalizerComposesBeforeSplitting) {
  json j = MakeTokenizer({"Ã©"}, {"Ã ©"});
  j["normalizer"] = {{"type", "NFC"}};
  auto t = Make(j);
  // e + COMBINING ACUTE ACCENT is é (C3 A9) after NFC.
  EXPECT_EQ(Enc(*t, "e\xCC\x81"), (std::vector<int32_t>{256}));
  EXPECT_EQ(Enc(*t, "\xC3\xA9"), (std::vector<int32_t>{256}));
  j["normalizer"] = nullptr;
  EXPECT_EQ(Enc(*Make(j), "e\xCC\x81"), (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

TEST(HfTokenizerTest, TemplateProcessingWrapsPrompts) {
  json j = MakeTokenizer({"ab"}, {"a b"});
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 301}, {"content", "</s>"}, {"special", true}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {301}}, {"tokens", {"</s>"}}}}}}};
  auto t = Make(j);
  EXPECT_EQ(Enc(*t, "ab"), (std::vector<int32_t>{256}));
  auto prompt = t->EncodePrompt("ab", /*bos_token_id=*/7);  // the template, not the config's bos
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, (std::vector<int32_t>{300, 256, 301}));
}

TEST(HfTokenizerTest, DecodeRoundTripsAndReplacesBrokenUtf8) {
  auto t = Make(MakeTokenizer({"ab"}, {"a b"}));
  const std::string text = "naïve  東京\n\t😀 'll";
  auto ids = t->Encode(text);
  ASSERT_TRUE(ids.ok());
  auto back = t->Decode(*ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  // A lone lead byte and a truncated 3-byte sequence: one U+FFFD each.
  auto broken = t->Decode(std::vector<int32_t>{'a', 0xC3, 'b', 0xE6, 0x9D});
  ASSERT_TRUE(broken.ok());
  EXPECT_EQ(*broken, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{257}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Decode(std::vector<int32_t>{-1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Encode("bad \xC3").status().code(), StatusCode::kInvalidArgument);
  auto empty = t->Encode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(HfTokenizerTest, RefusesWhatIsNotImplemented) {
  auto code_of = [](const json& j) { return Tokenizer::FromHfJson(j.dump()).status().code(); };
  json j = MakeTokenizer({}, {});
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  j = MakeTokenizer({}, {});
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  j = MakeTokenizer({}, {});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  j = MakeTokenizer({}, {});
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  j = MakeTokenizer({}, {});
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  j = MakeTokenizer({}, {});
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(code_of(j), StatusCode::kNotSupported);
  // Malformed: a merge outside the vocabulary, a bad pattern, not JSON.
  EXPECT_EQ(code_of(MakeTokenizer({}, {"a zz"})), StatusCode::kCorruption);
  EXPECT_EQ(code_of(MakeTokenizer({}, {"a b c"})), StatusCode::kCorruption);
  j = MakeTokenizer({}, {});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(";
  EXPECT_EQ(code_of(j), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromHfJson("{not json").status().code(), StatusCode::kCorruption);
}

TEST(HfTokenizerTest, MalformedFieldsAreErrorsNotCrashes) {
  // Every field of a valid file replaced by values of each other type: the
  // load returns (ok or an error), it never throws or crashes.
  json base = MakeTokenizer({"ab"}, {"a b"});
  base["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  base["added_tokens"] = json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}}});
  base["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}}}}}};
  ASSERT_TRUE(Tokenizer::FromHfJson(base.dump()).ok());
  const std::vector<json> values = {nullptr, 7, -1, "x", json::array(), json::object(), true,
                                    json::array({1, "a"})};
  // Each leaf and each of its ancestors (the vocab's 256 entries: once, as a whole).
  std::set<std::string> pointers;
  const json flat = base.flatten();
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    std::string pointer = it.key();
    if (pointer.rfind("/model/vocab/", 0) == 0) pointer = "/model/vocab";
    for (size_t slash; !pointer.empty(); pointer.resize(slash)) {
      pointers.insert(pointer);
      slash = pointer.rfind('/');
    }
  }
  int loads = 0, errors = 0;
  for (const std::string& pointer : pointers) {
    for (const json& v : values) {
      json mutated = base;
      mutated[json::json_pointer(pointer)] = v;
      auto t = Tokenizer::FromHfJson(mutated.dump());
      ++loads;
      errors += !t.ok();
      if (t.ok()) {
        auto ids = (*t)->Encode("ab <s> c");
        if (ids.ok()) {
          EXPECT_TRUE((*t)->Decode(*ids).ok());
        }
      }
    }
  }
  EXPECT_GT(loads, 200);
  EXPECT_GT(errors, loads / 4);
}

class TokenizerLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(TokenizerLoadTest, PrefersTokenizerJsonAndFallsBackToSentencePiece) {
  EXPECT_EQ(Tokenizer::Load(dir_.string()).status().code(), StatusCode::kNotFound);
  Write("tokenizer.json", MakeTokenizer({"ab"}, {"a b"}).dump());
  auto hf = Tokenizer::Load(dir_.string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ((*hf)->vocab_size(), 257);
  // A SentencePiece-style tokenizer.json next to a tokenizer.model: the
  // .model is used (the shipped model's).
  const std::string sp = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-qwen2-9m/tokenizer.model";
  if (!std::filesystem::exists(sp)) GTEST_SKIP() << sp << " missing";
  json j = MakeTokenizer({}, {});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  Write("tokenizer.json", j.dump());
  EXPECT_EQ(Tokenizer::Load(dir_.string()).status().code(), StatusCode::kNotSupported);
  std::filesystem::copy_file(sp, dir_ / "tokenizer.model");
  auto fallback = Tokenizer::Load(dir_.string());
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  auto direct = Tokenizer::Load(sp);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ((*fallback)->vocab_size(), (*direct)->vocab_size());
  EXPECT_EQ(*(*fallback)->Encode("hello world"), *(*direct)->Encode("hello world"));
  // SentencePiece prompts start with the config's bos id.
  auto prompt = (*direct)->EncodePrompt("hello", 1);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->front(), 1);
}

TEST_F(TokenizerLoadTest, GenerationConfigSetsEosIds) {
  RandomModelSpec spec;
  ASSERT_TRUE(WriteRandomModel(dir_.string(), spec).ok());
  auto plain = Model::Load(dir_.string());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->config().eos_token_ids, std::vector<int>{spec.vocab - 1});
  Write("generation_config.json", R"({"bos_token_id": 3, "eos_token_id": [5, 9], "do_sample": true})");
  auto model = Model::Load(dir_.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->config().eos_token_ids, (std::vector<int>{5, 9}));
  EXPECT_EQ((*model)->config().bos_token_id, 3);
  Write("generation_config.json", R"({"eos_token_id": 100000})");
  EXPECT_EQ(Model::Load(dir_.string()).status().code(), StatusCode::kCorruption);
  Write("generation_config.json", R"({"eos_token_id": "x"})");
  EXPECT_EQ(Model::Load(dir_.string()).status().code(), StatusCode::kCorruption);
  Write("generation_config.json", "[");
  EXPECT_EQ(Model::Load(dir_.string()).status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kvserve
