// Copyright kvserve authors. The seeded input of the golden frames in
// tests/fuzz/corpus/frame/: shared by the corpus writer and the test that
// checks today's encoder still writes those exact bytes.
#ifndef KVSERVE_TESTS_GOLDEN_CACHE_H_
#define KVSERVE_TESTS_GOLDEN_CACHE_H_

#include <random>

#include "kvserve/codec.h"
#include "kvserve/kv.h"

namespace kvserve::testing {

// 2 layers, 2 heads, 300 tokens, head_dim 32, bf16; Gaussian values with a
// few outliers. 300 tokens give KIVI presets both a coded and a raw region.
inline KvCache MakeGoldenCache() {
  KvShape shape{2, 2, 300, 32};
  KvCache kv(DType::kBF16, shape);
  std::mt19937 rng(20261130);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < shape.NumElements(); ++i)
    StoreFromFloat(normal(rng) * (i % 17 == 0 ? 6.f : 1.f), kv.bytes() + 2 * i, DType::kBF16);
  return kv;
}

inline HeadScores GoldenHeadScores() {
  HeadScores scores;
  scores.layers = 2;
  scores.kv_heads = 2;
  scores.scores = {0.9f, 0.1f, 0.4f, 0.7f};
  return scores;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_GOLDEN_CACHE_H_
