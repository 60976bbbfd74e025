// Copyright kvserve authors. config.json parsing shared by all families, and
// the family dispatch.
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"
#include "runtime/families.h"

namespace kvserve {
namespace runtime {
namespace {

// PretrainedConfig bookkeeping keys that never change the forward pass.
const char* const kIgnoredKeys[] = {
    "_name_or_path", "architectures", "model_type", "torch_dtype", "dtype",
    "transformers_version", "use_cache", "initializer_range", "pad_token_id",
    "attention_dropout", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "id2label", "label2id", "tokenizer_class", "bos_token_id",
    "eos_token_id", "max_position_embeddings", "tie_word_embeddings", "max_length",
    "problem_type", "embd_pdrop", "resid_pdrop", "unk_token_id", "sep_token_id",
    "decoder_start_token_id", "task_specific_params", "finetuning_task", "prefix",
};

Result<int> GetPositiveInt(const nlohmann::json& json, const char* key, bool required,
                           int fallback = 0) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) {
    if (required) return Status::InvalidArgument(std::string("config.json: missing '") + key + "'");
    return fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 30)) {
    return Status::InvalidArgument(std::string("config.json: '") + key +
                                   "' must be a positive integer, got " + it->dump());
  }
  return static_cast<int>(it->get<int64_t>());
}

}  // namespace

Status ParseCommonConfig(const nlohmann::json& json, ModelConfig* c,
                         std::set<std::string>* known) {
  for (const char* k : kIgnoredKeys) known->insert(k);
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta",
                        "rms_norm_eps", "hidden_act", "rope_scaling", "pretraining_tp",
                        "layer_types", "rope_parameters"}) {
    known->insert(k);
  }
  KVSERVE_ASSIGN_OR_RETURN(c->vocab_size, GetPositiveInt(json, "vocab_size", true));
  KVSERVE_ASSIGN_OR_RETURN(c->hidden_size, GetPositiveInt(json, "hidden_size", true));
  KVSERVE_ASSIGN_OR_RETURN(c->intermediate_size, GetPositiveInt(json, "intermediate_size", true));
  KVSERVE_ASSIGN_OR_RETURN(c->layers, GetPositiveInt(json, "num_hidden_layers", true));
  KVSERVE_ASSIGN_OR_RETURN(c->heads, GetPositiveInt(json, "num_attention_heads", true));
  KVSERVE_ASSIGN_OR_RETURN(c->kv_heads,
                           GetPositiveInt(json, "num_key_value_heads", false, c->heads));
  if (c->hidden_size % c->heads != 0 && !json.contains("head_dim")) {
    return Status::InvalidArgument("config.json: hidden_size not divisible by num_attention_heads");
  }
  KVSERVE_ASSIGN_OR_RETURN(c->head_dim,
                           GetPositiveInt(json, "head_dim", false, c->hidden_size / c->heads));
  if (c->head_dim % 2 != 0) return Status::InvalidArgument("config.json: head_dim must be even");
  if (c->heads % c->kv_heads != 0) {
    return Status::InvalidArgument("config.json: num_attention_heads (" + std::to_string(c->heads) +
                                   ") not a multiple of num_key_value_heads (" +
                                   std::to_string(c->kv_heads) + ")");
  }
  KVSERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                           GetPositiveInt(json, "max_position_embeddings", false, 1 << 30));
  if (auto it = json.find("rope_theta"); it != json.end()) {
    if (!it->is_number() || it->get<double>() <= 0) {
      return Status::InvalidArgument("config.json: rope_theta must be a positive number");
    }
    c->rope_theta = it->get<double>();
  }
  // transformers >= 5 writes {"rope_type": "default", "rope_theta": X}: plain
  // RoPE is accepted (theta must agree with a top-level rope_theta); any
  // other rope_type is a scaling variant this runtime refuses.
  if (auto it = json.find("rope_parameters"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) return Status::InvalidArgument("config.json: rope_parameters is not an object");
    for (const auto& [key, value] : it->items()) {
      if (key == "rope_type") {
        if (value != "default") {
          return Status::NotSupported("config.json: rope_parameters.rope_type " + value.dump() +
                                      " is not supported (only \"default\": plain RoPE)");
        }
      } else if (key == "rope_theta") {
        if (!value.is_number() || value.get<double>() <= 0) {
          return Status::InvalidArgument("config.json: rope_parameters.rope_theta must be positive");
        }
        if (json.contains("rope_theta") && json["rope_theta"] != value) {
          return Status::InvalidArgument("config.json: rope_parameters.rope_theta disagrees with rope_theta");
        }
        c->rope_theta = value.get<double>();
      } else {
        return Status::NotSupported("config.json: rope_parameters." + key + " is not supported");
      }
    }
  }
  if (auto it = json.find("rms_norm_eps"); it != json.end()) {
    if (!it->is_number() || it->get<double>() <= 0) {
      return Status::InvalidArgument("config.json: rms_norm_eps must be a positive number");
    }
    c->rms_norm_eps = static_cast<float>(it->get<double>());
  }
  if (auto it = json.find("hidden_act"); it != json.end() && *it != "silu") {
    return Status::NotSupported("config.json: hidden_act " + it->dump() +
                                " is not supported (only \"silu\")");
  }
  if (auto it = json.find("rope_scaling"); it != json.end() && !it->is_null()) {
    return Status::NotSupported("config.json: rope_scaling " + it->dump() +
                                " is not supported (only null: plain RoPE)");
  }
  if (auto it = json.find("pretraining_tp"); it != json.end() && *it != 1) {
    return Status::NotSupported("config.json: pretraining_tp " + it->dump() + " is not supported");
  }
  if (auto it = json.find("layer_types"); it != json.end()) {
    if (!it->is_array()) return Status::InvalidArgument("config.json: layer_types is not a list");
    for (const auto& t : *it) {
      if (t != "full_attention") {
        return Status::NotSupported("config.json: layer_types entry " + t.dump() +
                                    " is not supported (only \"full_attention\")");
      }
    }
  }
  if (auto it = json.find("tie_word_embeddings"); it != json.end()) {
    if (!it->is_boolean()) return Status::InvalidArgument("config.json: tie_word_embeddings");
    c->tie_word_embeddings = it->get<bool>();
  }
  if (auto it = json.find("bos_token_id"); it != json.end() && it->is_number_integer()) {
    c->bos_token_id = it->get<int>();
  }
  if (auto it = json.find("eos_token_id"); it != json.end()) {
    if (it->is_number_integer()) c->eos_token_ids.push_back(it->get<int>());
    if (it->is_array()) {
      for (const auto& e : *it) {
        if (e.is_number_integer()) c->eos_token_ids.push_back(e.get<int>());
      }
    }
  }
  return Status::Ok();
}

}  // namespace runtime

