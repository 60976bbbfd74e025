// Copyright kvserve authors. What the two examples share: the model shape of
// the toy engine, its per-layer "forward" (deterministic values standing in
// for a real prefill's K/V), and a digest of a request's KV in token order.
#ifndef KVSERVE_EXAMPLES_EXAMPLE_KV_H_
#define KVSERVE_EXAMPLES_EXAMPLE_KV_H_

#include <kvserve/kv.h>
#include <kvserve/paged.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace example {

// A Llama-like layer geometry, small enough to run anywhere.
constexpr int kLayers = 8;
constexpr int kKvHeads = 4;
constexpr int kHeadDim = 64;
constexpr kvserve::DType kDType = kvserve::DType::kBF16;

// Writes layer `layer` of a request's K and V into its pages, as an
// engine's attention layer would: element (kind, head, token, dim) gets a
// smooth function of its position (real KV has such structure).
inline void ComputeLayer(const kvserve::MutablePagedKvView& pages, int layer) {
  for (int kind = 0; kind < 2; ++kind)
    for (int h = 0; h < pages.shape.kv_heads; ++h)
      for (int t = 0; t < pages.shape.tokens; ++t)
        for (int d = 0; d < pages.shape.head_dim; ++d) {
          const float x = std::sin(0.01f * t * (d + 1) + layer + 0.5f * h) * (kind ? 0.5f : 2.0f) +
                          (d % 16 == 0 ? 4.0f : 0.0f);
          kvserve::StoreFromFloat(x, pages.At(layer, kind, h, t, d), pages.dtype);
        }
}

// FNV-1a of the request's KV bytes in [layer][kind][head][token][dim]
// order, whatever the pages' layout.
inline uint64_t Digest(const kvserve::PagedKvView& pages) {
  kvserve::KvCache kv(pages.dtype, pages.shape);
  if (!kvserve::CopyFromPages(pages, kv.mutable_view()).ok()) return 0;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < kv.size_bytes(); ++i) {
    h ^= static_cast<uint8_t>(kv.bytes()[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// Per-layer cache tensors of `layout` with room for `num_blocks` blocks.
struct EngineCache {
  std::vector<std::vector<std::byte>> storage;
  std::vector<void*> layer_data;
  kvserve::PagedKvLayers layers;
};

inline kvserve::Result<EngineCache> AllocateCache(kvserve::PagedLayout layout, int num_blocks,
                                                  int block_size) {
  EngineCache cache;
  KVSERVE_ASSIGN_OR_RETURN(
      kvserve::PagedLayerGeometry geometry,
      kvserve::DescribePagedLayout(layout, num_blocks, block_size, kKvHeads, kHeadDim));
  for (int l = 0; l < kLayers; ++l)
    cache.storage.emplace_back(geometry.layer_elements * kvserve::DTypeSize(kDType));
  for (auto& s : cache.storage) cache.layer_data.push_back(s.data());
  KVSERVE_ASSIGN_OR_RETURN(
      cache.layers, kvserve::PagedKvLayers::Create(layout, kDType, cache.layer_data, num_blocks,
                                                   block_size, kKvHeads, kHeadDim));
  return cache;
}

}  // namespace example

#endif  // KVSERVE_EXAMPLES_EXAMPLE_KV_H_
