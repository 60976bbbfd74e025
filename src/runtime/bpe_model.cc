// Copyright kvserve authors. Byte-level BPE model (see bpe_model.h).
#include "runtime/bpe_model.h"

#include <algorithm>
#include <queue>

#include <nlohmann/json.hpp>

#include "runtime/json_fields.h"
#include "runtime/unicode_text.h"

namespace kvserve::runtime {
namespace {

std::array<char32_t, 256> MakeByteToChar() {
  std::array<char32_t, 256> map{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? static_cast<char32_t>(b) : next++;
  return map;
}

// The raw bytes `text` stands for, or false if a character is outside the
// byte alphabet.
bool UnmapBytes(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size();) {
    const int b = CharToByte(NextCodePoint(text, &i));
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

Result<std::pair<std::string, std::string>> MergeParts(const nlohmann::json& m, size_t rank) {
  if (m.is_string()) {
    // Legacy form "a b": exactly one space (the crate's BadMerges otherwise).
    const std::string& line = m.get_ref<const std::string&>();
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return Status::Corruption("BPE merge " + std::to_string(rank + 1) + " '" + line +
                                "' is not two space-separated tokens");
    }
    return std::pair{line.substr(0, space), line.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair{m[0].get<std::string>(), m[1].get<std::string>()};
  }
  return Status::Corruption("BPE merge " + std::to_string(rank + 1) + " is neither \"a b\" nor [a, b]");
}

bool NullOrEmpty(const nlohmann::json& model, const char* key) {
  auto it = model.find(key);
  return it == model.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
}

}  // namespace

const std::array<char32_t, 256>& ByteToChar() {
  static const std::array<char32_t, 256> map = MakeByteToChar();
  return map;
}

int CharToByte(char32_t c) {
  if (c < 256) {
    const auto b = static_cast<int>(c);
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    return -1;
  }
  if (c >= 256 + 68) return -1;
  // U+0100 + n is the n-th byte outside the direct ranges.
  static const std::array<int, 68> indirect = [] {
    std::array<int, 68> a{};
    const auto& map = ByteToChar();
    for (int b = 0; b < 256; ++b) {
      if (map[b] >= 256) a[map[b] - 256] = b;
    }
    return a;
  }();
  return indirect[c - 256];
}

std::string ByteLevelDecodeToken(std::string_view text) {
  std::string bytes;
  if (UnmapBytes(text, &bytes)) return bytes;
  return std::string(text);
}

Result<BpeModel> BpeModel::FromJson(const nlohmann::json& model) {
  if (!model.is_object()) return Status::Corruption("tokenizer.json: model is not an object");
  const std::string type = StringField(model, "type", "BPE");
  if (type != "BPE") {
    return Status::NotSupported("tokenizer.json: model type '" + type + "' (only BPE)");
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) {
      return Status::NotSupported("tokenizer.json: BPE dropout " + it->dump());
    }
  }
  for (const char* key : {"unk_token", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!NullOrEmpty(model, key)) {
      return Status::NotSupported(std::string("tokenizer.json: BPE ") + key + " " +
                                  model[key].dump());
    }
  }
  if (auto it = model.find("byte_fallback"); it != model.end() && it->is_boolean() && it->get<bool>()) {
    return Status::NotSupported("tokenizer.json: BPE byte_fallback (SentencePiece-style BPE)");
  }
  BpeModel bpe;
  if (auto it = model.find("ignore_merges"); it != model.end() && it->is_boolean()) {
    bpe.ignore_merges_ = it->get<bool>();
  }
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return Status::Corruption("tokenizer.json: BPE model has no vocab object");
  }
  TokenIndex by_string;
  by_string.reserve(vocab->size());
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= (int64_t{1} << 30)) {
      return Status::Corruption("tokenizer.json: vocab id of '" + it.key() + "' is " + it->dump());
    }
    by_string.emplace(it.key(), static_cast<int32_t>(it->get<int64_t>()));
    max_id = std::max(max_id, it->get<int64_t>());
  }
  bpe.tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  bpe.present_.assign(bpe.tokens_.size(), false);
  bpe.byte_id_.fill(-1);
  bpe.by_bytes_.reserve(by_string.size());
  std::string bytes;
  for (const auto& [text, id] : by_string) {
    if (bpe.present_[id]) {
      return Status::Corruption("tokenizer.json: vocab id " + std::to_string(id) + " appears twice");
    }
    bpe.present_[id] = true;
    bpe.tokens_[id] = text;
    if (!UnmapBytes(text, &bytes)) continue;  // never produced from bytes
    if (bytes.size() == 1) bpe.byte_id_[static_cast<uint8_t>(bytes[0])] = id;
    bpe.by_bytes_.emplace(bytes, id);
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return Status::Corruption("tokenizer.json: BPE model has no merges array");
  }
  bpe.merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    KVSERVE_ASSIGN_OR_RETURN(auto parts, MergeParts((*merges)[rank], rank));
    auto a = by_string.find(parts.first);
    auto b = by_string.find(parts.second);
    auto ab = by_string.find(parts.first + parts.second);
    if (a == by_string.end() || b == by_string.end() || ab == by_string.end()) {
      return Status::Corruption("tokenizer.json: BPE merge " + std::to_string(rank + 1) + " ('" +
                                parts.first + "', '" + parts.second +
                                "') uses a token outside the vocabulary");
    }
    // A repeated pair keeps its last rank, as the crate's map does.
    bpe.merges_[PairKey(a->second, b->second)] = Merge{static_cast<uint32_t>(rank), ab->second};
  }
  return bpe;
}

