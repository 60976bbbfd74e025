// Copyright kvserve authors. Added-token matching (see added_tokens.h).
#include "runtime/added_tokens.h"

#include <algorithm>

#include "runtime/unicode_text.h"

namespace kvserve::runtime {
namespace {

uint64_t EdgeKey(int node, uint8_t byte) { return (static_cast<uint64_t>(node) << 8) | byte; }

bool EndsWithWord(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t start;
  return IsWordChar(PreviousCodePoint(text, end, &start));
}

bool StartsWithWord(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  return IsWordChar(NextCodePoint(text, &begin));
}

// Start of the whitespace run that ends at `end`.
size_t WhitespaceRunStart(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start;
    if (!IsWhiteSpace(PreviousCodePoint(text, end, &start))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
size_t WhitespaceRunEnd(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t next = begin;
    if (!IsWhiteSpace(NextCodePoint(text, &next))) break;
    begin = next;
  }
  return begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(tokens) {
  for (size_t t = 0; t < patterns.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int node = 0;
    for (char c : p) {
      const uint64_t key = EdgeKey(node, static_cast<uint8_t>(c));
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        nodes_.push_back(Node{});
        it = edges_.emplace(key, static_cast<int>(nodes_.size()) - 1).first;
      }
      node = it->second;
    }
    // Two tokens with the same pattern: the later wins, as a map would.
    nodes_[node].token = static_cast<int>(t);
  }
}

int AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* end) const {
  int node = 0, found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(EdgeKey(node, static_cast<uint8_t>(text[i])));
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      found = nodes_[node].token;
      *end = i + 1;
    }
  }
  return found;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* out) const {
  if (text.empty()) return;
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t stop = 0;
    const int t = LongestAt(text, pos, &stop);
    if (t < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    pos = stop;  // matches never overlap, kept or not
    const AddedToken& token = tokens_[t];
    if (token.single_word && (EndsWithWord(text, start) || StartsWithWord(text, stop))) continue;
    if (token.lstrip) start = std::max(WhitespaceRunStart(text, start), start_offset);
    if (token.rstrip) stop = WhitespaceRunEnd(text, stop);
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, token.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

}  // namespace kvserve::runtime
