// Copyright kvserve authors. SentencePiece tokenizer through libsentencepiece.
#include <sentencepiece_processor.h>

#include "kvserve/runtime.h"
#include "runtime/tokenizers.h"

namespace kvserve::runtime {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  Status Open(const std::string& path) {
    auto s = processor_.Load(path);
    if (!s.ok()) return Status::Corruption(path + ": sentencepiece: " + s.ToString());
    return Status::Ok();
  }
  Result<std::vector<int32_t>> Encode(const std::string& text) const override {
    std::vector<int> ids;
    auto s = processor_.Encode(text, &ids);
    if (!s.ok()) return Status::InvalidArgument("sentencepiece encode: " + s.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  Result<std::vector<int32_t>> EncodePrompt(const std::string& text, int bos_token_id) const override {
    KVSERVE_ASSIGN_OR_RETURN(auto body, Encode(text));
    std::vector<int32_t> ids;
    if (bos_token_id >= 0) ids.push_back(bos_token_id);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::vector<int> in(ids.begin(), ids.end());
    for (int id : in) {
      if (id < 0 || id >= processor_.GetPieceSize()) {
        return Status::InvalidArgument("sentencepiece decode: id " + std::to_string(id) +
                                       " out of range");
      }
    }
    std::string text;
    auto s = processor_.Decode(in, &text);
    if (!s.ok()) return Status::InvalidArgument("sentencepiece decode: " + s.ToString());
    return text;
  }
  int vocab_size() const override { return processor_.GetPieceSize(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  auto tokenizer = std::make_unique<SentencePieceTokenizer>();
  KVSERVE_RETURN_IF_ERROR(tokenizer->Open(path));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace kvserve::runtime
