// Copyright kvserve authors. The tokenizer implementations behind
// kvserve::Tokenizer::Load (include/kvserve/runtime.h).
#ifndef KVSERVE_RUNTIME_TOKENIZERS_H_
#define KVSERVE_RUNTIME_TOKENIZERS_H_

#include <memory>
#include <string>

#include "kvserve/runtime.h"

namespace kvserve::runtime {

// A tokenizer.json given as text; `name` prefixes error messages.
Result<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& text,
                                                       const std::string& name);

// A SentencePiece tokenizer.model. Corruption if it does not parse.
Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_TOKENIZERS_H_
