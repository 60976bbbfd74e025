// Copyright kvserve authors. Unicode helpers through ICU.
#include "runtime/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

namespace kvserve::runtime {

bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = static_cast<int32_t>(text.size());
  if (text.size() > static_cast<size_t>(INT32_MAX)) return false;
  for (int32_t i = 0; i < n;) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (c < 0) return false;
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto n = static_cast<int32_t>(bytes.size());
  std::string out;
  out.reserve(bytes.size() + 8);
  for (int32_t i = 0; i < n;) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);  // on an ill-formed sequence: skips its maximal subpart
    if (c < 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes.substr(start, i - start));
    }
  }
  return out;
}

char32_t NextCodePoint(std::string_view text, size_t* i) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  if (s[*i] < 0x80) return s[(*i)++];
  int32_t pos = static_cast<int32_t>(*i);
  UChar32 c;
  U8_NEXT_UNSAFE(s, pos, c);
  *i = static_cast<size_t>(pos);
  return static_cast<char32_t>(c);
}

char32_t PreviousCodePoint(std::string_view text, size_t end, size_t* start) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  int32_t pos = static_cast<int32_t>(end);
  UChar32 c;
  U8_PREV_UNSAFE(s, pos, c);
  *start = static_cast<size_t>(pos);
  return static_cast<char32_t>(c);
}

Result<std::string> Normalize(std::string_view text, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status)) return Status::Internal(std::string("ICU normalizer: ") + u_errorName(status));
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) return Status::Internal(std::string("ICU normalize: ") + u_errorName(status));
  return out;
}

bool IsWhiteSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool IsWordChar(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int32_t mask = U_GET_GC_MASK(u);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

}  // namespace kvserve::runtime
