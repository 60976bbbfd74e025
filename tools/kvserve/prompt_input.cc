// Copyright kvserve authors. Prompt options for the runtime commands.
#include "prompt_input.h"

#include <fstream>
#include <random>
#include <sstream>

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

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (item.find_first_not_of(" ", used) != std::string::npos || v < 0 || v > INT32_MAX) {
        throw std::invalid_argument(item);
      }
      out.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return Status::InvalidArgument("bad token id '" + item + "'");
    }
  }
  return out;
}

Result<std::vector<int32_t>> PromptInput::Resolve(const std::string& model_dir,
                                                  const Model& model) const {
  const int sources = !text.empty() + !file.empty() + !ids.empty() + (random_tokens > 0);
  if (sources != 1) {
    return Status::InvalidArgument(
        "give exactly one of --prompt, --prompt-file, --prompt-ids, --random-prompt");
  }
  std::vector<int32_t> tokens;
  if (!ids.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(tokens, ParseIds(ids));
  } else if (random_tokens > 0) {
    std::mt19937_64 rng(seed);
    tokens.resize(random_tokens);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % model.config().vocab_size);
  } else {
    std::string prompt = text;
    if (!file.empty()) {
      std::ifstream in(file);
      if (!in) return Status::NotFound(file + ": cannot open");
      std::stringstream buffer;
      buffer << in.rdbuf();
      prompt = buffer.str();
    }
    KVSERVE_ASSIGN_OR_RETURN(auto tok, Tokenizer::Load(tokenizer.empty() ? model_dir : tokenizer));
    KVSERVE_ASSIGN_OR_RETURN(tokens, tok->EncodePrompt(prompt, model.config().bos_token_id));
  }
  if (tokens.empty()) return Status::InvalidArgument("empty prompt");
  return tokens;
}

}  // namespace kvserve::cli
