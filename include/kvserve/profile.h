// Copyright kvserve authors. Compression profiles: a complete pipeline
// configuration (transform -> quantizer -> codec, plus the chunking), with
// typed parameters that have stable numbers and documented bounds.
//
// Canonical spec string (docs/format.md §Profiles):
//
//   spec      := component "+" component "+" component [ "+" component ]
//   component := name [ "(" key "=" value { "," key "=" value } ")" ]
//
// in the order transform, quantizer, codec, and optionally "pipeline" for
// the pipeline parameters (chunk), e.g.
//   "hadamard(seed=7)+kivi(k=2,v=2,residual=128)+rans+pipeline(chunk=512)"
// Whitespace is allowed around every token. Values are decimal integers,
// except enumerated parameters, which are words (axis_k=channel, scale=f32).
// A spec may also be a preset name ("kivi-2"). Parsing is strict: unknown
// components, unknown keys, keys that do not belong to the component, values
// out of bounds and duplicate keys are InvalidArgument errors that name the
// offending token and its 0-based byte position. The canonical print lists
// every parameter that differs from its default, in ParamId order, and
// prints the pipeline component only when chunk differs from its default;
// Parse(Print(p)) == p for every valid p. docs/profiles.md has the full
// parameter table, the validation rules and the presets.
//
// Thread safety: Profile is a value type.
#ifndef KVSERVE_PROFILE_H_
#define KVSERVE_PROFILE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"

namespace kvserve {

// Stable numbers: stored in frames.
enum class TransformType : uint8_t {
  kIdentity = 0,  // "identity"
  kDelta = 1,     // "delta": token delta against per-chunk anchor tokens (CacheGen)
  kHadamard = 2,  // "hadamard": signed Walsh-Hadamard along head_dim (QuaRot)
  kAffine = 3,    // "affine": per-channel shift/scale from the data (smoothing)
};

enum class QuantizerType : uint8_t {
  kRaw = 0,       // "raw": lossless, source dtype bytes
  kUniform = 1,   // "uniform": one bit width per K/V, chosen axis and group
  kKivi = 2,      // "kivi": K per-channel grouped over tokens, V per-token, raw recent tokens
  kLayerMix = 3,  // "layermix": bits interpolate from bits_first (layer 0) to bits_last
  kMixHQ = 4,     // "mixhq": retrieval heads high bits, streaming heads low bits
  kTokenMix = 5,  // "tokenmix": sink + recent tokens high bits, the rest low bits
  kDuo = 6,       // "duo": DuoAttention pruning; streaming heads keep sinks + recent only
};

enum class CodecType : uint8_t {
  kPack = 0,  // "pack": fixed-width bit packing
  kRans = 1,  // "rans": static per-segment rANS, interleaved states
  kZstd = 2,  // "zstd": bit packing then zstd
  kLz4 = 3,   // "lz4": bit packing then lz4
};

// Quantisation axis: statistics (scale/zero) shared along tokens within a
// channel ("channel") or along channels within a token ("token").
enum class QuantAxis : uint8_t { kToken = 0, kChannel = 1 };

// Storage of quantizer scales and zero points (ParamId::kScaleDType).
enum class ScaleDType : uint8_t { kF16 = 0, kF32 = 1 };

// Stable parameter numbers (zstd-style). Each parameter has one spec key,
// integer bounds and a default; GetParamInfo() gives them. Enumerated values
// (axis, scale dtype) are stored as integers and printed as words. A default
// outside [min, max] (anchor, levels_k, levels_v: 0) is a sentinel meaning
// "derived"; Set accepts it and it is equivalent to Clear.
// Which components a parameter applies to: see ParamApplies.
enum class ParamId : uint16_t {
  // transforms
  kSeed = 1,          // "seed": hadamard random-sign seed [0, 2^31-1], default 0x5eed
  kAnchor = 2,        // "anchor": delta anchor interval in tokens [1, 4096]; default 0 = chunk size
  // quantizers
  kBitsKey = 10,      // "k": key bits [1, 8], default 4 (uniform, kivi, duo)
  kBitsValue = 11,    // "v": value bits [1, 8], default 4 (uniform, kivi, duo)
  kLevelsKey = 12,    // "levels_k": explicit key level count [2, 256]; default 0 = 2^k
  kLevelsValue = 13,  // "levels_v": explicit value level count [2, 256]; default 0 = 2^v
  kGroup = 14,        // "group": group size along the shared axis [0, 4096], default 32; 0 = whole axis
  kAxisKey = 15,      // "axis_k": token|channel, default channel (uniform and layermix only)
  kAxisValue = 16,    // "axis_v": token|channel, default token (uniform and layermix only)
  kSymmetric = 17,    // "sym": 0 asymmetric (scale + zero), 1 symmetric (scale only); default 0
  kResidual = 18,     // "residual": most recent tokens kept raw [0, 1<<20], default 0
  kSinks = 19,        // "sinks": first tokens kept at high precision / never pruned [0, 4096], default 16
  kRecent = 20,       // "recent": recent window at high precision / never pruned [0, 1<<20], default 256
  kBitsHigh = 21,     // "high": bits for high-precision parts [1, 8], default 4; high >= low
  kBitsLow = 22,      // "low": bits for low-precision parts [1, 8], default 2
  kHighPercent = 23,  // "heads": percent of (layer, head) pairs that are retrieval heads [0, 100], default 50
  kScaleDType = 24,   // "scale": f16|f32 storage of scales and zero points, default f16
  kBitsFirst = 25,    // "first": layermix bits at layer 0 [1, 8], default 4
  kBitsLast = 26,     // "last": layermix bits at the last layer [1, 8], default 2
  // codecs
  kTableBits = 40,    // "table": rANS frequency precision bits [8, 15], default 12
  kZstdLevel = 41,    // "level": zstd level [1, 19], default 3
  kLz4Accel = 42,     // "accel": lz4 acceleration [1, 64], default 1
  // pipeline
  kChunkTokens = 50,  // "chunk": tokens per chunk record [16, 65536], default 256; multiple of group when grouped along tokens
};

// Which component a parameter belongs to.
enum class ParamScope : uint8_t { kTransform, kQuantizer, kCodec, kPipeline };

struct ParamInfo {
  ParamId id;
  std::string_view key;  // spec key, e.g. "k"
  ParamScope scope;
  int64_t min_value;
  int64_t max_value;
  int64_t default_value;
  std::string_view help;  // one line: meaning and unit
};

// All parameters, in ParamId order.
std::span<const ParamInfo> AllParams();
// Returns the ParamInfo for `id`; NotFound for an unknown number.
Result<ParamInfo> GetParamInfo(ParamId id);
// Names of components as they appear in specs ("hadamard", "kivi", "rans").
std::string_view TransformName(TransformType t);
std::string_view QuantizerName(QuantizerType q);
std::string_view CodecName(CodecType c);

class Profile {
 public:
  // identity + raw + pack: lossless passthrough ("none").
  Profile();

