// Copyright kvserve authors. "tokenmix": tokens with absolute index < sinks
// or >= total_tokens - recent at `high` bits, the rest at `low` bits. The
// axis is fixed to token for keys and values (so a token's precision never
// mixes inside a group); `group` is the channel group size.
#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class TokenMixQuantizer final : public PlannedQuantizer {
 public:
  TokenMixQuantizer(const QuantConfig& c, const KvShape& shape) : PlannedQuantizer(c, shape, 0) {}

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const QuantConfig& c = config();
    plan->axis = QuantAxis::kToken;
    plan->group = c.group;
    const int high = 1 << c.bits_high, low = 1 << c.bits_low;
    const int64_t recent_begin = int64_t{info.total_tokens} - c.recent;
    for (int h = 0; h < info.kv_heads; ++h) {
      AppendRuns(
          h, info.tokens,
          [&](int t) {
            const int64_t abs = int64_t{info.token_begin} + t;
            return (abs < c.sinks || abs >= recent_begin) ? high : low;
          },
          plan);
    }
  }
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewTokenMixQuantizer(const QuantConfig& config,
                                                          const KvShape& shape) {
  return std::make_unique<TokenMixQuantizer>(config, shape);
}

}  // namespace kvserve::quantizers
