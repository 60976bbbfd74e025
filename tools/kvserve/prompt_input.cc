// Copyright kvserve authors. Prompt options for the runtime commands.
#include "prompt_input.h"

namespace kvserve::cli {

void AddPromptOptions(CLI::App& sub, lab::PromptSource* p) {
  sub.add_option("--prompt", p->text,
                 "prompt text (tokenized with the model's tokenizer.json or tokenizer.model)");
  sub.add_option("--prompt-file", p->file, "file whose text is the prompt");
  sub.add_option("--prompt-ids", p->ids, "prompt as comma-separated token ids");
  sub.add_option("--random-prompt", p->random_tokens,
                 "prompt of N seeded random token ids (models without a tokenizer)");
  sub.add_option("--prompt-seed", p->seed, "seed of --random-prompt")->capture_default_str();
  sub.add_option("--tokenizer", p->tokenizer,
                 "tokenizer.json / tokenizer.model path (default: the model dir)");
}

}  // namespace kvserve::cli
