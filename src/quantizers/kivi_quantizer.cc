// Copyright kvserve authors. "kivi" (KIVI): keys per channel over groups of
// `group` tokens, values per token over the whole head_dim; the `residual`
// most recent tokens and the ragged tail (CodedTokens) stay raw.
#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class KiviQuantizer final : public PlannedQuantizer {
 public:
  KiviQuantizer(const QuantConfig& c, const KvShape& shape) : PlannedQuantizer(c, shape, c.group) {}

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const QuantConfig& c = config();
    const bool key = info.kind == KvKind::kKey;
    plan->axis = key ? QuantAxis::kChannel : QuantAxis::kToken;
    plan->group = key ? c.group : 0;
    const int levels =
        key ? LevelsFor(c.bits_key, c.levels_key) : LevelsFor(c.bits_value, c.levels_value);
    for (int h = 0; h < info.kv_heads; ++h) {
      plan->runs.push_back(TokenRun{h, 0, info.tokens, levels});
    }
  }
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewKiviQuantizer(const QuantConfig& config,
                                                      const KvShape& shape) {
  return std::make_unique<KiviQuantizer>(config, shape);
}

}  // namespace kvserve::quantizers
