// Copyright kvserve authors. Prompt options for the runtime commands.
#include "prompt_input.h"

namespace kvserve::cli {

void PromptInput::AddOptions(CLI::App& sub) {
  sub.add_option("--prompt", text,
                 "prompt text (tokenized with the model's tokenizer.json or tokenizer.model)");
  sub.add_option("--prompt-file", file, "file whose text is the prompt");
  sub.add_option("--prompt-ids", ids, "prompt as comma-separated token ids");
  sub.add_option("--random-prompt", random_tokens,
                 "prompt of N seeded random token ids (models without a tokenizer)");
  sub.add_option("--prompt-seed", seed, "seed of --random-prompt")->capture_default_str();
  sub.add_option("--tokenizer", tokenizer,
                 "tokenizer.json / tokenizer.model path (default: the model dir)");
}

}  // namespace kvserve::cli
