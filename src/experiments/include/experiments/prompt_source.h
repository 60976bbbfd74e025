// Copyright kvserve authors. Where the runtime commands (generate, kv-dump,
// head-scores) take a prompt from: text through the model's tokenizer, a
// file's text, token ids given directly, or seeded random ids (for
// tokenizer-less models). Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_PROMPT_SOURCE_H_
#define KVSERVE_EXPERIMENTS_PROMPT_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/runtime.h"

namespace kvserve::lab {

struct PromptSource {
  std::string text;
  std::string file;
  std::string ids;  // "1,2,3"
  int random_tokens = 0;
  uint64_t seed = 1;      // of random_tokens
  std::string tokenizer;  // tokenizer.json / tokenizer.model; "": the model directory's
};

// "1, 2,3" -> {1, 2, 3} (blank items skipped). InvalidArgument naming an
// item that is not a non-negative 32-bit integer.
Result<std::vector<int32_t>> ParseTokenIds(const std::string& text);

// The prompt's token ids for the model in `model_dir` with `config`: the
// ids, random ids below the vocabulary size, or the text (of the file)
// through the tokenizer with the config's bos. InvalidArgument unless
// exactly one source is given, or for an empty prompt; NotFound for a
// missing file; the tokenizer's errors.
Result<std::vector<int32_t>> ResolvePrompt(const PromptSource& p, const std::string& model_dir,
                                           const ModelConfig& config);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_PROMPT_SOURCE_H_
