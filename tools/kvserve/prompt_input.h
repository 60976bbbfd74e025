// Copyright kvserve authors. Prompt options shared by the runtime commands
// (generate, kv-dump, head-scores): text through the model's tokenizer, or
// token ids given directly, or seeded random ids (for tokenizer-less models).
#ifndef KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_
#define KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/runtime.h"

namespace kvserve::cli {

struct PromptInput {
  std::string text;
  std::string file;
  std::string ids;  // "1,2,3"
  int random_tokens = 0;
  uint64_t seed = 1;
  std::string tokenizer;  // default: the model directory

  // Declares --prompt, --prompt-file, --prompt-ids, --random-prompt, --seed-prompt, --tokenizer.
  void AddOptions(CLI::App& sub);
  // The prompt's token ids. InvalidArgument if none or several sources are
  // given; NotFound/Corruption from the tokenizer.
  Result<std::vector<int32_t>> Resolve(const std::string& model_dir, const Model& model) const;
};

// "1,2,3" -> {1, 2, 3}. InvalidArgument on a bad number.
Result<std::vector<int32_t>> ParseIds(const std::string& text);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_
