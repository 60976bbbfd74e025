// Copyright kvserve authors. What the serving workers (kvserve/serve.h) run:
// an engine that computes a prompt's KV and generates tokens from imported
// KV. The workers own everything else: the protocol, the controller's
// decisions, the prefix pool, the transfers (kvserve/connector.h) and their
// retries. kvserve's own runtime is one engine (NewRuntimeEngine over
// kvserve::Model, host memory); a transformers model on a GPU, driven from
// Python, is another (kvserve.integration.transformers, docs/python.md):
// the same workers serve both.
//
// KV lives where EngineInfo::device says: host memory (-1) or a CUDA
// device. For a device engine the workers move KV with a DeviceConnector
// (PrefillWorkerOptions::device / DecodeWorkerOptions::device).
//
// Thread safety: the workers call an engine from several threads (one per
// client or prefill connection); an engine serialises what it must.
#ifndef KVSERVE_ENGINE_H_
#define KVSERVE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/connector.h"
#include "kvserve/kv.h"
#include "kvserve/runtime.h"
#include "kvserve/status.h"

namespace kvserve {

struct EngineInfo {
  std::string name;                // for messages (a model id or path)
  int layers = 0, kv_heads = 0, head_dim = 0, vocab_size = 0;
  DType kv_dtype = DType::kF32;    // the element type of its KV (what its frames carry)
  int device = -1;                 // CUDA ordinal of its KV; -1 = host memory
  // Bytes of one token's KV (layers * 2 * kv_heads * head_dim elements).
  uint64_t KvBytesPerToken() const {
    return static_cast<uint64_t>(layers) * 2 * kv_heads * head_dim * DTypeSize(kv_dtype);
  }
};

// One request's KV as the engine holds it: a prefill's result, or where a
// received frame is decoded. Alive as long as the workers need it (a retry
// sends it again; prefix-pool stores read it after the response).
class EngineKv {
 public:
  virtual ~EngineKv() = default;
  virtual KvShape shape() const = 0;
  virtual DType dtype() const = 0;
  // The whole cache as a sender reads it (host or device memory, per the
  // engine's EngineInfo::device).
  virtual DeviceKvSource view() const = 0;
  // Where a receiver decodes a frame of shape() and dtype() into.
  virtual KvDestination destination() = 0;
};

struct EnginePrefill {
  std::unique_ptr<EngineKv> kv;
  std::vector<float> last_logits;  // of the last prompt token, vocab_size entries
};

// What the decode worker asks for after importing a request's KV.
struct EngineGenerate {
  std::vector<int32_t> prompt;       // ids of the KV's tokens, one per token
  std::vector<int32_t> suffix;       // prompt tokens to run first (a prefix hit)
  std::vector<float> last_logits;    // what to sample the first token from when suffix is empty
  int max_new_tokens = 1;
  SamplingOptions sampling;
  bool stop_at_eos = false;
};

struct EngineTokens {
  std::vector<int32_t> tokens;
  double first_token_seconds = 0;  // from the call to the first token sampled
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;
  virtual const EngineInfo& info() const = 0;

  // Computes the KV of `prompt` (non-empty, ids < vocab_size) and the last
  // token's logits, calling on_layer(l, view) for l = 0, 1, ... as soon as
  // layer l's KV is final (a view of that layer: layers == 1, the engine's
  // dtype). Host engines: the view is valid during the call. Device
  // engines: device memory queued on stream() that stays unchanged as long
  // as the returned EngineKv lives. InvalidArgument for a bad prompt.
  virtual Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) = 0;

  // KV of `shape` and `dtype` for a received frame to be decoded into.
  // ResourceExhausted when it does not fit (the frame is then refused).
  virtual Result<std::unique_ptr<EngineKv>> AllocateKv(const KvShape& shape, DType dtype) = 0;

  // Generates from the KV of `parts` (frames of one request in token order:
  // one normally, one per pool chunk on a prefix hit), each with its keep
  // mask ([layer][kind][head][token], empty when nothing was pruned).
  virtual Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                        const std::vector<std::vector<uint8_t>>& keep_masks,
                                        const EngineGenerate& request) = 0;

  // The CUDA stream its device work is queued on (a cudaStream_t; null =
  // the legacy default stream). Host engines: unused.
  virtual void* stream() const { return nullptr; }
};

// kvserve's runtime as an engine: f32 KV in host memory. `model` is not
// owned and must outlive the engine.
std::unique_ptr<ServingEngine> NewRuntimeEngine(const Model* model);

// `source` restricted to tokens [begin, begin + count): a contiguous view
// of any strides, or a paged view from a block boundary (its block table
// advanced; the view still points into the caller's arrays).
// InvalidArgument for a range outside the cache or a paged range that does
// not start at a block boundary.
Result<DeviceKvSource> SliceTokens(const DeviceKvSource& source, int begin, int count);

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_H_
