// Copyright kvserve authors. "layermix" (PyramidKV-like): bits move
// linearly from `first` at layer 0 to `last` at the last layer
// (LayerMixBits), for keys and values alike; axes from axis_k / axis_v.
#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class LayerMixQuantizer final : public PlannedQuantizer {
 public:
  LayerMixQuantizer(const QuantConfig& c, const KvShape& shape)
      : PlannedQuantizer(c, shape,
                         (c.axis_key == QuantAxis::kChannel || c.axis_value == QuantAxis::kChannel)
                             ? c.group
                             : 0) {}

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const QuantConfig& c = config();
    plan->axis = info.kind == KvKind::kKey ? c.axis_key : c.axis_value;
    plan->group = c.group;
    const int levels = 1 << LayerMixBits(c.bits_first, c.bits_last, info.layer, info.num_layers);
    for (int h = 0; h < info.kv_heads; ++h) {
      plan->runs.push_back(TokenRun{h, 0, info.tokens, levels});
    }
  }
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewLayerMixQuantizer(const QuantConfig& config,
                                                          const KvShape& shape) {
  return std::make_unique<LayerMixQuantizer>(config, shape);
}

}  // namespace kvserve::quantizers
