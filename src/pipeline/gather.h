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

// Copies the source-dtype bytes of the region, densely as [head][token][dim]
// little-endian elements, into `out` (heads*tokens*dim*dtype_size bytes).
void GatherRawBytes(const KvView& kv, int layer, int kind, int token_begin, int tokens,
                    uint8_t* out);
// Inverse of GatherRawBytes.
void ScatterRawBytes(const uint8_t* in, const MutableKvView& out, int layer, int kind,
                     int token_begin, int tokens);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_PIPELINE_GATHER_H_
