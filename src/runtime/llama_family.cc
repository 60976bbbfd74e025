// Copyright kvserve authors. The Llama family (LlamaForCausalLM): RMSNorm,
// plain RoPE, GQA, SwiGLU, no projection biases.
#include "runtime/families.h"

namespace kvserve::runtime {

Status ParseLlamaConfig(const nlohmann::json& json, ModelConfig* config,
                        std::set<std::string>* known) {
  known->insert({"attention_bias", "mlp_bias"});
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (auto it = json.find(key); it != json.end() && *it != false) {
      return Status::NotSupported(std::string("config.json: llama ") + key + " = " + it->dump() +
                                  " is not supported (only false)");
    }
  }
  config->qkv_bias = false;
  return Status::Ok();
}

}  // namespace kvserve::runtime
