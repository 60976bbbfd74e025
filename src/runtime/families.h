// Copyright kvserve authors. Model families: each family file validates the
// config.json keys specific to it and states how its weights are named.
//
// Both supported families use the HF decoder layout
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight,
//   model.layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v bias: Qwen2),
//   model.layers.{i}.mlp.{gate,up,down}_proj.weight.
#ifndef KVSERVE_RUNTIME_FAMILIES_H_
#define KVSERVE_RUNTIME_FAMILIES_H_

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kvserve/runtime.h"

namespace kvserve::runtime {

// Reads the keys every supported family shares (sizes, rope_theta, eps, ...)
// into `config` and records the keys it consumed or knowingly ignores in
// `known`. NotSupported/InvalidArgument on a bad value.
Status ParseCommonConfig(const nlohmann::json& json, ModelConfig* config,
                         std::set<std::string>* known);

// Family-specific parts. Each adds its own keys to `known` and rejects
// options it does not implement.
Status ParseLlamaConfig(const nlohmann::json& json, ModelConfig* config,
                        std::set<std::string>* known);
Status ParseQwen2Config(const nlohmann::json& json, ModelConfig* config,
                        std::set<std::string>* known);

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_FAMILIES_H_
