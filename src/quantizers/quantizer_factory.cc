// Copyright kvserve authors. pipeline::CreateQuantizerFor{Encode,Decode}:
// maps a Profile onto a QuantConfig.
#include "kvserve/profile.h"
#include "core/stages.h"
#include "quantizers/quantizers.h"

namespace kvserve::pipeline {
namespace {

quantizers::QuantConfig ConfigFromProfile(const Profile& p) {
  auto get = [&](ParamId id) { return static_cast<int>(p.Get(id)); };
  quantizers::QuantConfig c;
  c.type = p.quantizer();
  c.bits_key = get(ParamId::kBitsKey);
  c.bits_value = get(ParamId::kBitsValue);
  c.levels_key = get(ParamId::kLevelsKey);
  c.levels_value = get(ParamId::kLevelsValue);
  c.group = get(ParamId::kGroup);
  c.axis_key = static_cast<QuantAxis>(get(ParamId::kAxisKey));
  c.axis_value = static_cast<QuantAxis>(get(ParamId::kAxisValue));
  c.symmetric = get(ParamId::kSymmetric) != 0;
  c.residual = get(ParamId::kResidual);
  c.sinks = get(ParamId::kSinks);
  c.recent = get(ParamId::kRecent);
  c.bits_high = get(ParamId::kBitsHigh);
  c.bits_low = get(ParamId::kBitsLow);
  c.high_percent = get(ParamId::kHighPercent);
  c.scale_dtype = static_cast<ScaleDType>(get(ParamId::kScaleDType));
  c.bits_first = get(ParamId::kBitsFirst);
  c.bits_last = get(ParamId::kBitsLast);
  return c;
}

}  // namespace

Result<std::unique_ptr<Quantizer>> CreateQuantizerForEncode(const Profile& profile,
                                                            const KvShape& shape,
                                                            const HeadScores* scores) {
  return quantizers::NewQuantizerForEncode(ConfigFromProfile(profile), shape, scores);
}

Result<std::unique_ptr<Quantizer>> CreateQuantizerForDecode(const Profile& profile,
                                                            const KvShape& shape,
                                                            std::span<const uint8_t> state) {
  return quantizers::NewQuantizerForDecode(ConfigFromProfile(profile), shape, state);
}

}  // namespace kvserve::pipeline
