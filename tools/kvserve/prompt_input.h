// Copyright kvserve authors. The prompt flags shared by the runtime commands
// (generate, kv-dump, head-scores); lab::ResolvePrompt turns them into ids.
#ifndef KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_
#define KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/prompt_source.h"
#include "kvserve/runtime.h"

namespace kvserve::cli {

// Declares --prompt, --prompt-file, --prompt-ids, --random-prompt, --prompt-seed and
// --tokenizer, bound to `p`.
void AddPromptOptions(CLI::App& sub, lab::PromptSource* p);

struct PromptInput : lab::PromptSource {
  void AddOptions(CLI::App& sub) { AddPromptOptions(sub, this); }
  // lab::ResolvePrompt for `model`.
  Result<std::vector<int32_t>> Resolve(const std::string& model_dir, const Model& model) const {
    return lab::ResolvePrompt(*this, model_dir, model.config());
  }
};

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_PROMPT_INPUT_H_
