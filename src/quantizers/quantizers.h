// Copyright kvserve authors. The quantizer family behind
// pipeline::CreateQuantizerForEncode/Decode, configured by a plain
// QuantConfig so it can be built and tested without a Profile. Not a public
// header.
//
// Every quantizer except raw is a PlannedQuantizer (planned_quantizer.h):
// per chunk it lists, for each head, maximal runs of tokens sharing one level
// count (or pruned), and quantises each run with the engine of
// grid_kernels.h. What differs per mode is only the plan:
//
//   mode      K axis / group          V axis / group          levels
//   uniform   axis_k / group          axis_v / group          levels_k|2^k, levels_v|2^v
//   kivi      channel / group tokens  token / whole head_dim  levels_k|2^k, levels_v|2^v
//   layermix  axis_k / group          axis_v / group          2^bits(layer), K and V alike
//   mixhq     channel / group tokens  token / whole head_dim  2^high retrieval, 2^low others
//   tokenmix  token / group channels  token / group channels  2^high sinks+recent, 2^low rest
//   duo       token / group channels  token / group channels  levels_k|2^k, levels_v|2^v kept
//
// "group" means channels per group on the token axis (must divide head_dim)
// and tokens per group on the channel axis (0 = the whole chunk).
#ifndef KVSERVE_QUANTIZERS_QUANTIZERS_H_
#define KVSERVE_QUANTIZERS_QUANTIZERS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::quantizers {

// Everything a quantizer reads from a profile; field meanings and bounds are
// those of the ParamId with the same name (profile.h).
struct QuantConfig {
  QuantizerType type = QuantizerType::kUniform;
  int bits_key = 4;
  int bits_value = 4;
  int levels_key = 0;    // 0 = 2^bits_key; used by uniform, kivi and duo
  int levels_value = 0;  // 0 = 2^bits_value; used by uniform, kivi and duo
  int group = 32;
  QuantAxis axis_key = QuantAxis::kChannel;
  QuantAxis axis_value = QuantAxis::kToken;
  bool symmetric = false;
  int residual = 0;
  int sinks = 16;
  int recent = 256;
  int bits_high = 4;
  int bits_low = 2;
  int high_percent = 50;
  ScaleDType scale_dtype = ScaleDType::kF16;
  int bits_first = 4;
  int bits_last = 2;
};

// OK when every field is within its ParamId bounds and, for the axes that
// group channels, `group` divides shape.head_dim; InvalidArgument naming the
// field otherwise. shape must be positive.
Status ValidateQuantConfig(const QuantConfig& config, const KvShape& shape);

// Level count for `bits` unless `explicit_levels` (2..256) is given.
int LevelsFor(int bits, int explicit_levels);

// layermix bits at `layer` of `num_layers`: first + round((last - first) *
// layer / (num_layers - 1)), rounding halves towards +infinity, in exact
// integer arithmetic: first + floor((2 * (last - first) * layer + d) / (2 * d))
// with d = num_layers - 1 (bits = first when num_layers == 1).
int LayerMixBits(int first, int last, int layer, int num_layers);

// Number of retrieval (layer, head) pairs: round-half-up(percent * pairs /
// 100) = floor((2 * percent * pairs + 100) / 200).
int64_t RetrievalHeadCount(int percent, int64_t pairs);

// Flags [layer][head] = 1 for the RetrievalHeadCount top-scoring pairs: order
// by score descending, ties by lower layer, then lower head. InvalidArgument
// if `scores` does not match shape (layers, kv_heads) or holds a non-finite
// score.
Result<std::vector<uint8_t>> SelectRetrievalHeads(const HeadScores& scores, const KvShape& shape,
                                                  int percent);

// Creates the quantizer `config.type` names for encoding. `scores` is
// required by mixhq and duo (InvalidArgument naming --head-scores when
// null) and ignored otherwise. InvalidArgument for an invalid config.
Result<std::unique_ptr<pipeline::Quantizer>> NewQuantizerForEncode(const QuantConfig& config,
                                                                   const KvShape& shape,
                                                                   const HeadScores* scores);

// Creates the quantizer for decoding from the state SerializeState wrote:
// mixhq: layers * kv_heads bytes of bits in [1, 8]; duo: layers * kv_heads
// bytes in {0, 1} (1 = retrieval head); every other mode: empty. Corruption
// when the state or the config (which came off the wire) is malformed.
Result<std::unique_ptr<pipeline::Quantizer>> NewQuantizerForDecode(const QuantConfig& config,
                                                                   const KvShape& shape,
                                                                   std::span<const uint8_t> state);

// Per-mode constructors; the config must be valid for the shape.
std::unique_ptr<pipeline::Quantizer> NewRawQuantizer();
std::unique_ptr<pipeline::Quantizer> NewUniformQuantizer(const QuantConfig& config,
                                                         const KvShape& shape);
std::unique_ptr<pipeline::Quantizer> NewKiviQuantizer(const QuantConfig& config,
                                                      const KvShape& shape);
std::unique_ptr<pipeline::Quantizer> NewLayerMixQuantizer(const QuantConfig& config,
                                                          const KvShape& shape);
std::unique_ptr<pipeline::Quantizer> NewTokenMixQuantizer(const QuantConfig& config,
                                                          const KvShape& shape);
// head_bits: [layer][head] bits in [1, 8], layers * kv_heads entries.
std::unique_ptr<pipeline::Quantizer> NewMixHQQuantizer(const QuantConfig& config,
                                                       const KvShape& shape,
                                                       std::vector<uint8_t> head_bits);
// retrieval: [layer][head] 1 = retrieval head, 0 = streaming head.
std::unique_ptr<pipeline::Quantizer> NewDuoQuantizer(const QuantConfig& config,
                                                     const KvShape& shape,
                                                     std::vector<uint8_t> retrieval);

}  // namespace kvserve::quantizers

#endif  // KVSERVE_QUANTIZERS_QUANTIZERS_H_
