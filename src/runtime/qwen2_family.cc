// Copyright kvserve authors. The Qwen2 family (Qwen2ForCausalLM, also
// Qwen2.5): as Llama plus a bias on the q/k/v projections. Sliding-window
// attention is not implemented, so a config that enables it is refused.
#include "runtime/families.h"

namespace kvserve::runtime {

Status ParseQwen2Config(const nlohmann::json& json, ModelConfig* config,
                        std::set<std::string>* known) {
  known->insert({"use_sliding_window", "sliding_window", "max_window_layers", "use_mrope"});
  if (auto it = json.find("use_sliding_window"); it != json.end() && *it != false) {
    return Status::NotSupported("config.json: qwen2 use_sliding_window = " + it->dump() +
                                " is not supported (sliding-window attention)");
  }
  if (auto it = json.find("use_mrope"); it != json.end() && *it != false) {
    return Status::NotSupported("config.json: qwen2 use_mrope is not supported");
  }
  // sliding_window / max_window_layers only matter when use_sliding_window is
  // true (HF Qwen2 ignores them otherwise).
  config->qkv_bias = true;
  return Status::Ok();
}

}  // namespace kvserve::runtime
