// Copyright kvserve authors. Test fixture: an engine's per-layer paged caches
// in one layout with a seeded random cache inside and a random block table.
// Shared by the pipeline, connector and Python-facing tests.
#ifndef KVSERVE_PIPELINE_PAGED_TEST_UTIL_H_
#define KVSERVE_PIPELINE_PAGED_TEST_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/paged.h"

namespace kvserve::testing {

// `layers` cache tensors of `num_blocks` blocks, every byte first set to
// 0x5A (so a test sees which slots were written), and a request of
// shape.tokens tokens in distinct blocks drawn at random.
struct PagedTestCache {
  PagedLayout layout = PagedLayout::kVllm;
  DType dtype = DType::kBF16;
  KvShape shape;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  std::vector<std::vector<std::byte>> layer_storage;
  std::vector<void*> layer_data;
  std::vector<int32_t> block_table;
  PagedKvLayers layers;

  PagedKvView view() const { return *layers.View(block_table, shape.tokens); }
  MutablePagedKvView mutable_view() const { return *layers.MutableView(block_table, shape.tokens); }
};

inline PagedTestCache MakePagedCache(std::mt19937& rng, PagedLayout layout, DType dtype,
                                     const KvShape& shape, int32_t block_size,
                                     int32_t spare_blocks = 5) {
  PagedTestCache c;
  c.layout = layout;
  c.dtype = dtype;
  c.shape = shape;
  c.block_size = block_size;
  const int32_t needed = (shape.tokens + block_size - 1) / block_size;
  c.num_blocks = needed + spare_blocks;
  const PagedLayerGeometry g =
      *DescribePagedLayout(layout, c.num_blocks, block_size, shape.kv_heads, shape.head_dim);
  for (int l = 0; l < shape.layers; ++l) {
    c.layer_storage.emplace_back(static_cast<size_t>(g.layer_elements) * DTypeSize(dtype),
                                 std::byte{0x5A});
  }
  for (auto& s : c.layer_storage) c.layer_data.push_back(s.data());
  std::vector<int32_t> blocks(c.num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  c.block_table.assign(blocks.begin(), blocks.begin() + needed);
  c.layers = *PagedKvLayers::Create(layout, dtype, c.layer_data, c.num_blocks, block_size,
                                    shape.kv_heads, shape.head_dim);
  return c;
}

// Fills `v` (any strides) with seeded KV values with channel offsets,
// outlier channels and token correlation (what the quantizers are built for).
inline void FillRandomKv(std::mt19937& rng, const MutableKvView& v) {
  const KvShape& shape = v.shape;
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int l = 0; l < shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < shape.kv_heads; ++h) {
        std::vector<float> mean(shape.head_dim), scale(shape.head_dim), prev(shape.head_dim, 0.f);
        for (int d = 0; d < shape.head_dim; ++d) {
          mean[d] = k == 0 ? normal(rng) * 2.f : 0.f;
          scale[d] = (rng() % 16 == 0) ? 8.f : 1.f;
        }
        for (int t = 0; t < shape.tokens; ++t)
          for (int d = 0; d < shape.head_dim; ++d) {
            prev[d] = 0.7f * prev[d] + 0.3f * normal(rng);
            StoreFromFloat(mean[d] + scale[d] * prev[d], v.At(l, k, h, t, d), v.dtype);
          }
      }
}

// FillRandomKv into a new contiguous cache.
inline KvCache RandomKv(std::mt19937& rng, const KvShape& shape, DType dtype) {
  KvCache kv(dtype, shape);
  FillRandomKv(rng, kv.mutable_view());
  return kv;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_PIPELINE_PAGED_TEST_UTIL_H_
