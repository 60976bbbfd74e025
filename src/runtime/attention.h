// Copyright kvserve authors. Causal grouped-query attention over a KvState,
// with an optional per-(kv_head) token keep-mask and the sink + recent probe
// used by head calibration.
#ifndef KVSERVE_RUNTIME_ATTENTION_H_
#define KVSERVE_RUNTIME_ATTENTION_H_

#include "core/thread_pool.h"
#include "kvserve/runtime.h"

namespace kvserve::runtime {

struct AttentionArgs {
  // Queries: row t (position past + t), head h at q + t * q_stride + h * head_dim.
  const float* q = nullptr;
  int q_stride = 0;
  int tokens = 0;  // query rows
  int past = 0;    // cached tokens before the first query
  int heads = 0, kv_heads = 0, head_dim = 0;
  // Keys/values of one layer: kv->head_data(layer, kind, g) rows [0, past + tokens).
  const KvState* kv = nullptr;
  int layer = 0;
  // Output: row t, head h at out + t * out_stride + h * head_dim.
  float* out = nullptr;
  int out_stride = 0;
  // Optional: accumulates the streaming-restriction change per kv head of
  // this layer into probe->change_sum / rows at [layer * kv_heads + g].
  StreamingProbe* probe = nullptr;
};

// Softmax(q k^T / sqrt(head_dim)) v with a causal mask (query at position p
// sees keys <= p) and kv's keep-mask. Many query rows: per-head GEMMs through
// BLAS with rows' softmax on `pool`; few rows: per-(head, row) dot products
// spread over `pool`.
void Attention(const AttentionArgs& args, ThreadPool& pool);

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_ATTENTION_H_
