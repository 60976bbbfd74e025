// Copyright kvserve authors. KvState: the runtime's growable f32 KV cache.
#include <algorithm>
#include <cstring>

#include "kvserve/runtime.h"

namespace kvserve {

KvState::KvState(int layers, int kv_heads, int head_dim)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim) {}

KvView KvState::view() const {
  KvView v;
  v.data = data_.data();
  v.dtype = DType::kF32;
  v.shape = KvShape{layers_, kv_heads_, tokens(), head_dim_};
  v.strides.dim = 1;
  v.strides.token = head_dim_;
  v.strides.head = int64_t{capacity_} * head_dim_;
  v.strides.kind = v.strides.head * kv_heads_;
  v.strides.layer = v.strides.kind * 2;
  return v;
}

MutableKvView KvState::mutable_view() {
  KvView v = view();
  return MutableKvView{data_.data(), v.dtype, v.shape, v.strides};
}

KvView KvState::layer_view(int layer) const {
  KvView v = view();
  v.data = data_.data() + HeadOffset(layer, 0, 0);
  v.shape.layers = 1;
  return v;
}

const float* KvState::head_data(int layer, int kind, int head) const {
  return data_.data() + HeadOffset(layer, kind, head);
}
float* KvState::head_data(int layer, int kind, int head) {
  return data_.data() + HeadOffset(layer, kind, head);
}

void KvState::Reserve(int tokens) {
  if (tokens <= capacity_) return;
  const int new_capacity = std::max(tokens, std::max(64, capacity_ + capacity_ / 2));
  std::vector<float> grown(static_cast<size_t>(layers_) * 2 * kv_heads_ * new_capacity * head_dim_);
  std::vector<uint8_t> grown_keep;
  if (!keep_.empty()) grown_keep.assign(static_cast<size_t>(layers_) * kv_heads_ * new_capacity, 1);
  const size_t used = static_cast<size_t>(this->tokens()) * head_dim_;
  for (int l = 0; l < layers_; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < kv_heads_; ++h) {
        const size_t index = (static_cast<size_t>(l) * 2 + kind) * kv_heads_ + h;
        if (used) {
          std::memcpy(grown.data() + index * new_capacity * head_dim_,
                      data_.data() + index * capacity_ * head_dim_, used * sizeof(float));
        }
      }
      if (!keep_.empty() && kind == 0) {
        for (int h = 0; h < kv_heads_; ++h) {
          const size_t index = static_cast<size_t>(l) * kv_heads_ + h;
          std::memcpy(grown_keep.data() + index * new_capacity, keep_.data() + index * capacity_,
                      this->tokens());
        }
      }
    }
  }
  data_.swap(grown);
  keep_.swap(grown_keep);
  capacity_ = new_capacity;
}

void KvState::AppendTokens(std::span<const int32_t> ids) {
  const int old = tokens();
  Reserve(old + static_cast<int>(ids.size()));
  token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
  if (!keep_.empty()) {
    for (int l = 0; l < layers_; ++l) {
      for (int h = 0; h < kv_heads_; ++h) {
        uint8_t* row = keep_.data() + (static_cast<size_t>(l) * kv_heads_ + h) * capacity_;
        std::fill(row + old, row + tokens(), uint8_t{1});
      }
    }
  }
}

Status KvState::Truncate(int tokens) {
  if (tokens < 0 || tokens > this->tokens()) {
    return Status::InvalidArgument("KvState::Truncate: " + std::to_string(tokens) +
                                   " outside [0, " + std::to_string(this->tokens()) + "]");
  }
  token_ids_.resize(tokens);
  return Status::Ok();
}

Status KvState::SetKeepMask(int layer, int head, std::span<const uint8_t> keep) {
  if (layer < 0 || layer >= layers_ || head < 0 || head >= kv_heads_ ||
      keep.size() != static_cast<size_t>(tokens())) {
    return Status::InvalidArgument("KvState::SetKeepMask: (layer " + std::to_string(layer) +
                                   ", head " + std::to_string(head) + ", " +
                                   std::to_string(keep.size()) + " entries) does not fit " +
                                   std::to_string(layers_) + "x" + std::to_string(kv_heads_) +
                                   "x" + std::to_string(tokens()));
  }
  if (keep_.empty()) keep_.assign(static_cast<size_t>(layers_) * kv_heads_ * capacity_, 1);
  uint8_t* row = keep_.data() + (static_cast<size_t>(layer) * kv_heads_ + head) * capacity_;
  for (size_t t = 0; t < keep.size(); ++t) row[t] = keep[t] ? 1 : 0;
  return Status::Ok();
}

const uint8_t* KvState::keep_mask(int layer, int head) const {
  if (keep_.empty()) return nullptr;
  return keep_.data() + (static_cast<size_t>(layer) * kv_heads_ + head) * capacity_;
}

KvCache KvState::ToCache() const {
  KvCache cache(DType::kF32, view().shape);
  float* out = reinterpret_cast<float*>(cache.bytes());
  const size_t row = static_cast<size_t>(tokens()) * head_dim_;
  for (int l = 0; l < layers_; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < kv_heads_; ++h) {
        if (row) std::memcpy(out, head_data(l, kind, h), row * sizeof(float));
        out += row;
      }
    }
  }
  return cache;
}

Result<KvState> KvState::FromView(const KvView& kv, std::span<const int32_t> token_ids) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  if (token_ids.size() != static_cast<size_t>(kv.shape.tokens)) {
    return Status::InvalidArgument("KvState::FromView: " + std::to_string(token_ids.size()) +
                                   " token ids for " + std::to_string(kv.shape.tokens) +
                                   " KV tokens");
  }
  KvState state(kv.shape.layers, kv.shape.kv_heads, kv.shape.head_dim);
  state.AppendTokens(token_ids);
  for (int l = 0; l < kv.shape.layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < kv.shape.kv_heads; ++h) {
        float* dst = state.head_data(l, kind, h);
        for (int t = 0; t < kv.shape.tokens; ++t) {
          for (int d = 0; d < kv.shape.head_dim; ++d) {
            dst[static_cast<size_t>(t) * kv.shape.head_dim + d] =
                LoadAsFloat(kv.At(l, kind, h, t, d), kv.dtype);
          }
        }
      }
    }
  }
  return state;
}

}  // namespace kvserve
