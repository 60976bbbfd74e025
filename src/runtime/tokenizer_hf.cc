// Copyright kvserve authors. Hugging Face tokenizer.json with byte-level BPE
// (GPT-2, Llama-3, Qwen2/Qwen3): the pipeline of the Rust `tokenizers`
// crate, step by step:
//   added tokens (raw text) -> normalizer -> added tokens (normalized text)
//   -> pre_tokenizer (Split regex, ByteLevel) -> BPE -> post_processor
// and the ByteLevel decoder. Each component is checked when loading; one
// that would change the ids and is not implemented is NotSupported.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"
#include "runtime/added_tokens.h"
#include "runtime/bpe_model.h"
#include "runtime/json_fields.h"
#include "runtime/pre_tokenizer.h"
#include "runtime/tokenizers.h"
#include "runtime/unicode_text.h"

namespace kvserve {
namespace runtime {
namespace {

using nlohmann::json;

std::string TypeOf(const json& j) { return StringField(j, "type", ""); }

Status ParseNormalizer(const json& j, std::vector<NormalForm>* forms) {
  if (j.is_null()) return Status::Ok();
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return Status::Corruption("normalizer Sequence without normalizers");
    }
    for (const json& n : j["normalizers"]) KVSERVE_RETURN_IF_ERROR(ParseNormalizer(n, forms));
    return Status::Ok();
  }
  if (type == "NFC") {
    forms->push_back(NormalForm::kNfc);
  } else if (type == "NFD") {
    forms->push_back(NormalForm::kNfd);
  } else if (type == "NFKC") {
    forms->push_back(NormalForm::kNfkc);
  } else if (type == "NFKD") {
    forms->push_back(NormalForm::kNfkd);
  } else {
    return Status::NotSupported("normalizer type '" + type + "' (implemented: NFC, NFD, NFKC, NFKD, Sequence)");
  }
  return Status::Ok();
}

// The single-sequence TemplateProcessing: ids before and after $A.
Status ParsePostProcessor(const json& j, std::vector<int32_t>* before, std::vector<int32_t>* after) {
  if (j.is_null()) return Status::Ok();
  const std::string type = TypeOf(j);
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return Status::Corruption("post_processor Sequence without processors");
    }
    for (const json& p : j["processors"]) KVSERVE_RETURN_IF_ERROR(ParsePostProcessor(p, before, after));
    return Status::Ok();
  }
  if (type != "TemplateProcessing") {
    return Status::NotSupported("post_processor type '" + type +
                                "' (implemented: TemplateProcessing, ByteLevel, Sequence)");
  }
  if (!before->empty() || !after->empty()) {
    return Status::NotSupported("post_processor with two TemplateProcessing steps");
  }
  const json& single = j.value("single", json());
  const json& specials = j.value("special_tokens", json::object());
  if (!single.is_array()) return Status::Corruption("TemplateProcessing without a 'single' template");
  bool seen_sequence = false;
  for (const json& piece : single) {
    if (piece.contains("Sequence")) {
      const std::string id = StringField(piece["Sequence"], "id", "");
      if (id != "A" || seen_sequence) {
        return Status::Corruption("TemplateProcessing single template must hold $A once");
      }
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) return Status::Corruption("TemplateProcessing: unknown piece " + piece.dump());
    const std::string name = StringField(piece["SpecialToken"], "id", "");
    auto it = specials.find(name);
    if (it == specials.end() || !it->contains("ids") || !(*it)["ids"].is_array()) {
      return Status::Corruption("TemplateProcessing: special token '" + name + "' has no ids");
    }
    for (const json& id : (*it)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 30)) {
        return Status::Corruption("TemplateProcessing: bad id for '" + name + "'");
      }
      (seen_sequence ? after : before)->push_back(id.get<int32_t>());
    }
  }
  if (!seen_sequence) return Status::Corruption("TemplateProcessing single template lacks $A");
  return Status::Ok();
}

Status CheckDecoder(const json& j) {
  const std::string type = TypeOf(j);
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
    for (const json& d : j["decoders"]) KVSERVE_RETURN_IF_ERROR(CheckDecoder(d));
    return Status::Ok();
  }
  return Status::NotSupported("decoder type '" + (type.empty() ? j.dump() : type) +
                              "' (byte-level BPE needs the ByteLevel decoder)");
}

Result<std::vector<AddedToken>> ParseAddedTokens(const json& j) {
  std::vector<AddedToken> tokens;
  if (j.is_null()) return tokens;
  if (!j.is_array()) return Status::Corruption("added_tokens is not an array");
  for (const json& t : j) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return Status::Corruption("added token without an integer id and a content string");
    }
    AddedToken a;
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 30)) return Status::Corruption("added token id " + t["id"].dump());
    a.id = static_cast<int32_t>(id);
    a.content = t["content"].get<std::string>();
    if (a.content.empty() || !IsValidUtf8(a.content)) {
      return Status::Corruption("added token " + std::to_string(id) + " has empty or non-UTF-8 content");
    }
    a.special = BoolField(t, "special", false);
    a.single_word = BoolField(t, "single_word", false);
    a.lstrip = BoolField(t, "lstrip", false);
    a.rstrip = BoolField(t, "rstrip", false);
    a.normalized = BoolField(t, "normalized", !a.special);
    tokens.push_back(std::move(a));
  }
  return tokens;
}

class HfTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Parse(const std::string& text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return Status::Corruption("not a JSON object");
    auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
    KVSERVE_RETURN_IF_ERROR(ParseNormalizer(j.value("normalizer", json()), &t->normal_forms_));
    KVSERVE_ASSIGN_OR_RETURN(t->pre_, PreTokenizer::FromJson(j.value("pre_tokenizer", json())));
    if (!t->pre_.byte_level()) {
      return Status::NotSupported("pre_tokenizer has no ByteLevel step (only byte-level BPE "
                                  "tokenizer.json files are implemented)");
    }
    if (!j.contains("model")) return Status::Corruption("no model");
    KVSERVE_ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(j["model"]));
    KVSERVE_RETURN_IF_ERROR(CheckDecoder(j.value("decoder", json())));
    KVSERVE_RETURN_IF_ERROR(
        ParsePostProcessor(j.value("post_processor", json()), &t->prefix_, &t->suffix_));
    KVSERVE_ASSIGN_OR_RETURN(auto added, ParseAddedTokens(j.value("added_tokens", json())));
    KVSERVE_RETURN_IF_ERROR(t->BuildAddedTokens(std::move(added)));
    for (int32_t id : t->prefix_) {
      if (id >= t->vocab_size()) return Status::Corruption("post_processor id " + std::to_string(id) + " has no token");
    }
    for (int32_t id : t->suffix_) {
      if (id >= t->vocab_size()) return Status::Corruption("post_processor id " + std::to_string(id) + " has no token");
    }
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  Result<std::vector<int32_t>> Encode(const std::string& text) const override {
    if (!IsValidUtf8(text)) return Status::InvalidArgument("encode: text is not valid UTF-8");
    std::vector<int32_t> ids;
    std::vector<TextSegment> raw, normalized_segments;
    raw_tokens_.Split(text, &raw);
    Pieces pieces;
    for (const TextSegment& seg : raw) {
      if (seg.token >= 0) {
        ids.push_back(seg.token);
        continue;
      }
      std::string normalized(text, seg.begin, seg.end - seg.begin);
      for (NormalForm form : normal_forms_) {
        KVSERVE_ASSIGN_OR_RETURN(normalized, Normalize(normalized, form));
      }
      normalized_segments.clear();
      normalized_tokens_.Split(normalized, &normalized_segments);
      for (const TextSegment& part : normalized_segments) {
        if (part.token >= 0) {
          ids.push_back(part.token);
          continue;
        }
        pieces.storage.clear();
        KVSERVE_RETURN_IF_ERROR(pre_.Run(
            std::string_view(normalized).substr(part.begin, part.end - part.begin), &pieces));
        for (std::string_view piece : pieces.views) model_.Encode(piece, &ids);
      }
    }
    return ids;
  }

  Result<std::vector<int32_t>> EncodePrompt(const std::string& text, int /*bos_token_id*/) const override {
    KVSERVE_ASSIGN_OR_RETURN(auto body, Encode(text));
    std::vector<int32_t> ids = prefix_;
    ids.insert(ids.end(), body.begin(), body.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }

  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string bytes;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || !has_[id]) {
        return Status::InvalidArgument("decode: id " + std::to_string(id) + " has no token");
      }
      bytes += decoded_[id];
    }
    return ToValidUtf8(bytes);
  }

  int vocab_size() const override { return static_cast<int>(decoded_.size()); }

 private:
  HfTokenizer() = default;

  Status BuildAddedTokens(std::vector<AddedToken> added) {
    int32_t limit = model_.id_limit();
    for (const AddedToken& a : added) limit = std::max(limit, a.id + 1);
    decoded_.assign(limit, std::string());
    has_.assign(limit, false);
    for (int32_t id = 0; id < model_.id_limit(); ++id) {
      if (!model_.has(id)) continue;
      decoded_[id] = ByteLevelDecodeToken(model_.token(id));
      has_[id] = true;
    }
    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    for (AddedToken& a : added) {
      std::string pattern = a.content;
      if (a.normalized) {
        for (NormalForm form : normal_forms_) {
          KVSERVE_ASSIGN_OR_RETURN(pattern, Normalize(pattern, form));
        }
      }
      // Decoding yields what the crate's id_to_token gives: the normalized
      // content for normalized tokens, through the ByteLevel decoder.
      decoded_[a.id] = ByteLevelDecodeToken(pattern);
      has_[a.id] = true;
      if (a.normalized) {
        normalized_patterns.push_back(std::move(pattern));
        normalized.push_back(std::move(a));
      } else {
        raw_patterns.push_back(std::move(pattern));
        raw.push_back(std::move(a));
      }
    }
    raw_tokens_ = AddedTokenMatcher(raw, raw_patterns);
    normalized_tokens_ = AddedTokenMatcher(normalized, normalized_patterns);
    return Status::Ok();
  }

  std::vector<NormalForm> normal_forms_;
  PreTokenizer pre_;
  BpeModel model_;
  AddedTokenMatcher raw_tokens_, normalized_tokens_;
  std::vector<int32_t> prefix_, suffix_;  // TemplateProcessing around $A
  std::vector<std::string> decoded_;      // id -> decoded bytes
  std::vector<bool> has_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& text, const std::string& name) {
  Result<std::unique_ptr<Tokenizer>> t = Status::Internal("unset");
  try {
    t = HfTokenizer::Parse(text);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    t = Status::Corruption(std::string("malformed: ") + e.what());
  }
  if (!t.ok()) return t.status().WithContext(name);
  return t;
}

}  // namespace runtime
}  // namespace kvserve
