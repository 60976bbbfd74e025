// Copyright kvserve authors. Config validation, head selection and the
// mode dispatch of the quantizer family.
#include "quantizers/quantizers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kvserve::quantizers {
namespace {

Status CheckRange(const char* name, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return Status::InvalidArgument(std::string("quantizer parameter ") + name + "=" +
                                   std::to_string(value) + " outside [" + std::to_string(lo) +
                                   ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

bool GroupsChannels(const QuantConfig& c) {
  switch (c.type) {
    case QuantizerType::kUniform:
    case QuantizerType::kLayerMix:
      return c.axis_key == QuantAxis::kToken || c.axis_value == QuantAxis::kToken;
    case QuantizerType::kTokenMix:
    case QuantizerType::kDuo:
      return true;
    default:
      return false;
  }
}

Status AsCorruption(const Status& s) {
  if (s.ok()) return s;
  return Status::Corruption(s.message());
}

}  // namespace

Status ValidateQuantConfig(const QuantConfig& c, const KvShape& shape) {
  if (shape.layers < 1 || shape.kv_heads < 1 || shape.head_dim < 1) {
    return Status::InvalidArgument("quantizer needs a positive cache shape");
  }
  if (static_cast<int>(c.type) > static_cast<int>(QuantizerType::kDuo)) {
    return Status::InvalidArgument("unknown quantizer type");
  }
  KVSERVE_RETURN_IF_ERROR(CheckRange("k", c.bits_key, 1, 8));
  KVSERVE_RETURN_IF_ERROR(CheckRange("v", c.bits_value, 1, 8));
  if (c.levels_key != 0) KVSERVE_RETURN_IF_ERROR(CheckRange("levels_k", c.levels_key, 2, 256));
  if (c.levels_value != 0) {
    KVSERVE_RETURN_IF_ERROR(CheckRange("levels_v", c.levels_value, 2, 256));
  }
  KVSERVE_RETURN_IF_ERROR(CheckRange("group", c.group, 0, 4096));
  KVSERVE_RETURN_IF_ERROR(CheckRange("axis_k", static_cast<int>(c.axis_key), 0, 1));
  KVSERVE_RETURN_IF_ERROR(CheckRange("axis_v", static_cast<int>(c.axis_value), 0, 1));
  KVSERVE_RETURN_IF_ERROR(CheckRange("residual", c.residual, 0, 1 << 20));
  KVSERVE_RETURN_IF_ERROR(CheckRange("sinks", c.sinks, 0, 4096));
  KVSERVE_RETURN_IF_ERROR(CheckRange("recent", c.recent, 0, 1 << 20));
  KVSERVE_RETURN_IF_ERROR(CheckRange("high", c.bits_high, 1, 8));
  KVSERVE_RETURN_IF_ERROR(CheckRange("low", c.bits_low, 1, 8));
  KVSERVE_RETURN_IF_ERROR(CheckRange("heads", c.high_percent, 0, 100));
  KVSERVE_RETURN_IF_ERROR(CheckRange("scale", static_cast<int>(c.scale_dtype), 0, 1));
  KVSERVE_RETURN_IF_ERROR(CheckRange("first", c.bits_first, 1, 8));
  KVSERVE_RETURN_IF_ERROR(CheckRange("last", c.bits_last, 1, 8));
  if (GroupsChannels(c) && c.group != 0 && c.group < shape.head_dim &&
      shape.head_dim % c.group != 0) {
    return Status::InvalidArgument("quantizer parameter group=" + std::to_string(c.group) +
                                   " must divide head_dim=" + std::to_string(shape.head_dim) +
                                   " when grouping channels of a token (a group >= head_dim means the whole token)");
  }
  return Status::Ok();
}

int LevelsFor(int bits, int explicit_levels) {
  return explicit_levels != 0 ? explicit_levels : 1 << bits;
}

int LayerMixBits(int first, int last, int layer, int num_layers) {
  if (num_layers <= 1) return first;
  const int64_t d = num_layers - 1;
  const int64_t num = 2 * int64_t{last - first} * layer + d;
  const int64_t den = 2 * d;
  int64_t q = num / den;
  if (num % den != 0 && num < 0) --q;  // floor division
  return static_cast<int>(first + q);
}

int64_t RetrievalHeadCount(int percent, int64_t pairs) {
  return (2 * int64_t{percent} * pairs + 100) / 200;
}

Result<std::vector<uint8_t>> SelectRetrievalHeads(const HeadScores& scores, const KvShape& shape,
                                                  int percent) {
  if (scores.layers != shape.layers || scores.kv_heads != shape.kv_heads ||
      scores.scores.size() != static_cast<size_t>(shape.layers) * shape.kv_heads) {
    return Status::InvalidArgument(
        "--head-scores shape (" + std::to_string(scores.layers) + " layers x " +
        std::to_string(scores.kv_heads) + " kv_heads) does not match the cache (" +
        std::to_string(shape.layers) + " x " + std::to_string(shape.kv_heads) + ")");
  }
  for (float s : scores.scores) {
    if (!std::isfinite(s)) return Status::InvalidArgument("--head-scores holds a non-finite score");
  }
  std::vector<size_t> order(scores.scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Index order is [layer][head], so the index breaks ties by lower layer,
  // then lower head.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (scores.scores[a] != scores.scores[b]) return scores.scores[a] > scores.scores[b];
    return a < b;
  });
  const int64_t count = RetrievalHeadCount(percent, static_cast<int64_t>(order.size()));
  std::vector<uint8_t> flags(order.size(), 0);
  for (int64_t i = 0; i < count; ++i) flags[order[i]] = 1;
  return flags;
}

Result<std::unique_ptr<pipeline::Quantizer>> NewQuantizerForEncode(const QuantConfig& config,
                                                                   const KvShape& shape,
                                                                   const HeadScores* scores) {
  KVSERVE_RETURN_IF_ERROR(ValidateQuantConfig(config, shape));
  switch (config.type) {
    case QuantizerType::kRaw:
      return NewRawQuantizer();
    case QuantizerType::kUniform:
      return NewUniformQuantizer(config, shape);
    case QuantizerType::kKivi:
      return NewKiviQuantizer(config, shape);
    case QuantizerType::kLayerMix:
      return NewLayerMixQuantizer(config, shape);
    case QuantizerType::kTokenMix:
      return NewTokenMixQuantizer(config, shape);
    case QuantizerType::kMixHQ:
    case QuantizerType::kDuo: {
      if (scores == nullptr) {
        return Status::InvalidArgument(std::string(QuantizerName(config.type)) +
                                       " needs head scores: pass --head-scores FILE");
      }
      KVSERVE_ASSIGN_OR_RETURN(std::vector<uint8_t> flags,
                               SelectRetrievalHeads(*scores, shape, config.high_percent));
      if (config.type == QuantizerType::kDuo) {
        return NewDuoQuantizer(config, shape, std::move(flags));
      }
      for (uint8_t& f : flags) {
        f = static_cast<uint8_t>(f != 0 ? config.bits_high : config.bits_low);
      }
      return NewMixHQQuantizer(config, shape, std::move(flags));
    }
  }
  return Status::InvalidArgument("unknown quantizer type");
}

Result<std::unique_ptr<pipeline::Quantizer>> NewQuantizerForDecode(const QuantConfig& config,
                                                                   const KvShape& shape,
                                                                   std::span<const uint8_t> state) {
  KVSERVE_RETURN_IF_ERROR(AsCorruption(ValidateQuantConfig(config, shape)));
  const bool stateful = config.type == QuantizerType::kMixHQ || config.type == QuantizerType::kDuo;
  if (!stateful) {
    if (!state.empty()) return Status::Corruption("unexpected quantizer state in frame");
    return NewQuantizerForEncode(config, shape, nullptr);
  }
  const size_t pairs = static_cast<size_t>(shape.layers) * shape.kv_heads;
  if (state.size() != pairs) {
    return Status::Corruption("quantizer state holds " + std::to_string(state.size()) +
                              " bytes, expected layers*kv_heads = " + std::to_string(pairs));
  }
  std::vector<uint8_t> values(state.begin(), state.end());
  if (config.type == QuantizerType::kMixHQ) {
    for (uint8_t b : values) {
      if (b < 1 || b > 8) return Status::Corruption("mixhq state: head bits outside [1, 8]");
    }
    return NewMixHQQuantizer(config, shape, std::move(values));
  }
  for (uint8_t b : values) {
    if (b > 1) return Status::Corruption("duo state: retrieval flag not 0 or 1");
  }
  return NewDuoQuantizer(config, shape, std::move(values));
}

}  // namespace kvserve::quantizers
