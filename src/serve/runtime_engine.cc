// Copyright kvserve authors. kvserve's runtime (kvserve::Model) as a serving
// engine (kvserve/engine.h): f32 KV in host memory. A prefill's KV is the
// model's KvState; a received frame is decoded into a KvCache of its dtype,
// and generation imports the frames (concatenated along tokens for a prefix
// hit), hides the tokens a pruning profile dropped, runs the prompt's suffix
// and samples (docs/e2e.md §Decode worker).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kvserve/engine.h"

namespace kvserve {
namespace {

// A prefill's state, or a frame's destination.
class RuntimeKv final : public EngineKv {
 public:
  explicit RuntimeKv(KvState state) : value_(std::move(state)) {}
  explicit RuntimeKv(KvCache cache) : value_(std::move(cache)) {}

  KvShape shape() const override { return View().shape; }
  DType dtype() const override { return View().dtype; }
  DeviceKvSource view() const override { return View(); }
  KvDestination destination() override {
    if (auto* state = std::get_if<KvState>(&value_)) return state->mutable_view();
    return std::get<KvCache>(value_).mutable_view();
  }

 private:
  KvView View() const {
    if (const auto* state = std::get_if<KvState>(&value_)) return state->view();
    return std::get<KvCache>(value_).view();
  }
  std::variant<KvState, KvCache> value_;
};

// The KV of `parts` (host views of equal layers, heads, dims and dtype)
// concatenated along tokens, and their keep masks concatenated per (layer,
// kind, head) into `*keep_mask` (left empty when no part has one).
Result<KvCache> Concatenate(const std::vector<std::unique_ptr<EngineKv>>& parts,
                            const std::vector<std::vector<uint8_t>>& masks, std::vector<uint8_t>* keep_mask) {
  const KvShape first = parts.front()->shape();
  const DType dtype = parts.front()->dtype();
  KvShape shape = first;
  shape.tokens = 0;
  bool any_mask = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const KvShape s = parts[i]->shape();
    if (s.layers != first.layers || s.kv_heads != first.kv_heads || s.head_dim != first.head_dim ||
        parts[i]->dtype() != dtype)
      return Status::InvalidArgument("frame " + std::to_string(i) + " of the request differs in shape or dtype "
                                     "from its first frame");
    shape.tokens += s.tokens;
    any_mask = any_mask || (i < masks.size() && !masks[i].empty());
  }
  KvCache out(dtype, shape);
  MutableKvView dst = out.mutable_view();
  const size_t element = DTypeSize(dtype);
  const size_t slots = static_cast<size_t>(shape.layers) * 2 * shape.kv_heads;
  if (any_mask) keep_mask->assign(slots * shape.tokens, 1);
  int offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const KvView src = std::get<KvView>(parts[i]->view());
    const int tokens = src.shape.tokens;
    const bool rows = src.strides.dim == 1;
    for (int l = 0; l < shape.layers; ++l)
      for (int kind = 0; kind < 2; ++kind)
        for (int h = 0; h < shape.kv_heads; ++h) {
          for (int t = 0; t < tokens; ++t) {
            if (rows) {
              std::memcpy(dst.At(l, kind, h, offset + t, 0), src.At(l, kind, h, t, 0), shape.head_dim * element);
            } else {
              for (int d = 0; d < shape.head_dim; ++d)
                std::memcpy(dst.At(l, kind, h, offset + t, d), src.At(l, kind, h, t, d), element);
            }
          }
          if (i >= masks.size() || masks[i].empty()) continue;
          const size_t slot = (static_cast<size_t>(l) * 2 + kind) * shape.kv_heads + h;
          std::copy_n(masks[i].begin() + slot * tokens, tokens, keep_mask->begin() + slot * shape.tokens + offset);
        }
    offset += tokens;
  }
  return out;
}

