// Copyright kvserve authors. Moving one chunk between a strided KV view and
// the dense working layouts the stages use. Internal.
#ifndef KVSERVE_PIPELINE_GATHER_H_
#define KVSERVE_PIPELINE_GATHER_H_

#include <cstdint>

#include "kvserve/kv.h"

namespace kvserve::pipeline {

// Converts elements [token_begin, token_begin + tokens) of (layer, kind) of
// `kv` to fp32, written densely as [head][token][dim] into `out`.
void GatherChunk(const KvView& kv, int layer, int kind, int token_begin, int tokens, float* out);

// Stores the dense fp32 [head][token][dim] `in` into `out` (same region),
// converting to out.dtype with round-to-nearest-even.
void ScatterChunk(const float* in, const MutableKvView& out, int layer, int kind,
                  int token_begin, int tokens);

// Converts rows [token, token + count) (absolute token indices) of head
// `head` of (layer, kind) of `kv` to fp32, densely as [token][dim] in `out`.
void GatherRows(const KvView& kv, int layer, int kind, int head, int token, int count,
                float* out);
// Stores the dense fp32 [token][dim] rows `in` into rows [token, token +
// count) of head `head` of (layer, kind) of `out`, converting as ScatterChunk.
// With `stream`, the stores bypass the caches where the CPU allows (see
// PreferStreamingStores); the bytes are the same either way.
void ScatterRows(const float* in, const MutableKvView& out, int layer, int kind, int head,
                 int token, int count, bool stream);

// Outputs at least this large are written with non-temporal stores: they
// are several times the last-level cache, so cached stores would only
// evict useful lines and pay a read-for-ownership per line.
inline constexpr int64_t kStreamingStoreMinBytes = int64_t{64} << 20;
// True when `out` is large enough (and the CPU able) for streaming stores.
bool PreferStreamingStores(const MutableKvView& out);
// Orders this thread's streaming stores before anything it does next (an
// sfence); call after the last streaming store of a chunk.
void FinishStreamingStores();
// Sets rows [token, token + count) of head `head` of (layer, kind) of `out`
// to +0 (all-zero bits in every dtype).
void ZeroRows(const MutableKvView& out, int layer, int kind, int head, int token, int count);

// Copies the source-dtype bytes of the region, densely as [head][token][dim]
// little-endian elements, into `out` (heads*tokens*dim*dtype_size bytes).
void GatherRawBytes(const KvView& kv, int layer, int kind, int token_begin, int tokens,
                    uint8_t* out);
// Inverse of GatherRawBytes; `stream` as for ScatterRows.
void ScatterRawBytes(const uint8_t* in, const MutableKvView& out, int layer, int kind,
                     int token_begin, int tokens, bool stream);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_PIPELINE_GATHER_H_
