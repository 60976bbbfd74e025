// Copyright kvserve authors. tokenizer.json's pre_tokenizer: the steps that
// cut normalized text into the pieces the BPE model encodes one by one.
// Implemented: Split (a regex or a literal; Isolated, Removed, Contiguous,
// MergedWithPrevious, MergedWithNext; invert) and ByteLevel
// (add_prefix_space, use_regex with GPT-2's pattern), alone or in a
// Sequence, each step exactly as the Rust `tokenizers` crate runs it.
#ifndef KVSERVE_RUNTIME_PRE_TOKENIZER_H_
#define KVSERVE_RUNTIME_PRE_TOKENIZER_H_

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kvserve/status.h"
#include "runtime/onig_regex.h"

namespace kvserve::runtime {

// The pieces of one text: views into the text or into `storage` (pieces
// that a step rewrote, e.g. with a prefix space).
struct Pieces {
  std::vector<std::string_view> views;
  std::deque<std::string> storage;
};

class PreTokenizer {
 public:
  // From tokenizer.json's "pre_tokenizer" value (null: the whole text is
  // one piece). NotSupported names a step type or option not implemented;
  // InvalidArgument for a regex that does not compile.
  static Result<PreTokenizer> FromJson(const nlohmann::json& config);

  // True when a ByteLevel step is present (byte-level BPE needs one).
  bool byte_level() const { return byte_level_; }

  // Cuts `text` (valid UTF-8, non-empty) into `out->views` (no empty
  // piece). Internal on a regex engine failure.
  Status Run(std::string_view text, Pieces* out) const;

 private:
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    bool byte_level = false;
    std::shared_ptr<const OnigRegex> regex;  // Split with a regex (ByteLevel: GPT-2's, if used)
    std::string literal;                     // Split with a String pattern
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  static Status AddStep(const nlohmann::json& config, PreTokenizer* out);
  Status SplitPiece(const Step& step, std::string_view piece, std::vector<std::string_view>* out) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_PRE_TOKENIZER_H_
