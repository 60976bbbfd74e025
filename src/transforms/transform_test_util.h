// Copyright kvserve authors. Seeded random chunks for the transform tests.
#ifndef KVSERVE_TRANSFORMS_TRANSFORM_TEST_UTIL_H_
#define KVSERVE_TRANSFORMS_TRANSFORM_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/stages.h"

namespace kvserve::transforms::testing {

// An owned chunk: a ChunkTensor over a vector.
struct Chunk {
  std::vector<float> values;
  pipeline::ChunkInfo info;
  pipeline::ChunkTensor tensor() { return {values.data(), info.kv_heads, info.tokens, info.head_dim}; }
  std::string Describe() const {
    return "heads=" + std::to_string(info.kv_heads) + " tokens=" + std::to_string(info.tokens) +
           " dim=" + std::to_string(info.head_dim) + " layer=" + std::to_string(info.layer) +
           " kind=" + std::to_string(static_cast<int>(info.kind));
  }
};

// KV-like values: per-channel bias and spread, a few outlier channels with
// 20-100x larger magnitude (as in K caches), smooth drift along tokens.
inline Chunk RandomChunk(std::mt19937_64& rng, int heads, int tokens, int dim) {
  Chunk c;
  c.info.layer = static_cast<int>(rng() % 32);
  c.info.num_layers = 32;
  c.info.kind = (rng() & 1) ? KvKind::kValue : KvKind::kKey;
  c.info.kv_heads = heads;
  c.info.head_dim = dim;
  c.info.tokens = tokens;
  c.info.total_tokens = tokens;
  c.values.resize(static_cast<size_t>(heads) * tokens * dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int h = 0; h < heads; ++h) {
    std::vector<float> bias(dim), spread(dim);
    for (int i = 0; i < dim; ++i) {
      bias[i] = normal(rng) * 0.5f;
      spread[i] = 0.2f + uniform(rng);
      if (uniform(rng) < 0.05f) spread[i] *= 20.0f + 80.0f * uniform(rng);  // outlier channel
    }
    std::vector<float> state(dim);
    for (int i = 0; i < dim; ++i) state[i] = normal(rng);
    for (int t = 0; t < tokens; ++t) {
      float* row = c.values.data() + (static_cast<size_t>(h) * tokens + t) * dim;
      for (int i = 0; i < dim; ++i) {
        state[i] = 0.9f * state[i] + 0.44f * normal(rng);
        row[i] = bias[i] + spread[i] * state[i];
      }
    }
  }
  return c;
}

// A chunk of random shape: heads 1..8, tokens 1..300, dim from `dims`.
inline Chunk RandomShapeChunk(std::mt19937_64& rng, const std::vector<int>& dims) {
  const int heads = 1 + static_cast<int>(rng() % 8);
  const int tokens = 1 + static_cast<int>(rng() % 300);
  const int dim = dims[rng() % dims.size()];
  return RandomChunk(rng, heads, tokens, dim);
}

inline float MaxAbs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::vector<int> PowerOfTwoDims() { return {16, 32, 64, 128}; }
inline std::vector<int> AnyDims() { return {1, 3, 16, 24, 32, 48, 64, 80, 96, 112, 128}; }

}  // namespace kvserve::transforms::testing

#endif  // KVSERVE_TRANSFORMS_TRANSFORM_TEST_UTIL_H_
