// Copyright kvserve authors. Loading HF safetensors shards into ModelWeights.
#include "runtime/weights.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace kvserve::runtime {
namespace {

namespace fs = std::filesystem;

class ShardSet {
 public:
  Status Open(const std::string& dir) {
    dir_ = dir;
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::exists(index, ec)) {
      std::ifstream in(index);
      std::stringstream text;
      text << in.rdbuf();
      auto json = nlohmann::json::parse(text.str(), nullptr, false);
      if (json.is_discarded() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
        return Status::Corruption(index.string() + ": no weight_map object");
      }
      for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
        if (!it.value().is_string()) return Status::Corruption(index.string() + ": bad entry");
        const std::string file = it.value().get<std::string>();
        if (file.find('/') != std::string::npos) {
          return Status::Corruption(index.string() + ": shard name '" + file + "' has a '/'");
        }
        files.push_back(file);
      }
    } else if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
      files.push_back("model.safetensors");
    } else {
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".safetensors") files.push_back(entry.path().filename());
      }
      if (ec) return Status::NotFound(dir + ": cannot list directory: " + ec.message());
    }
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    if (files.empty()) return Status::NotFound(dir + ": no *.safetensors files");
    for (const std::string& f : files) {
      KVSERVE_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open((fs::path(dir) / f).string()));
      for (const std::string& name : shard->Names()) by_name_.emplace(name, shard.get());
      shards_.push_back(std::move(shard));
    }
    return Status::Ok();
  }

  bool Contains(const std::string& name) const { return by_name_.count(name) != 0; }

  // Converts tensor `name` (expected `shape`) to f32 at `out`.
  Status Read(const std::string& name, std::vector<int64_t> shape, float* out) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return Status::NotFound(dir_ + ": missing tensor '" + name + "'");
    }
    const SafetensorsFile& file = *it->second;
    KVSERVE_ASSIGN_OR_RETURN(TensorSlice slice, file.Find(name));
    auto dtype = ToKvDType(slice.dtype);
    if (!dtype.ok()) {
      return Status::Corruption(file.path() + ": tensor '" + name + "' has dtype " +
                                std::string(SafetensorsDTypeName(slice.dtype)) +
                                "; weights must be F32, F16 or BF16");
    }
    if (slice.shape != shape) {
      auto text = [](const std::vector<int64_t>& s) {
        std::string t = "[";
        for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
        return t + "]";
      };
      return Status::Corruption(file.path() + ": tensor '" + name + "' has shape " +
                                text(slice.shape) + ", config.json implies " + text(shape));
    }
    const size_t n = static_cast<size_t>(slice.NumElements());
    const size_t size = DTypeSize(*dtype);
    for (size_t i = 0; i < n; ++i) out[i] = LoadAsFloat(slice.data.data() + i * size, *dtype);
    return Status::Ok();
  }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsFile*> by_name_;
};

}  // namespace

Result<ModelWeights> LoadWeights(const std::string& dir, const ModelConfig& c) {
  ShardSet shards;
  KVSERVE_RETURN_IF_ERROR(shards.Open(dir));
  const int64_t d = c.hidden_size, q = int64_t{c.heads} * c.head_dim,
                kv = int64_t{c.kv_heads} * c.head_dim, inter = c.intermediate_size;
  ModelWeights w;
  w.embed.resize(c.vocab_size * d);
  KVSERVE_RETURN_IF_ERROR(shards.Read("model.embed_tokens.weight", {c.vocab_size, d}, w.embed.data()));
  w.final_norm.resize(d);
  KVSERVE_RETURN_IF_ERROR(shards.Read("model.norm.weight", {d}, w.final_norm.data()));
  if (!c.tie_word_embeddings) {
    w.lm_head.resize(c.vocab_size * d);
    KVSERVE_RETURN_IF_ERROR(shards.Read("lm_head.weight", {c.vocab_size, d}, w.lm_head.data()));
  }
  w.layers.resize(c.layers);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    L.input_norm.resize(d);
    L.post_norm.resize(d);
    KVSERVE_RETURN_IF_ERROR(shards.Read(p + "input_layernorm.weight", {d}, L.input_norm.data()));
    KVSERVE_RETURN_IF_ERROR(
        shards.Read(p + "post_attention_layernorm.weight", {d}, L.post_norm.data()));
    L.qkv.resize((q + 2 * kv) * d);
    KVSERVE_RETURN_IF_ERROR(shards.Read(p + "self_attn.q_proj.weight", {q, d}, L.qkv.data()));
    KVSERVE_RETURN_IF_ERROR(
        shards.Read(p + "self_attn.k_proj.weight", {kv, d}, L.qkv.data() + q * d));
    KVSERVE_RETURN_IF_ERROR(
        shards.Read(p + "self_attn.v_proj.weight", {kv, d}, L.qkv.data() + (q + kv) * d));
    if (c.qkv_bias) {
      L.qkv_bias.resize(q + 2 * kv);
      KVSERVE_RETURN_IF_ERROR(shards.Read(p + "self_attn.q_proj.bias", {q}, L.qkv_bias.data()));
      KVSERVE_RETURN_IF_ERROR(
          shards.Read(p + "self_attn.k_proj.bias", {kv}, L.qkv_bias.data() + q));
      KVSERVE_RETURN_IF_ERROR(
          shards.Read(p + "self_attn.v_proj.bias", {kv}, L.qkv_bias.data() + q + kv));
    } else {
      for (const char* b : {"q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias"}) {
        if (shards.Contains(p + "self_attn." + b)) {
          return Status::NotSupported(dir + ": tensor '" + p + "self_attn." + b +
                                      "' present but the config has no attention bias");
        }
      }
    }
    L.o.resize(d * q);
    KVSERVE_RETURN_IF_ERROR(shards.Read(p + "self_attn.o_proj.weight", {d, q}, L.o.data()));
    L.gate_up.resize(2 * inter * d);
    KVSERVE_RETURN_IF_ERROR(shards.Read(p + "mlp.gate_proj.weight", {inter, d}, L.gate_up.data()));
    KVSERVE_RETURN_IF_ERROR(
        shards.Read(p + "mlp.up_proj.weight", {inter, d}, L.gate_up.data() + inter * d));
    L.down.resize(d * inter);
    KVSERVE_RETURN_IF_ERROR(shards.Read(p + "mlp.down_proj.weight", {d, inter}, L.down.data()));
  }
  return w;
}

}  // namespace kvserve::runtime
