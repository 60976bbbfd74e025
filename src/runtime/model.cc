// Copyright kvserve authors. Model loading and the decoder forward pass shared
// by the Llama and Qwen2 families (they differ only in config keys and the
// q/k/v bias, handled in llama_family.cc / qwen2_family.cc / weights.cc).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "core/thread_pool.h"
#include "kvserve/runtime.h"
#include "runtime/attention.h"
#include "runtime/blas.h"
#include "runtime/weights.h"

namespace kvserve {

struct Model::Impl {
  ModelConfig config;
  runtime::ModelWeights weights;
  std::unique_ptr<ThreadPool> pool;
  std::vector<float> inv_freq;  // [head_dim / 2]

  Status Forward(KvState* kv, std::span<const int32_t> tokens, const LayerReadyCallback* on_ready,
                 bool all_logits, StreamingProbe* probe, std::vector<float>* logits) const;
};

namespace {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, as HF LlamaRMSNorm.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out,
             ThreadPool& pool) {
  pool.ParallelFor(rows, [&](size_t t) {
    const float* xr = x + t * dim;
    float* o = out + t * dim;
    double sum = 0;
    for (int i = 0; i < dim; ++i) sum += double(xr[i]) * xr[i];
    const float variance = static_cast<float>(sum / dim);
    const float inv = 1.0f / std::sqrt(variance + eps);
    for (int i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  });
}

// HF rotate_half RoPE on `heads` heads of one row at position `pos`.
void ApplyRope(float* row, int heads, int head_dim, int pos, const std::vector<float>& inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* x = row + h * head_dim;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->config; }

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const RuntimeOptions& options) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  KVSERVE_ASSIGN_OR_RETURN(std::string text, ReadText(config_path));
  auto config = ParseModelConfig(text);
  if (!config.ok()) return config.status().WithContext(config_path);
  const std::string generation_path =
      (std::filesystem::path(dir) / "generation_config.json").string();
  if (std::error_code ec; std::filesystem::exists(generation_path, ec)) {
    KVSERVE_ASSIGN_OR_RETURN(std::string generation, ReadText(generation_path));
    if (Status s = ApplyGenerationConfig(generation, &*config); !s.ok()) {
      return s.WithContext(generation_path);
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->config = *config;
  KVSERVE_ASSIGN_OR_RETURN(impl->weights, runtime::LoadWeights(dir, impl->config));
  impl->pool = std::make_unique<ThreadPool>(options.threads);
  const int half = impl->config.head_dim / 2;
  impl->inv_freq.resize(half);
  for (int i = 0; i < half; ++i) {
    // float32 arithmetic, as HF computes inv_freq.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(impl->config.head_dim);
    impl->inv_freq[i] =
        1.0f / std::pow(static_cast<float>(impl->config.rope_theta), exponent);
  }
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

Status Model::Impl::Forward(KvState* kv, std::span<const int32_t> tokens,
                            const LayerReadyCallback* on_ready, bool all_logits,
                            StreamingProbe* probe, std::vector<float>* logits) const {
  const ModelConfig& c = config;
  if (tokens.empty()) return Status::InvalidArgument("forward: no tokens");
  if (kv->layers() != c.layers || kv->kv_heads() != c.kv_heads || kv->head_dim() != c.head_dim) {
    return Status::InvalidArgument("forward: KV state shape does not match the model");
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return Status::InvalidArgument("forward: token " + std::to_string(id) + " outside [0, " +
                                     std::to_string(c.vocab_size) + ")");
    }
  }
  const int T = static_cast<int>(tokens.size());
  const int past = kv->tokens();
  const int D = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  const int q_dim = c.heads * hd, kv_dim = c.kv_heads * hd, qkv_dim = q_dim + 2 * kv_dim;
  kv->AppendTokens(tokens);

  std::vector<float> x(static_cast<size_t>(T) * D), h(x.size());
  std::vector<float> qkv(static_cast<size_t>(T) * qkv_dim), attn(static_cast<size_t>(T) * q_dim);
  std::vector<float> gate_up(static_cast<size_t>(T) * 2 * I), act(static_cast<size_t>(T) * I);
  for (int t = 0; t < T; ++t) {
    std::copy_n(weights.embed.data() + static_cast<size_t>(tokens[t]) * D, D,
                x.data() + static_cast<size_t>(t) * D);
  }
  for (int l = 0; l < c.layers; ++l) {
    const runtime::LayerWeights& L = weights.layers[l];
    RmsNorm(x.data(), L.input_norm.data(), T, D, c.rms_norm_eps, h.data(), *pool);
    runtime::MatMulTransB(T, qkv_dim, D, h.data(), D, L.qkv.data(), D, qkv.data(), qkv_dim, false);
    pool->ParallelFor(T, [&](size_t t) {
      float* row = qkv.data() + t * qkv_dim;
      if (!L.qkv_bias.empty()) {
        for (int i = 0; i < qkv_dim; ++i) row[i] += L.qkv_bias[i];
      }
      // RoPE on q and k (contiguous in the row), then scatter k, v to the cache.
      ApplyRope(row, c.heads + c.kv_heads, hd, past + static_cast<int>(t), inv_freq);
      for (int g = 0; g < c.kv_heads; ++g) {
        std::copy_n(row + q_dim + g * hd, hd, kv->head_data(l, 0, g) + (past + t) * hd);
        std::copy_n(row + q_dim + kv_dim + g * hd, hd, kv->head_data(l, 1, g) + (past + t) * hd);
      }
    });
    if (on_ready != nullptr && *on_ready) (*on_ready)(l, kv->layer_view(l));

    runtime::AttentionArgs args;
    args.q = qkv.data();
    args.q_stride = qkv_dim;
    args.tokens = T;
    args.past = past;
    args.heads = c.heads;
    args.kv_heads = c.kv_heads;
    args.head_dim = hd;
    args.kv = kv;
    args.layer = l;
    args.out = attn.data();
    args.out_stride = q_dim;
    args.probe = probe;
    runtime::Attention(args, *pool);
    runtime::MatMulTransB(T, D, q_dim, attn.data(), q_dim, L.o.data(), q_dim, x.data(), D,
                          /*accumulate=*/true);

    RmsNorm(x.data(), L.post_norm.data(), T, D, c.rms_norm_eps, h.data(), *pool);
    runtime::MatMulTransB(T, 2 * I, D, h.data(), D, L.gate_up.data(), D, gate_up.data(), 2 * I,
                          false);
    pool->ParallelFor(T, [&](size_t t) {
      const float* gate = gate_up.data() + t * 2 * I;
      const float* up = gate + I;
      float* a = act.data() + t * I;
      for (int i = 0; i < I; ++i) a[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    });
    runtime::MatMulTransB(T, D, I, act.data(), I, L.down.data(), I, x.data(), D,
                          /*accumulate=*/true);
  }
  if (logits != nullptr) {
    const int first = all_logits ? 0 : T - 1;
    const int rows = T - first;
    RmsNorm(x.data() + static_cast<size_t>(first) * D, weights.final_norm.data(), rows, D,
            c.rms_norm_eps, h.data(), *pool);
    logits->resize(static_cast<size_t>(rows) * c.vocab_size);
    runtime::MatMulTransB(rows, c.vocab_size, D, h.data(), D, weights.lm_head_data(), D,
                          logits->data(), c.vocab_size, false);
  }
  return Status::Ok();
}

Result<PrefillResult> Model::Prefill(std::span<const int32_t> tokens,
                                     const PrefillOptions& options) const {
  PrefillResult result;
  result.kv = KvState(impl_->config.layers, impl_->config.kv_heads, impl_->config.head_dim);
  result.kv.Reserve(static_cast<int>(tokens.size()));
  KVSERVE_RETURN_IF_ERROR(impl_->Forward(&result.kv, tokens, &options.on_layer_ready,
                                         options.all_logits, nullptr, &result.logits));
  const size_t vocab = impl_->config.vocab_size;
  result.kv.set_last_logits(
      std::vector<float>(result.logits.end() - vocab, result.logits.end()));
  return result;
}

Result<PrefillResult> Model::PrefillWithProbe(std::span<const int32_t> tokens,
                                              StreamingProbe* probe) const {
  const size_t cells = static_cast<size_t>(impl_->config.layers) * impl_->config.kv_heads;
  if (probe->change_sum.size() != cells) probe->change_sum.assign(cells, 0.0);
  if (probe->rows.size() != cells) probe->rows.assign(cells, 0.0);
  PrefillResult result;
  result.kv = KvState(impl_->config.layers, impl_->config.kv_heads, impl_->config.head_dim);
  result.kv.Reserve(static_cast<int>(tokens.size()));
  KVSERVE_RETURN_IF_ERROR(
      impl_->Forward(&result.kv, tokens, nullptr, false, probe, &result.logits));
  return result;
}

Result<std::vector<float>> Model::Decode(KvState* kv, std::span<const int32_t> tokens,
                                         bool all_logits) const {
  std::vector<float> logits;
  const int before = kv->tokens();
  Status s = impl_->Forward(kv, tokens, nullptr, all_logits, nullptr, &logits);
  if (!s.ok()) {
    if (kv->tokens() != before) (void)kv->Truncate(before);
    return s;
  }
  const size_t vocab = impl_->config.vocab_size;
  kv->set_last_logits(std::vector<float>(logits.end() - vocab, logits.end()));
  return logits;
}

}  // namespace kvserve
