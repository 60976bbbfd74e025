// Copyright kvserve authors. Causal GQA attention.
#include "runtime/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/blas.h"

namespace kvserve::runtime {
namespace {

// Row counts at or above this use the GEMM path.
constexpr int kGemmMinRows = 8;
// Query rows per GEMM block: bounds the score scratch to kBlock x keys.
constexpr int kBlock = 256;

float Dot(const float* a, const float* b, int n) {
  // Four independent sums let the compiler vectorise without reassociation.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// In-place masked softmax of `row` over keys [0, limit); entries at or past
// limit and masked entries become 0. Returns false if no key is visible.
bool SoftmaxRow(float* row, int limit, int total, const uint8_t* keep) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < limit; ++j) {
    if (keep && !keep[j]) continue;
    max_value = std::max(max_value, row[j]);
  }
  if (max_value == -std::numeric_limits<float>::infinity()) {
    std::fill(row, row + total, 0.0f);
    return false;
  }
  float sum = 0;
  for (int j = 0; j < limit; ++j) {
    if (keep && !keep[j]) {
      row[j] = 0;
      continue;
    }
    row[j] = std::exp(row[j] - max_value);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < limit; ++j) row[j] *= inv;
  std::fill(row + limit, row + total, 0.0f);
  return true;
}

// Probe for one block: compares out rows with the sink + recent restriction.
void ProbeBlock(const AttentionArgs& a, int head, int q0, int rows, int keys, const float* probs,
                const float* v, const float* out_block, std::vector<float>& restricted,
                std::vector<float>& restricted_out, double* change_sum, double* row_count) {
  const int sink = a.probe->sink_tokens, recent = a.probe->recent_tokens;
  restricted.assign(static_cast<size_t>(rows) * keys, 0.0f);
  std::vector<char> used(rows, 0);
  for (int r = 0; r < rows; ++r) {
    const int pos = a.past + q0 + r;
    if (pos < sink + recent) continue;  // the restriction changes nothing here
    const float* p = probs + static_cast<size_t>(r) * keys;
    float* s = restricted.data() + static_cast<size_t>(r) * keys;
    double mass = 0;
    for (int j = 0; j <= pos; ++j) {
      if (j < sink || j > pos - recent) {
        s[j] = p[j];
        mass += p[j];
      }
    }
    if (mass <= 0) continue;
    const float inv = static_cast<float>(1.0 / mass);
    for (int j = 0; j <= pos; ++j) s[j] *= inv;
    used[r] = 1;
  }
  restricted_out.resize(static_cast<size_t>(rows) * a.head_dim);
  MatMul(rows, a.head_dim, keys, restricted.data(), keys, v, a.head_dim, restricted_out.data(),
         a.head_dim);
  for (int r = 0; r < rows; ++r) {
    if (!used[r]) continue;
    const float* o = out_block + static_cast<size_t>(r) * a.out_stride;
    const float* s = restricted_out.data() + static_cast<size_t>(r) * a.head_dim;
    double diff = 0, norm = 0;
    for (int d = 0; d < a.head_dim; ++d) {
      diff += double(o[d] - s[d]) * (o[d] - s[d]);
      norm += double(o[d]) * o[d];
    }
    *change_sum += diff / (norm + 1e-12);
    *row_count += 1;
  }
  (void)head;
}

void GemmAttention(const AttentionArgs& a, ThreadPool& pool) {
  const int group = a.heads / a.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  const int block = std::min(kBlock, a.tokens);
  std::vector<float> scores(static_cast<size_t>(block) * (a.past + a.tokens));
  std::vector<float> restricted, restricted_out;
  for (int h = 0; h < a.heads; ++h) {
    const int g = h / group;
    const float* k = a.kv->head_data(a.layer, 0, g);
    const float* v = a.kv->head_data(a.layer, 1, g);
    const uint8_t* keep = a.kv->keep_mask(a.layer, g);
    for (int q0 = 0; q0 < a.tokens; q0 += block) {
      const int rows = std::min(block, a.tokens - q0);
      const int keys = a.past + q0 + rows;  // causal: later keys are never visible
      const float* q = a.q + static_cast<size_t>(q0) * a.q_stride + h * a.head_dim;
      MatMulTransB(rows, keys, a.head_dim, q, a.q_stride, k, a.head_dim, scores.data(), keys,
                   /*accumulate=*/false, scale);
      pool.ParallelFor(rows, [&](size_t r) {
        SoftmaxRow(scores.data() + r * keys, a.past + q0 + static_cast<int>(r) + 1, keys, keep);
      });
      float* out = a.out + static_cast<size_t>(q0) * a.out_stride + h * a.head_dim;
      MatMul(rows, a.head_dim, keys, scores.data(), keys, v, a.head_dim, out, a.out_stride);
      if (a.probe != nullptr) {
        const size_t index = static_cast<size_t>(a.layer) * a.kv_heads + g;
        ProbeBlock(a, h, q0, rows, keys, scores.data(), v, out, restricted, restricted_out,
                   &a.probe->change_sum[index], &a.probe->rows[index]);
      }
    }
  }
}

void DotAttention(const AttentionArgs& a, ThreadPool& pool) {
  const int group = a.heads / a.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  const int keys_max = a.past + a.tokens;
  pool.ParallelFor(static_cast<size_t>(a.heads) * a.tokens, [&](size_t task) {
    const int h = static_cast<int>(task % a.heads);
    const int t = static_cast<int>(task / a.heads);
    const int g = h / group;
    const float* k = a.kv->head_data(a.layer, 0, g);
    const float* v = a.kv->head_data(a.layer, 1, g);
    const uint8_t* keep = a.kv->keep_mask(a.layer, g);
    const float* q = a.q + static_cast<size_t>(t) * a.q_stride + h * a.head_dim;
    const int limit = a.past + t + 1;
    std::vector<float> row(keys_max);
    for (int j = 0; j < limit; ++j) {
      row[j] = (keep && !keep[j]) ? 0.0f : Dot(q, k + static_cast<size_t>(j) * a.head_dim,
                                              a.head_dim) * scale;
    }
    float* out = a.out + static_cast<size_t>(t) * a.out_stride + h * a.head_dim;
    std::fill(out, out + a.head_dim, 0.0f);
    if (!SoftmaxRow(row.data(), limit, keys_max, keep)) return;
    for (int j = 0; j < limit; ++j) {
      const float p = row[j];
      if (p == 0.0f) continue;
      const float* vj = v + static_cast<size_t>(j) * a.head_dim;
      for (int d = 0; d < a.head_dim; ++d) out[d] += p * vj[d];
    }
  });
}

}  // namespace

void Attention(const AttentionArgs& args, ThreadPool& pool) {
  if (args.tokens >= kGemmMinRows || args.probe != nullptr) {
    GemmAttention(args, pool);
  } else {
    DotAttention(args, pool);
  }
}

}  // namespace kvserve::runtime
