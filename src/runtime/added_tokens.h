// Copyright kvserve authors. tokenizer.json's added tokens (special tokens
// such as <|eot_id|> and added words): found in the text before the model
// sees it, leftmost-longest as the Rust `tokenizers` crate's
// AddedVocabulary does, with its single_word / lstrip / rstrip rules.
#ifndef KVSERVE_RUNTIME_ADDED_TOKENS_H_
#define KVSERVE_RUNTIME_ADDED_TOKENS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvserve::runtime {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;  // only when not inside a word
  bool lstrip = false;       // swallows the whitespace on its left
  bool rstrip = false;       // swallows the whitespace on its right
  bool normalized = true;    // matched in the normalized text (else the raw text)
  bool special = false;
};

// One piece of a split text: [begin, end), and the added token it is, or -1
// for text in between.
struct TextSegment {
  size_t begin = 0, end = 0;
  int32_t token = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Matches the `patterns` (the strings to find, one per token; not
  // empty), with the flags of `tokens[i]`.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);

  bool empty() const { return nodes_.size() <= 1; }

  // Splits `text` (valid UTF-8) into segments covering it in order: each
  // leftmost-longest, non-overlapping match of a pattern is a token segment
  // (extended over adjacent whitespace for lstrip/rstrip; dropped when a
  // single_word token touches a word character), the rest text segments.
  // Empty text gives no segment.
  void Split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  struct Node {
    int token = -1;  // index into tokens_ of the pattern ending here
  };
  // The longest pattern starting at `pos`: its end and token index, or -1.
  int LongestAt(std::string_view text, size_t pos, size_t* end) const;

  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int> edges_;  // (node << 8 | byte) -> child
  std::vector<bool> first_byte_ = std::vector<bool>(256, false);
  std::vector<AddedToken> tokens_;
};

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_ADDED_TOKENS_H_