Result<ModelConfig> ParseModelConfig(const std::string& json_text) {
  nlohmann::json json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Status::Corruption("config.json: not a JSON object");
  }
  std::string model_type = json.value("model_type", "");
  if (model_type.empty()) {
    if (auto it = json.find("architectures"); it != json.end() && it->is_array() && !it->empty() &&
                                              (*it)[0].is_string()) {
      const std::string arch = (*it)[0].get<std::string>();
      if (arch == "LlamaForCausalLM") model_type = "llama";
      if (arch == "Qwen2ForCausalLM") model_type = "qwen2";
    }
  }
  ModelConfig config;
  std::set<std::string> known;
  KVSERVE_RETURN_IF_ERROR(runtime::ParseCommonConfig(json, &config, &known));
  if (model_type == "llama") {
    config.family = ModelFamily::kLlama;
    KVSERVE_RETURN_IF_ERROR(runtime::ParseLlamaConfig(json, &config, &known));
  } else if (model_type == "qwen2") {
    config.family = ModelFamily::kQwen2;
    KVSERVE_RETURN_IF_ERROR(runtime::ParseQwen2Config(json, &config, &known));
  } else {
    return Status::NotSupported("config.json: model_type '" + model_type +
                                "' is not supported (llama, qwen2)");
  }
  // An unknown key may change the forward pass; refusing is safer than a
  // silently wrong answer.
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!known.count(it.key())) {
      return Status::NotSupported("config.json: unknown key '" + it.key() + "' (value " +
                                  it.value().dump() + ") for model_type " + model_type);
    }
  }
  return config;
}

int64_t ModelConfig::NonEmbeddingParameters() const {
  const int64_t d = hidden_size, q = int64_t{heads} * head_dim, kv = int64_t{kv_heads} * head_dim;
  int64_t per_layer = d * (q + 2 * kv) + q * d + 3 * d * intermediate_size + 2 * d;
  if (qkv_bias) per_layer += q + 2 * kv;
  return per_layer * layers + d + int64_t{vocab_size} * d;
}

double ModelConfig::ForwardFlops(int64_t past, int64_t tokens, int64_t logit_rows) const {
  const double d = hidden_size, q = double(heads) * head_dim, kv = double(kv_heads) * head_dim;
  const double matmul_per_token = 2.0 * (d * (q + 2 * kv) + q * d + 3 * d * intermediate_size);
  // Causal attention: token i attends to past + i + 1 keys; QK^T and PV.
  const double pairs = double(tokens) * past + double(tokens) * (tokens + 1) / 2.0;
  const double attention = 4.0 * pairs * heads * head_dim;
  return layers * (matmul_per_token * tokens + attention) +
         2.0 * double(logit_rows) * vocab_size * d;
}

}  // namespace kvserve
