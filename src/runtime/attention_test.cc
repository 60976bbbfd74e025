#include "runtime/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kvserve::runtime {
namespace {

// Double-precision reference for one (query row, head).
std::vector<double> NaiveAttention(const AttentionArgs& a, int t, int h) {
  const int g = h / (a.heads / a.kv_heads);
  const float* q = a.q + t * a.q_stride + h * a.head_dim;
  const float* k = a.kv->head_data(a.layer, 0, g);
  const float* v = a.kv->head_data(a.layer, 1, g);
  const uint8_t* keep = a.kv->keep_mask(a.layer, g);
  const int limit = a.past + t + 1;
  std::vector<double> s(limit, -INFINITY);
  double m = -INFINITY;
  for (int j = 0; j < limit; ++j) {
    if (keep && !keep[j]) continue;
    double dot = 0;
    for (int d = 0; d < a.head_dim; ++d) dot += double(q[d]) * k[j * a.head_dim + d];
    s[j] = dot / std::sqrt(double(a.head_dim));
    m = std::max(m, s[j]);
  }
  double z = 0;
  for (int j = 0; j < limit; ++j) z += std::isinf(s[j]) ? 0 : std::exp(s[j] - m);
  std::vector<double> out(a.head_dim, 0);
  for (int j = 0; j < limit; ++j) {
    if (std::isinf(s[j])) continue;
    const double p = std::exp(s[j] - m) / z;
    for (int d = 0; d < a.head_dim; ++d) out[d] += p * v[j * a.head_dim + d];
  }
  return out;
}

TEST(AttentionTest, MatchesNaiveWithCausalAndKeepMasks) {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal;
  ThreadPool pool(2);
  for (int trial = 0; trial < 24; ++trial) {
    const int kv_heads = 1 + rng() % 3, group = 1 + rng() % 3, dim = 4 * (1 + rng() % 4);
    const int heads = kv_heads * group;
    const int past = rng() % 40;
    const int tokens = trial % 2 ? 1 + rng() % 4 : 8 + rng() % 300;  // dot and GEMM paths
    KvState kv(2, kv_heads, dim);
    std::vector<int32_t> ids(past + tokens, 1);
    kv.AppendTokens(ids);
    for (int l = 0; l < 2; ++l)
      for (int k = 0; k < 2; ++k)
        for (int g = 0; g < kv_heads; ++g)
          for (int i = 0; i < (past + tokens) * dim; ++i) kv.head_data(l, k, g)[i] = normal(rng);
    if (trial % 3 == 0) {
      for (int g = 0; g < kv_heads; ++g) {
        std::vector<uint8_t> keep(past + tokens);
        for (size_t j = 0; j < keep.size(); ++j) keep[j] = j >= size_t(past) || rng() % 3 != 0;
        ASSERT_TRUE(kv.SetKeepMask(1, g, keep).ok());
      }
    }
    std::vector<float> q(tokens * heads * dim), out(tokens * heads * dim, 7.0f);
    for (auto& x : q) x = 2 * normal(rng);
    AttentionArgs a;
    a.q = q.data();
    a.q_stride = heads * dim;
    a.tokens = tokens;
    a.past = past;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = dim;
    a.kv = &kv;
    a.layer = 1;
    a.out = out.data();
    a.out_stride = heads * dim;
    Attention(a, pool);
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        auto ref = NaiveAttention(a, t, h);
        for (int d = 0; d < dim; ++d) {
          ASSERT_NEAR(out[t * heads * dim + h * dim + d], ref[d], 1e-4)
              << "trial " << trial << " t " << t << " h " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::runtime
