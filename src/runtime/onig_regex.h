// Copyright kvserve authors. A compiled Oniguruma regex (Debian libonig-dev):
// the engine and syntax Hugging Face tokenizers compiles tokenizer.json's
// Split patterns with (Rust crate `onig`, ONIG_SYNTAX_DEFAULT, UTF-8), so
// \p{L}, \s, (?i:...), look-ahead and quantifiers mean exactly what they mean
// there.
#ifndef KVSERVE_RUNTIME_ONIG_REGEX_H_
#define KVSERVE_RUNTIME_ONIG_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/status.h"

namespace kvserve::runtime {

class OnigRegex {
 public:
  // Compiles `pattern`. InvalidArgument (with Oniguruma's message) if it
  // does not compile.
  static Result<OnigRegex> Compile(std::string_view pattern);
  OnigRegex(OnigRegex&&) noexcept;
  OnigRegex& operator=(OnigRegex&&) noexcept;
  ~OnigRegex();

  // Appends the [begin, end) byte ranges of the successive non-overlapping
  // matches in valid UTF-8 `text`, searched as the Rust crate's find_iter
  // does (the whole text is the subject, so look-arounds see across match
  // boundaries; an empty match right after the previous one is skipped).
  // Thread-safe (the compiled regex is read-only during a search). Internal
  // if the engine fails (e.g. its backtracking limit).
  Status FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  struct Impl;
  explicit OnigRegex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_ONIG_REGEX_H_
