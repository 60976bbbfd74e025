// Copyright kvserve authors. "mixhq" (paper §5.1): retrieval heads at `high`
// bits, streaming heads at `low` bits, with KIVI's axes (keys per channel
// over `group` tokens, values per token) and raw residual. The per-(layer,
// head) bits are the cache state, so the decoder needs no score file.
#include <utility>

#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

class MixHQQuantizer final : public PlannedQuantizer {
 public:
  MixHQQuantizer(const QuantConfig& c, const KvShape& shape, std::vector<uint8_t> head_bits)
      : PlannedQuantizer(c, shape, c.group), head_bits_(std::move(head_bits)) {}

  // layers * kv_heads bytes, [layer][head], each the bits of that head.
  void SerializeState(pipeline::ByteWriter& out) const override {
    out.PutBytes(head_bits_.data(), head_bits_.size());
  }

 protected:
  void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const override {
    const bool key = info.kind == KvKind::kKey;
    plan->axis = key ? QuantAxis::kChannel : QuantAxis::kToken;
    plan->group = key ? config().group : 0;
    for (int h = 0; h < info.kv_heads; ++h) {
      const int bits = head_bits_[static_cast<size_t>(info.layer) * info.kv_heads + h];
      plan->runs.push_back(TokenRun{h, 0, info.tokens, 1 << bits});
    }
  }

 private:
  std::vector<uint8_t> head_bits_;
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewMixHQQuantizer(const QuantConfig& config,
                                                       const KvShape& shape,
                                                       std::vector<uint8_t> head_bits) {
  return std::make_unique<MixHQQuantizer>(config, shape, std::move(head_bits));
}

}  // namespace kvserve::quantizers