class RuntimeEngine final : public ServingEngine {
 public:
  explicit RuntimeEngine(const Model* model) : model_(model) {
    const ModelConfig& c = model->config();
    info_.name = "kvserve runtime";
    info_.layers = c.layers;
    info_.kv_heads = c.kv_heads;
    info_.head_dim = c.head_dim;
    info_.vocab_size = c.vocab_size;
    info_.kv_dtype = DType::kF32;
    info_.device = -1;
  }

  const EngineInfo& info() const override { return info_; }

  Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) override {
    PrefillOptions options;
    options.on_layer_ready = on_layer;
    KVSERVE_ASSIGN_OR_RETURN(PrefillResult result, model_->Prefill(prompt, options));
    EnginePrefill out;
    out.last_logits = std::move(result.logits);
    out.kv = std::make_unique<RuntimeKv>(std::move(result.kv));
    return out;
  }

  Result<std::unique_ptr<EngineKv>> AllocateKv(const KvShape& shape, DType dtype) override {
    // KvCache memory comes from calloc: the OS commits its pages as records
    // are decoded into it, so a header alone costs only its own bytes.
    return std::unique_ptr<EngineKv>(std::make_unique<RuntimeKv>(KvCache(dtype, shape)));
  }

  Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                const std::vector<std::vector<uint8_t>>& keep_masks,
                                const EngineGenerate& request) override {
    if (parts.empty()) return Status::InvalidArgument("generate needs the request's KV");
    const double start = MonotonicSeconds();
    std::vector<uint8_t> joined_mask;
    KvCache joined;
    KvView kv_view = std::get<KvView>(parts.front()->view());
    const std::vector<uint8_t>* keep_mask = keep_masks.empty() ? nullptr : &keep_masks.front();
    if (parts.size() > 1) {
      KVSERVE_ASSIGN_OR_RETURN(joined, Concatenate(parts, keep_masks, &joined_mask));
      kv_view = joined.view();
      keep_mask = &joined_mask;
    }
    auto kv = KvState::FromView(kv_view, request.prompt);
    if (!kv.ok()) return kv.status().WithContext("importing the KV");
    parts.clear();  // the state holds its own copy
    if (keep_mask != nullptr && std::find(keep_mask->begin(), keep_mask->end(), 0) != keep_mask->end()) {
      // Pruned tokens (duo): hide them from attention, per head ([layer][K][head][token]).
      const KvShape shape = kv_view.shape;
      for (int l = 0; l < shape.layers; ++l)
        for (int h = 0; h < shape.kv_heads; ++h) {
          const size_t offset = ((static_cast<size_t>(l) * 2) * shape.kv_heads + h) * shape.tokens;
          KVSERVE_RETURN_IF_ERROR(
              kv->SetKeepMask(l, h, std::span<const uint8_t>(*keep_mask).subspan(offset, shape.tokens)));
        }
    }
    std::vector<float> logits = request.last_logits;
    if (!request.suffix.empty()) {
      auto suffix_logits = model_->Decode(&*kv, request.suffix);
      if (!suffix_logits.ok()) return suffix_logits.status().WithContext("running the prompt suffix");
      logits = std::move(*suffix_logits);
    }
    if (logits.size() != static_cast<size_t>(info_.vocab_size))
      return Status::InvalidArgument("generate message carries " + std::to_string(logits.size()) +
                                     " logits, the model has a vocabulary of " + std::to_string(info_.vocab_size));
    EngineTokens out;
    out.first_token_seconds = MonotonicSeconds() - start;
    Sampler sampler(request.sampling);
    KVSERVE_ASSIGN_OR_RETURN(out.tokens, kvserve::Generate(*model_, &*kv, logits, request.max_new_tokens, &sampler,
                                                           request.stop_at_eos));
    return out;
  }

 private:
  const Model* model_;
  EngineInfo info_;
};

}  // namespace

std::unique_ptr<ServingEngine> NewRuntimeEngine(const Model* model) {
  return std::make_unique<RuntimeEngine>(model);
}

}  // namespace kvserve
