// Copyright kvserve authors. The byte-level BPE model of a Hugging Face
// tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges
// and the merge loop of the Rust `tokenizers` crate (lowest rank first, the
// leftmost pair among equal ranks; `ignore_merges` takes a whole piece that
// is itself a vocabulary entry). Tokens are kept as the raw bytes they stand
// for (the GPT-2 byte <-> character map undone), so encoding never builds
// the mapped string.
#ifndef KVSERVE_RUNTIME_BPE_MODEL_H_
#define KVSERVE_RUNTIME_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kvserve/status.h"

namespace kvserve::runtime {

// GPT-2's map from a byte to the printable character that stands for it in
// byte-level vocabularies ('!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map
// to themselves, the other 68 bytes to U+0100.. in order).
const std::array<char32_t, 256>& ByteToChar();
// The inverse: the byte a character stands for, or -1.
int CharToByte(char32_t c);

// `text`'s bytes when every character of `text` (valid UTF-8) is in the
// byte alphabet, as the ByteLevel decoder reads a token; else `text` itself
// (the decoder's fallback for such tokens).
std::string ByteLevelDecodeToken(std::string_view text);

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // From tokenizer.json's "model" object. Merges in either serialization
  // ("a b" strings or ["a", "b"] pairs). NotSupported for what this model
  // does not implement (dropout > 0, unk_token, byte_fallback, a
  // continuing_subword_prefix or end_of_word_suffix); Corruption for a
  // merge whose parts or result are not in the vocabulary, or a bad shape.
  static Result<BpeModel> FromJson(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized piece `bytes` (raw bytes; each
  // starts as its byte's token, as the crate does with the mapped
  // characters) to `out`. A byte without a token is skipped, as the crate
  // does when there is no unk_token.
  void Encode(std::string_view bytes, std::vector<int32_t>* out) const;

  // Largest id + 1 of the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }
  // The vocabulary string of `id` (as written in tokenizer.json: mapped
  // characters), empty if `id` has none.
  const std::string& token(int32_t id) const { return tokens_[id]; }
  bool has(int32_t id) const { return id >= 0 && id < id_limit() && present_[id]; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  static constexpr int kShortWord = 64;  // symbols merged without the heap
  void MergeWord(std::vector<int32_t>* symbols) const;
  void MergeShortWord(std::vector<int32_t>* symbols) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  TokenIndex by_bytes_;                 // raw bytes -> id
  std::array<int32_t, 256> byte_id_{};  // single byte -> id, -1 if none
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<std::string> tokens_;     // id -> vocabulary string
  std::vector<bool> present_;
  bool ignore_merges_ = false;
};

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_BPE_MODEL_H_