void BpeModel::MergeShortWord(std::vector<int32_t>* symbols) const {
  // The same order as the heap in MergeWord (lowest rank, then leftmost),
  // by scanning the ranks of the current adjacent pairs: no allocation, and
  // only the two pairs around a merge are looked up again.
  constexpr uint32_t kNone = UINT32_MAX;
  int32_t* sym = symbols->data();
  int len = static_cast<int>(symbols->size());
  uint32_t rank[kShortWord];
  int32_t merged[kShortWord];
  auto lookup = [&](int i) {
    const Merge* m = FindMerge(sym[i], sym[i + 1]);
    rank[i] = m ? m->rank : kNone;
    merged[i] = m ? m->id : -1;
  };
  for (int i = 0; i + 1 < len; ++i) lookup(i);
  while (len > 1) {
    int best = -1;
    uint32_t best_rank = kNone;
    for (int i = 0; i + 1 < len; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best < 0) break;
    sym[best] = merged[best];
    // Drop symbol best + 1 and pair best + 1 (now pair best covers it).
    for (int i = best + 1; i + 1 < len; ++i) sym[i] = sym[i + 1];
    for (int i = best + 1; i + 2 < len; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --len;
    if (best + 1 < len) lookup(best);
    if (best > 0) lookup(best - 1);
  }
  symbols->resize(len);
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::Encode(std::string_view bytes, std::vector<int32_t>* out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    if (auto it = by_bytes_.find(bytes); it != by_bytes_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(bytes.size());
  for (char c : bytes) {
    const int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);
  }
  MergeWord(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

void BpeModel::MergeWord(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  if (n < 2) return;
  if (n <= kShortWord) {
    MergeShortWord(symbols);
    return;
  }
  // The crate's Word::merge_all: a heap of candidate merges ordered by
  // (rank, position); an entry is stale when its pair has changed.
  struct Candidate {
    uint32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::vector<int32_t>& sym = *symbols;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n) {
      if (const Merge* m = FindMerge(sym[i], sym[i + 1])) heap.push({m->rank, i, m->id});
    }
  }
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int p = top.pos;
    if (!alive[p] || next[p] < 0) continue;
    const int q = next[p];
    const Merge* m = FindMerge(sym[p], sym[q]);
    if (m == nullptr || m->id != top.id) continue;  // stale
    sym[p] = top.id;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) {
      if (const Merge* left = FindMerge(sym[prev[p]], sym[p])) heap.push({left->rank, prev[p], left->id});
    }
    if (next[p] >= 0) {
      if (const Merge* right = FindMerge(sym[p], sym[next[p]])) heap.push({right->rank, p, right->id});
    }
  }
  int w = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) sym[w++] = sym[i];
  }
  sym.resize(w);
}

}  // namespace kvserve::runtime