  // Parses a canonical spec or a preset name. See the grammar above.
  static Result<Profile> Parse(std::string_view spec);
  // Parses the JSON form produced by ToJson().
  static Result<Profile> FromJson(std::string_view json);

  // Canonical spec string. Never fails for a valid profile.
  std::string ToString() const;
  // {"spec":"...","transform":{"name":"hadamard","seed":7},"quantizer":{...},
  //  "codec":{...},"chunk":256}: every applicable parameter at its effective
  // value, enumerated ones as words. FromJson accepts any subset of the
  // parameters, rejects unknown fields, and checks "spec" (if present)
  // against the components.
  std::string ToJson() const;

  // OK when every parameter is within bounds and applies to the chosen
  // components, and the cross-parameter rules hold; InvalidArgument naming
  // the rule otherwise. Rules (docs/profiles.md §Validation):
  //  1. raw requires the identity transform (raw stores source bytes).
  //  2. levels_k (levels_v) != 0 requires k (v) at its default.
  //  3. mixhq, tokenmix: high >= low.
  //  4. group != 0 and the quantizer groups along tokens (kivi; any other
  //     non-raw quantizer with axis_k or axis_v = channel): chunk % group == 0.
  //  5. delta: anchor <= chunk.
  // Checks that need the cache shape (group vs head_dim, head scores) are
  // made when an encoder is created.
  Status Validate() const;

  TransformType transform() const { return transform_; }
  QuantizerType quantizer() const { return quantizer_; }
  CodecType codec() const { return codec_; }
  void set_transform(TransformType t) { transform_ = t; }
  void set_quantizer(QuantizerType q) { quantizer_ = q; }
  void set_codec(CodecType c) { codec_ = c; }

  // Value of `id`: the explicitly set value, else the parameter's default.
  int64_t Get(ParamId id) const;
  // True when `id` was set explicitly (and so is printed if != default).
  bool IsSet(ParamId id) const;
  // Sets `id`. OutOfRange if outside bounds; InvalidArgument if the
  // parameter does not apply to the currently chosen component.
  Status Set(ParamId id, int64_t value);
  void Clear(ParamId id);

  // True when the pipeline reconstructs the input bit-exactly: exactly when
  // the quantizer is raw (which, by rule 1, comes with the identity transform).
  bool IsLossless() const;

  // Compares components and effective values (Get) of every parameter, so a
  // parameter set explicitly to its default equals an unset one.
  bool operator==(const Profile& other) const;

 private:
  TransformType transform_ = TransformType::kIdentity;
  QuantizerType quantizer_ = QuantizerType::kRaw;
  CodecType codec_ = CodecType::kPack;
  // Indexed by ParamId number; nullopt = default.
  std::array<std::optional<int64_t>, 64> values_{};
};

// Whether parameter `id` applies to the given component choice:
//   seed: hadamard; anchor: delta;
//   k, v, levels_k, levels_v: uniform, kivi, duo (the others take their
//     bits from first/last or high/low);
//   group, sym, scale, residual: every quantizer except raw;
//   axis_k, axis_v: uniform and layermix (the others fix their axes);
//   sinks, recent: tokenmix, duo; high, low: mixhq, tokenmix;
//   heads: mixhq, duo; first, last: layermix;
//   table: rans; level: zstd; accel: lz4; chunk: always.
bool ParamApplies(ParamId id, TransformType t, QuantizerType q, CodecType c);

struct Preset {
  std::string_view name;         // "kivi-2"
  std::string_view spec;         // canonical spec string
  std::string_view description;  // one line
};
// The built-in presets (none, kivi-2, kivi-4, cachegen, duo, mixhq, and
// kvserve recompositions), in a stable order.
std::span<const Preset> Presets();

}  // namespace kvserve

#endif  // KVSERVE_PROFILE_H_
