// Copyright kvserve authors. generation_config.json: the token ids HF
// generate() stops at (and starts with) for a checkpoint.
#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"

namespace kvserve {
namespace {

Status ReadId(const nlohmann::json& v, const char* key, std::vector<int>* out) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t{1} << 30)) {
    out->push_back(static_cast<int>(v.get<int64_t>()));
    return Status::Ok();
  }
  return Status::Corruption(std::string("generation_config.json: '") + key + "' entry " + v.dump() +
                            " is not a token id");
}

}  // namespace

Status ApplyGenerationConfig(const std::string& json_text, ModelConfig* config) {
  const nlohmann::json json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Status::Corruption("generation_config.json: not a JSON object");
  }
  if (auto it = json.find("eos_token_id"); it != json.end() && !it->is_null()) {
    std::vector<int> eos;
    if (it->is_array()) {
      for (const auto& e : *it) KVSERVE_RETURN_IF_ERROR(ReadId(e, "eos_token_id", &eos));
    } else {
      KVSERVE_RETURN_IF_ERROR(ReadId(*it, "eos_token_id", &eos));
    }
    config->eos_token_ids = std::move(eos);
  }
  if (auto it = json.find("bos_token_id"); it != json.end() && !it->is_null()) {
    std::vector<int> bos;
    KVSERVE_RETURN_IF_ERROR(ReadId(*it, "bos_token_id", &bos));
    config->bos_token_id = bos[0];
  }
  for (int id : config->eos_token_ids) {
    if (id >= config->vocab_size) {
      return Status::Corruption("generation_config.json: eos id " + std::to_string(id) +
                                " is outside the vocabulary of " + std::to_string(config->vocab_size));
    }
  }
  return Status::Ok();
}

}  // namespace kvserve
