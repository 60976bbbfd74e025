// Copyright kvserve authors. "duo" (DuoAttention-style pruning baseline):
// retrieval heads keep every token; streaming heads keep only tokens with
// absolute index < sinks or >= total_tokens - recent. Kept tokens are
// quantised per token (channel groups of `group`) with the kind's levels
// (levels_k | 2^k for keys, levels_v | 2^v for values); pruned
// tokens produce no symbols and no params and decode to 0 with keep mask 0.
// The raw residual region is kept for every head. The retrieval flags are
// the cache state.
#include <utility>

#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class DuoQuantizer final : public PlannedQuantizer {
 public:
  DuoQuantizer(const QuantConfig& c, const KvShape& shape, std::vector<uint8_t> retrieval)
      : PlannedQuantizer(c, shape, 0), retrieval_(std::move(retrieval)) {}

  // layers * kv_heads bytes, [layer][head]: 1 retrieval head, 0 streaming.
  void SerializeState(pipeline::ByteWriter& out) const override {
    out.PutBytes(retrieval_.data(), retrieval_.size());
  }

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const QuantConfig& c = config();
    plan->axis = QuantAxis::kToken;
    plan->group = c.group;
    const int kept_levels = info.kind == KvKind::kKey ? LevelsFor(c.bits_key, c.levels_key)
                                               : LevelsFor(c.bits_value, c.levels_value);
    const int64_t recent_begin = int64_t{info.total_tokens} - c.recent;
    for (int h = 0; h < info.kv_heads; ++h) {
      const bool keep_all = retrieval_[static_cast<size_t>(info.layer) * info.kv_heads + h] != 0;
      AppendRuns(
          h, info.tokens,
          [&](int t) {
            const int64_t abs = int64_t{info.token_begin} + t;
            return (keep_all || abs < c.sinks || abs >= recent_begin) ? kept_levels : 0;
          },
          plan);
    }
  }

 private:
  std::vector<uint8_t> retrieval_;
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewDuoQuantizer(const QuantConfig& config,
                                                     const KvShape& shape,
                                                     std::vector<uint8_t> retrieval) {
  return std::make_unique<DuoQuantizer>(config, shape, std::move(retrieval));
}

}  // namespace kvserve::quantizers
