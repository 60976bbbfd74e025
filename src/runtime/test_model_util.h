// Copyright kvserve authors. Test helper: writes a random-weight model
// directory (config.json + model.safetensors) with kvserve's own writer, so
// runtime tests need no Python.
#ifndef KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
#define KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kvserve/kv.h"

namespace kvserve::testing {

struct TinyModelSpec {
  std::string family = "llama";  // or "qwen2"
  int vocab = 97, hidden = 48, intermediate = 80, layers = 2, heads = 6, kv_heads = 2;
  double rope_theta = 10000.0;
  bool tie = false;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  uint64_t seed = 1;
};

inline nlohmann::json TinyConfigJson(const TinyModelSpec& s) {
  nlohmann::json c;
  c["architectures"] = {s.family == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  c["model_type"] = s.family;
  c["vocab_size"] = s.vocab;
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["rope_theta"] = s.rope_theta;
  c["rms_norm_eps"] = 1e-6;
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = s.tie;
  c["rope_scaling"] = nullptr;
  c["eos_token_id"] = s.vocab - 1;
  c["bos_token_id"] = 0;
  c["torch_dtype"] = "float32";
  if (s.family == "qwen2") {
    c["use_sliding_window"] = false;
    c["sliding_window"] = 4096;
    c["max_window_layers"] = s.layers;
  }
  return c;
}

// Writes `dir`/config.json and `dir`/model.safetensors. Returns false on I/O
// failure.
inline bool WriteTinyModel(const std::string& dir, const TinyModelSpec& s) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(std::filesystem::path(dir) / "config.json");
    out << TinyConfigJson(s).dump(2);
    if (!out) return false;
  }
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hd = s.hidden / s.heads;
  struct T {
    std::string name;
    std::vector<int64_t> shape;
    float scale, offset;
  };
  std::vector<T> specs = {{"model.embed_tokens.weight", {s.vocab, s.hidden}, 1.0f, 0},
                          {"model.norm.weight", {s.hidden}, 0.1f, 1.0f}};
  if (!s.tie) specs.push_back({"lm_head.weight", {s.vocab, s.hidden}, 0.2f, 0});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const float w = 1.0f / std::sqrt(static_cast<float>(s.hidden));
    specs.push_back({p + "input_layernorm.weight", {s.hidden}, 0.1f, 1.0f});
    specs.push_back({p + "post_attention_layernorm.weight", {s.hidden}, 0.1f, 1.0f});
    specs.push_back({p + "self_attn.q_proj.weight", {s.heads * hd, s.hidden}, w, 0});
    specs.push_back({p + "self_attn.k_proj.weight", {s.kv_heads * hd, s.hidden}, w, 0});
    specs.push_back({p + "self_attn.v_proj.weight", {s.kv_heads * hd, s.hidden}, w, 0});
    if (s.family == "qwen2") {
      specs.push_back({p + "self_attn.q_proj.bias", {s.heads * hd}, 0.1f, 0});
      specs.push_back({p + "self_attn.k_proj.bias", {s.kv_heads * hd}, 0.1f, 0});
      specs.push_back({p + "self_attn.v_proj.bias", {s.kv_heads * hd}, 0.1f, 0});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {s.hidden, s.heads * hd}, w, 0});
    specs.push_back({p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}, w, 0});
    specs.push_back({p + "mlp.up_proj.weight", {s.intermediate, s.hidden}, w, 0});
    specs.push_back({p + "mlp.down_proj.weight", {s.hidden, s.intermediate},
                     1.0f / std::sqrt(static_cast<float>(s.intermediate)), 0});
  }
  std::vector<std::vector<std::byte>> buffers;
  buffers.reserve(specs.size());  // spans into buffers must stay valid
  std::vector<TensorToWrite> tensors;
  const size_t esize = SafetensorsDTypeSize(s.dtype);
  for (const T& t : specs) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<std::byte> bytes(n * esize);
    for (int64_t i = 0; i < n; ++i) {
      const float v = t.offset + t.scale * normal(rng);
      if (s.dtype == SafetensorsDType::kF32) {
        StoreFromFloat(v, bytes.data() + i * 4, DType::kF32);
      } else if (s.dtype == SafetensorsDType::kF16) {
        StoreFromFloat(v, bytes.data() + i * 2, DType::kF16);
      } else {
        StoreFromFloat(v, bytes.data() + i * 2, DType::kBF16);
      }
    }
    buffers.push_back(std::move(bytes));
    tensors.push_back({t.name, s.dtype, t.shape, buffers.back()});
  }
  return WriteSafetensors((std::filesystem::path(dir) / "model.safetensors").string(), tensors)
      .ok();
}

// A fresh directory under the system temp dir.
inline std::string TempDir(const std::string& tag) {
  static std::mt19937_64 rng(std::random_device{}());
  auto dir = std::filesystem::temp_directory_path() /
             ("kvserve_" + tag + "_" + std::to_string(rng() % 1000000000));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace kvserve::testing

#endif  // KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
