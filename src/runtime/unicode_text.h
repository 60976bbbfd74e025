// Copyright kvserve authors. The Unicode services the HF tokenizer needs,
// through ICU (Debian libicu-dev): UTF-8 validation and decoding, the
// normalization forms, and the White_Space / word-character properties that
// Rust's regex crate uses for added-token lstrip/rstrip/single_word.
#ifndef KVSERVE_RUNTIME_UNICODE_TEXT_H_
#define KVSERVE_RUNTIME_UNICODE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve::runtime {

// True when `text` is well-formed UTF-8 (no surrogates, no overlong forms,
// nothing above U+10FFFF). The tokenizer refuses anything else.
bool IsValidUtf8(std::string_view text);

// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD, as
// Rust's String::from_utf8_lossy (and the WHATWG decoder) do.
std::string ToValidUtf8(std::string_view bytes);

// The code point starting at byte `i` of valid UTF-8 `text`; advances `i`
// past it.
char32_t NextCodePoint(std::string_view text, size_t* i);
// The code point ending at byte `end` (> 0) of valid UTF-8 `text`; sets
// `*start` to its first byte.
char32_t PreviousCodePoint(std::string_view text, size_t end, size_t* start);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` (valid UTF-8) in normal form `form` (ICU's Unicode data).
// Internal on an ICU failure.
Result<std::string> Normalize(std::string_view text, NormalForm form);

// Unicode White_Space (Rust's \s and char::is_whitespace).
bool IsWhiteSpace(char32_t c);
// Rust regex's \w: Alphabetic, M, Nd, Pc or Join_Control.
bool IsWordChar(char32_t c);

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_UNICODE_TEXT_H_
