// Copyright kvserve authors. Model weights in fp32, fused for big GEMMs, and
// their loading from HF safetensors shards.
#ifndef KVSERVE_RUNTIME_WEIGHTS_H_
#define KVSERVE_RUNTIME_WEIGHTS_H_

#include <string>
#include <vector>

#include "kvserve/runtime.h"

namespace kvserve::runtime {

struct LayerWeights {
  std::vector<float> input_norm;  // [D]
  std::vector<float> post_norm;   // [D]
  std::vector<float> qkv;         // [(Hq + 2 Hkv) * hd][D]: q rows, then k, then v
  std::vector<float> qkv_bias;    // [(Hq + 2 Hkv) * hd], empty without bias
  std::vector<float> o;           // [D][Hq * hd]
  std::vector<float> gate_up;     // [2 I][D]: gate rows, then up
  std::vector<float> down;        // [D][I]
};

struct ModelWeights {
  std::vector<float> embed;       // [V][D]
  std::vector<float> final_norm;  // [D]
  std::vector<float> lm_head;     // [V][D]; empty when tied to embed
  std::vector<LayerWeights> layers;

  const float* lm_head_data() const { return lm_head.empty() ? embed.data() : lm_head.data(); }
};

// Reads every tensor `config` needs from the safetensors shards of `dir`
// (model.safetensors.index.json's weight_map, else model.safetensors, else
// every *.safetensors file). Errors name the file and tensor: NotFound for a
// missing tensor, Corruption for a wrong shape or non-float dtype or a
// malformed shard.
Result<ModelWeights> LoadWeights(const std::string& dir, const ModelConfig& config);

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_WEIGHTS_H_
