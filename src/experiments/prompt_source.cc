// Copyright kvserve authors. experiments/prompt_source.h.
#include "experiments/prompt_source.h"

#include <climits>
#include <fstream>
#include <random>
#include <sstream>

namespace kvserve::lab {

Result<std::vector<int32_t>> ParseTokenIds(const std::string& text) {
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

Result<std::vector<int32_t>> ResolvePrompt(const PromptSource& p, const std::string& model_dir,
                                           const ModelConfig& config) {
  const int sources = !p.text.empty() + !p.file.empty() + !p.ids.empty() + (p.random_tokens > 0);
  if (sources != 1) {
    return Status::InvalidArgument(
        "give exactly one of --prompt, --prompt-file, --prompt-ids, --random-prompt");
  }
  std::vector<int32_t> tokens;
  if (!p.ids.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(tokens, ParseTokenIds(p.ids));
  } else if (p.random_tokens > 0) {
    std::mt19937_64 rng(p.seed);
    tokens.resize(p.random_tokens);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % config.vocab_size);
  } else {
    std::string prompt = p.text;
    if (!p.file.empty()) {
      std::ifstream in(p.file);
      if (!in) return Status::NotFound(p.file + ": cannot open");
      std::stringstream buffer;
      buffer << in.rdbuf();
      prompt = buffer.str();
    }
    KVSERVE_ASSIGN_OR_RETURN(auto tok,
                             Tokenizer::Load(p.tokenizer.empty() ? model_dir : p.tokenizer));
    KVSERVE_ASSIGN_OR_RETURN(tokens, tok->EncodePrompt(prompt, config.bos_token_id));
  }
  if (tokens.empty()) return Status::InvalidArgument("empty prompt");
  return tokens;
}

}  // namespace kvserve::lab
