// Copyright kvserve authors. Random-weight model directories for tests and
// benchmarks, written with kvserve's own safetensors writer.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kvserve/runtime.h"

namespace kvserve {

std::string RandomModelConfigJson(const RandomModelSpec& s) {
  nlohmann::ordered_json c;
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
  c["torch_dtype"] = s.dtype == DType::kF32 ? "float32"
                     : s.dtype == DType::kF16 ? "float16" : "bfloat16";
  if (s.family == "qwen2") {
    c["use_sliding_window"] = false;
    c["sliding_window"] = 4096;
    c["max_window_layers"] = s.layers;
  }
  return c.dump(2);
}

Status WriteRandomModel(const std::string& dir, const RandomModelSpec& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": " + ec.message());
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << RandomModelConfigJson(s);
    if (!out) return Status::IOError(dir + "/config.json: write failed");
  }
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hd = s.hidden / s.heads;
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    float scale, offset;
  };
  const float w = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  std::vector<Spec> specs = {{"model.embed_tokens.weight", {s.vocab, s.hidden}, 1.0f, 0},
                             {"model.norm.weight", {s.hidden}, 0.1f, 1.0f}};
  if (!s.tie) specs.push_back({"lm_head.weight", {s.vocab, s.hidden}, 0.2f, 0});
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
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
  const size_t esize = DTypeSize(s.dtype);
  for (const Spec& t : specs) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<std::byte> bytes(n * esize);
    for (int64_t i = 0; i < n; ++i) {
      StoreFromFloat(t.offset + t.scale * normal(rng), bytes.data() + i * esize, s.dtype);
    }
    buffers.push_back(std::move(bytes));
    tensors.push_back({t.name, FromKvDType(s.dtype), t.shape, buffers.back()});
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors);
}

}  // namespace kvserve
