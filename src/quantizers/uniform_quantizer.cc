// Copyright kvserve authors. "uniform": one level count and axis per kind.
#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class UniformQuantizer final : public PlannedQuantizer {
 public:
  UniformQuantizer(const QuantConfig& c, const KvShape& shape)
      : PlannedQuantizer(c, shape,
                         (c.axis_key == QuantAxis::kChannel || c.axis_value == QuantAxis::kChannel)
                             ? c.group
                             : 0) {}

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const QuantConfig& c = config();
    const bool key = info.kind == KvKind::kKey;
    plan->axis = key ? c.axis_key : c.axis_value;
    plan->group = c.group;
    const int levels =
        key ? LevelsFor(c.bits_key, c.levels_key) : LevelsFor(c.bits_value, c.levels_value);
    for (int h = 0; h < info.kv_heads; ++h) {
      plan->runs.push_back(TokenRun{h, 0, info.tokens, levels});
    }
  }
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewUniformQuantizer(const QuantConfig& config,
                                                         const KvShape& shape) {
  return std::make_unique<UniformQuantizer>(config, shape);
}

}  // namespace kvserve::quantizers
