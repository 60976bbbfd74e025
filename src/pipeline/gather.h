// Copyright kvserve authors. Moving one chunk between a KV tensor (a strided
// view or a paged one) and the dense working layouts the stages use.
// Internal.
#ifndef KVSERVE_PIPELINE_GATHER_H_
#define KVSERVE_PIPELINE_GATHER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvserve/kv.h"
#include "kvserve/paged.h"

namespace kvserve::pipeline {

// The tensor a frame is encoded from (KvSource) or decoded into (KvTarget):
// a strided view or a paged one. Every gather and scatter below goes
// through ForEachRun, which splits a token range of one (layer, kind) into
// runs that one strided view addresses: the whole range for a strided
// view, the part in each block for a paged one. So the bytes never depend
// on the paging, only the addresses do.
template <typename View, typename PagedView>
class KvTensor {
 public:
  KvTensor(const View& view) : view_(view) {}  // NOLINT: implicit by design
  KvTensor(const PagedView& paged)             // NOLINT: implicit by design
      : view_{nullptr, paged.dtype, paged.shape, {}}, paged_(paged), is_paged_(true) {}

  const KvShape& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  // Calls fn(run_view, run_layer, run_kind, run_token, run_count, offset)
  // for consecutive runs covering tokens [token, token + count) of (layer,
  // kind): the run's tokens are run_view's [run_token, run_token +
  // run_count) of (run_layer, run_kind), and `offset` is the run's first
  // token relative to `token`.
  template <typename Fn>
  void ForEachRun(int layer, int kind, int token, int count, Fn&& fn) const {
    if (!is_paged_) {
      fn(view_, layer, kind, token, count, 0);
      return;
    }
    const int block_size = paged_.block_size;
    const int64_t es = static_cast<int64_t>(DTypeSize(paged_.dtype));
    auto* base =
        static_cast<Byte*>(kind == 0 ? paged_.key_pages[layer] : paged_.value_pages[layer]);
    View run = view_;
    run.shape.layers = 1;
    run.shape.tokens = block_size;
    run.strides = KvStrides{0, 0, paged_.strides.head, paged_.strides.slot, 1};
    for (int done = 0; done < count;) {
      const int t = token + done;
      const int slot = t % block_size;
      const int n = std::min(count - done, block_size - slot);
      run.data = base + int64_t{paged_.block_table[t / block_size]} * paged_.strides.block * es;
      fn(run, 0, 0, slot, n, done);
      done += n;
    }
  }
  // Validate() of the underlying view.
  Status Validate() const { return is_paged_ ? paged_.Validate() : view_.Validate(); }

 private:
  using Byte = std::conditional_t<std::is_same_v<View, KvView>, const std::byte, std::byte>;
  View view_;
  PagedView paged_{};
  bool is_paged_ = false;
};

using KvSource = KvTensor<KvView, PagedKvView>;
using KvTarget = KvTensor<MutableKvView, MutablePagedKvView>;

// Converts elements [token_begin, token_begin + tokens) of (layer, kind) of
// `kv` to fp32, written densely as [head][token][dim] into `out`.
void GatherChunk(const KvSource& kv, int layer, int kind, int token_begin, int tokens, float* out);

// Stores the dense fp32 [head][token][dim] `in` into `out` (same region),
// converting to out.dtype with round-to-nearest-even.
void ScatterChunk(const float* in, const KvTarget& out, int layer, int kind, int token_begin,
                  int tokens);

// Converts rows [token, token + count) (absolute token indices) of head
// `head` of (layer, kind) of `kv` to fp32, densely as [token][dim] in `out`.
void GatherRows(const KvSource& kv, int layer, int kind, int head, int token, int count,
                float* out);
// Stores the dense fp32 [token][dim] rows `in` into rows [token, token +
// count) of head `head` of (layer, kind) of `out`, converting as ScatterChunk.
// With `stream`, the stores bypass the caches where the CPU allows (see
// PreferStreamingStores); the bytes are the same either way.
void ScatterRows(const float* in, const KvTarget& out, int layer, int kind, int head, int token,
                 int count, bool stream);

// Outputs at least this large are written with non-temporal stores: they
// are several times the last-level cache, so cached stores would only
// evict useful lines and pay a read-for-ownership per line.
inline constexpr int64_t kStreamingStoreMinBytes = int64_t{64} << 20;
// True when `out` is large enough (and the CPU able) for streaming stores.
bool PreferStreamingStores(const KvTarget& out);
// Orders this thread's streaming stores before anything it does next (an
// sfence); call after the last streaming store of a chunk.
void FinishStreamingStores();
// Sets rows [token, token + count) of head `head` of (layer, kind) of `out`
// to +0 (all-zero bits in every dtype).
void ZeroRows(const KvTarget& out, int layer, int kind, int head, int token, int count);

// Copies the source-dtype bytes of the region, densely as [head][token][dim]
// little-endian elements, into `out` (heads*tokens*dim*dtype_size bytes).
void GatherRawBytes(const KvSource& kv, int layer, int kind, int token_begin, int tokens,
                    uint8_t* out);
// Inverse of GatherRawBytes; `stream` as for ScatterRows.
void ScatterRawBytes(const uint8_t* in, const KvTarget& out, int layer, int kind, int token_begin,
                     int tokens, bool stream);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_PIPELINE_GATHER_H_
