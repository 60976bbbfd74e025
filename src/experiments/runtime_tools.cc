// Copyright kvserve authors. experiments/runtime_tools.h.
#include "experiments/runtime_tools.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve::lab {

KvCache ConvertKv(const KvView& kv, DType dtype) {
  KvCache out(dtype, kv.shape);
  MutableKvView dst = out.mutable_view();
  for (int l = 0; l < kv.shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < kv.shape.kv_heads; ++h)
        for (int t = 0; t < kv.shape.tokens; ++t)
          for (int d = 0; d < kv.shape.head_dim; ++d)
            StoreFromFloat(LoadAsFloat(kv.At(l, k, h, t, d), kv.dtype), dst.At(l, k, h, t, d),
                           dtype);
  return out;
}

std::string JoinIds(std::span<const int32_t> ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

KvFileMetadata KvDumpMetadata(const std::string& model_dir, const ModelConfig& c,
                              std::span<const int32_t> tokens) {
  return {
      {"source", "kvserve kv-dump"},
      {"model", model_dir},
      {"model_family", c.family == ModelFamily::kQwen2 ? "qwen2" : "llama"},
      {"rope_theta", fmt::format("{}", c.rope_theta)},
      {"synthetic", "false"},
      {"token_ids", JoinIds(tokens)},
  };
}

std::vector<std::vector<int32_t>> TokenWindows(std::span<const int32_t> tokens, int count,
                                               int window) {
  std::vector<std::vector<int32_t>> out;
  const size_t step = static_cast<size_t>(std::max(1, window));
  for (size_t begin = 0; begin < tokens.size() && static_cast<int>(out.size()) < count;
       begin += step) {
    const size_t end = std::min(tokens.size(), begin + step);
    out.emplace_back(tokens.begin() + begin, tokens.begin() + end);
  }
  return out;
}

}  // namespace kvserve::lab
