// Copyright kvserve authors. Profiles: the parameter table, the spec
// grammar (parse / canonical print), JSON, validation and the presets.
// docs/profiles.md is the user-facing description of everything here.
#include "kvserve/profile.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using Json = nlohmann::json;

constexpr int64_t kAxisToken = static_cast<int64_t>(QuantAxis::kToken);
constexpr int64_t kAxisChannel = static_cast<int64_t>(QuantAxis::kChannel);

// The parameter table, in ParamId order. Defaults that lie outside
// [min_value, max_value] are sentinels meaning "derived" (see profile.h).
constexpr std::array<ParamInfo, 23> kParams = {{
    {ParamId::kSeed, "seed", ParamScope::kTransform, 0, 2147483647, 0x5eed,
     "hadamard: seed of the random signs"},
    {ParamId::kAnchor, "anchor", ParamScope::kTransform, 1, 4096, 0,
     "delta: tokens between anchor tokens; 0 = one anchor per chunk"},
    {ParamId::kBitsKey, "k", ParamScope::kQuantizer, 1, 8, 4, "key bits"},
    {ParamId::kBitsValue, "v", ParamScope::kQuantizer, 1, 8, 4, "value bits"},
    {ParamId::kLevelsKey, "levels_k", ParamScope::kQuantizer, 2, 256, 0,
     "explicit key level count; 0 = 2^k"},
    {ParamId::kLevelsValue, "levels_v", ParamScope::kQuantizer, 2, 256, 0,
     "explicit value level count; 0 = 2^v"},
    {ParamId::kGroup, "group", ParamScope::kQuantizer, 0, 4096, 32,
     "elements sharing one scale/zero along the shared axis; 0 = whole axis"},
    {ParamId::kAxisKey, "axis_k", ParamScope::kQuantizer, 0, 1, kAxisChannel,
     "key statistics axis: token|channel"},
    {ParamId::kAxisValue, "axis_v", ParamScope::kQuantizer, 0, 1, kAxisToken,
     "value statistics axis: token|channel"},
    {ParamId::kSymmetric, "sym", ParamScope::kQuantizer, 0, 1, 0,
     "0 asymmetric (scale + zero), 1 symmetric (scale only)"},
    {ParamId::kResidual, "residual", ParamScope::kQuantizer, 0, 1 << 20, 0,
     "most recent tokens kept raw (source bytes)"},
    {ParamId::kSinks, "sinks", ParamScope::kQuantizer, 0, 4096, 16,
     "first tokens kept at high precision / never pruned"},
    {ParamId::kRecent, "recent", ParamScope::kQuantizer, 0, 1 << 20, 256,
     "most recent tokens kept at high precision / never pruned"},
    {ParamId::kBitsHigh, "high", ParamScope::kQuantizer, 1, 8, 4, "bits of high-precision parts"},
    {ParamId::kBitsLow, "low", ParamScope::kQuantizer, 1, 8, 2, "bits of low-precision parts"},
    {ParamId::kHighPercent, "heads", ParamScope::kQuantizer, 0, 100, 50,
     "percent of (layer, kv_head) pairs treated as retrieval heads"},
    {ParamId::kScaleDType, "scale", ParamScope::kQuantizer, 0, 1, 0,
     "storage of scales and zero points: f16|f32"},
    {ParamId::kBitsFirst, "first", ParamScope::kQuantizer, 1, 8, 4, "layermix: bits at layer 0"},
    {ParamId::kBitsLast, "last", ParamScope::kQuantizer, 1, 8, 2,
     "layermix: bits at the last layer"},
    {ParamId::kTableBits, "table", ParamScope::kCodec, 8, 15, 12,
     "rans: frequency table precision bits"},
    {ParamId::kZstdLevel, "level", ParamScope::kCodec, 1, 19, 3, "zstd: compression level"},
    {ParamId::kLz4Accel, "accel", ParamScope::kCodec, 1, 64, 1, "lz4: acceleration"},
    {ParamId::kChunkTokens, "chunk", ParamScope::kPipeline, 16, 65536, 256,
     "tokens per chunk record"},
}};

constexpr std::array<std::string_view, 4> kTransformNames = {"identity", "delta", "hadamard",
                                                             "affine"};
constexpr std::array<std::string_view, 7> kQuantizerNames = {
    "raw", "uniform", "kivi", "layermix", "mixhq", "tokenmix", "duo"};
constexpr std::array<std::string_view, 4> kCodecNames = {"pack", "rans", "zstd", "lz4"};
constexpr std::string_view kPipelineName = "pipeline";

constexpr std::array<Preset, 13> kPresets = {{
    {"none", "identity+raw+pack", "no compression: the source bytes, bit-exact"},
    {"zstd", "identity+raw+zstd", "lossless: source bytes through zstd level 3"},
    {"lz4", "identity+raw+lz4", "lossless: source bytes through lz4"},
    {"kivi-2", "identity+kivi(k=2,v=2,residual=128)+pack",
     "KIVI 2-bit: K per-channel, V per-token, group 32, last 128 tokens raw"},
    {"kivi-4", "identity+kivi(residual=128)+pack",
     "KIVI 4-bit: K per-channel, V per-token, group 32, last 128 tokens raw"},
    {"cachegen", "delta(anchor=10)+layermix+rans",
     "CacheGen: token deltas, 4 bits at layer 0 falling to 2 at the last layer, rANS"},
    {"duo", "identity+duo(k=8,v=8)+pack",
     "DuoAttention: 50% retrieval heads keep all tokens, streaming heads keep 16 sinks + 256 "
     "recent, 8-bit"},
    {"mixhq", "identity+mixhq+pack",
     "MixHQ: top 50% retrieval heads 4-bit, streaming heads 2-bit, bit-packed"},
    {"kvserve-h2r", "hadamard+kivi(k=2,v=2,residual=128)+rans",
     "kvserve: Hadamard rotation, KIVI 2-bit, rANS"},
    {"kvserve-h4r", "hadamard+kivi(residual=128)+rans",
     "kvserve: Hadamard rotation, KIVI 4-bit, rANS"},
    {"kvserve-hmix", "hadamard+mixhq(heads=25)+rans",
     "kvserve: Hadamard rotation, top 25% retrieval heads 4-bit, the rest 2-bit, rANS"},
    {"kvserve-htok", "hadamard+tokenmix+rans",
     "kvserve: Hadamard rotation, 16 sinks + 256 recent tokens 4-bit, the rest 2-bit, rANS"},
    {"kvserve-a4z", "affine+kivi(residual=128)+zstd",
     "kvserve: per-channel affine smoothing, KIVI 4-bit, zstd"},
}};

const ParamInfo* FindParam(ParamId id) {
  for (const ParamInfo& p : kParams) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

const ParamInfo* FindParamByKey(std::string_view key) {
  for (const ParamInfo& p : kParams) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

size_t Index(ParamId id) { return static_cast<size_t>(id); }

// Enumerated parameters print as words.
bool IsEnumParam(ParamId id) {
  return id == ParamId::kAxisKey || id == ParamId::kAxisValue || id == ParamId::kScaleDType;
}

std::string_view EnumWord(ParamId id, int64_t value) {
  if (id == ParamId::kScaleDType) return value == 1 ? "f32" : "f16";
  return value == kAxisChannel ? "channel" : "token";
}

// Parses an enumerated word; false if it is not one of the param's words.
bool ParseEnumWord(ParamId id, std::string_view word, int64_t* value) {
  if (id == ParamId::kScaleDType) {
    if (word == "f16") *value = 0;
    else if (word == "f32") *value = 1;
    else return false;
    return true;
  }
  if (word == "token") *value = kAxisToken;
  else if (word == "channel") *value = kAxisChannel;
  else return false;
  return true;
}

std::string_view EnumChoices(ParamId id) {
  return id == ParamId::kScaleDType ? "f16|f32" : "token|channel";
}

std::string FormatValue(ParamId id, int64_t value) {
  if (IsEnumParam(id)) return std::string(EnumWord(id, value));
  return std::to_string(value);
}

bool InBounds(const ParamInfo& info, int64_t value) {
  return value == info.default_value || (value >= info.min_value && value <= info.max_value);
}

std::string RangeText(const ParamInfo& info) {
  std::string s = "[" + std::to_string(info.min_value) + ", " + std::to_string(info.max_value) + "]";
  if (info.default_value < info.min_value || info.default_value > info.max_value) {
    s += " or " + std::to_string(info.default_value) + " (default)";
  }
  return s;
}

std::string OutOfRangeText(const ParamInfo& info, int64_t value) {
  if (IsEnumParam(info.id)) {
    return std::string(info.key) + "=" + std::to_string(value) + " is not one of " +
           std::string(EnumChoices(info.id));
  }
  return std::string(info.key) + "=" + std::to_string(value) + " out of range " + RangeText(info);
}

// Quotes untrusted text for an error message: printable ASCII verbatim,
// anything else as \xNN, at most 64 bytes.
std::string Quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  size_t n = std::min<size_t>(text.size(), 64);
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > n) out += "...";
  out += "'";
  return out;
}

template <size_t N>
std::string JoinNames(const std::array<std::string_view, N>& names) {
  std::string s;
  for (size_t i = 0; i < N; ++i) {
    if (i) s += "|";
    s += names[i];
  }
  return s;
}

template <size_t N>
int FindName(const std::array<std::string_view, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string_view ScopeName(ParamScope s) {
  switch (s) {
    case ParamScope::kTransform: return "transform";
    case ParamScope::kQuantizer: return "quantizer";
    case ParamScope::kCodec: return "codec";
    case ParamScope::kPipeline: return "pipeline";
  }
  return "unknown";
}

// Whether the quantizer computes statistics along tokens for K or V (so
// token groups must tile a chunk).
bool GroupsAlongTokens(const Profile& p) {
  switch (p.quantizer()) {
    case QuantizerType::kRaw: return false;
    case QuantizerType::kKivi:   // keys per channel, grouped over tokens
    case QuantizerType::kMixHQ:  // KIVI-style axes
      return true;
    case QuantizerType::kTokenMix:
    case QuantizerType::kDuo:
      return false;  // both kinds per token
    default:
      return p.Get(ParamId::kAxisKey) == kAxisChannel ||
             p.Get(ParamId::kAxisValue) == kAxisChannel;
  }
}

// ------------------------------------------------------------------ parser

struct RawParam {
  std::string_view key;
  std::string_view value;
  size_t key_pos = 0;
  size_t value_pos = 0;
};

struct RawComponent {
  std::string_view name;
  size_t pos = 0;
  std::vector<RawParam> params;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

Status SyntaxError(size_t pos, std::string_view what) {
  return Status::InvalidArgument("profile spec: position " + std::to_string(pos) + ": " +
                                 std::string(what));
}

// Splits `spec` into components (syntax only; names are resolved later).
class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  Status Run(std::vector<RawComponent>* out) {
    while (true) {
      RawComponent comp;
      KVSERVE_RETURN_IF_ERROR(Component(&comp));
      out->push_back(comp);
      SkipSpace();
      if (pos_ == s_.size()) return Status::Ok();
      if (s_[pos_] != '+') return Unexpected("'+' or end of spec");
      ++pos_;
      if (out->size() >= 4) return SyntaxError(pos_ - 1, "too many components (at most 4)");
    }
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
  }
  Status Unexpected(std::string_view expected) {
    if (pos_ >= s_.size()) return SyntaxError(pos_, "expected " + std::string(expected) + ", got end of spec");
    return SyntaxError(pos_, "expected " + std::string(expected) + ", got " +
                                 Quote(s_.substr(pos_, 1)));
  }
  // A run of name characters; empty if none.
  std::string_view Word() {
    size_t b = pos_;
    while (pos_ < s_.size() && IsNameChar(s_[pos_])) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  Status Component(RawComponent* comp) {
    SkipSpace();
    comp->pos = pos_;
    comp->name = Word();
    if (comp->name.empty()) return Unexpected("a component name");
    SkipSpace();
    if (pos_ == s_.size() || s_[pos_] != '(') return Status::Ok();
    ++pos_;
    while (true) {
      RawParam p;
      SkipSpace();
      p.key_pos = pos_;
      p.key = Word();
      if (p.key.empty()) return Unexpected("a parameter name");
      SkipSpace();
      if (pos_ == s_.size() || s_[pos_] != '=') return Unexpected("'='");
      ++pos_;
      SkipSpace();
      p.value_pos = pos_;
      p.value = Word();
      if (p.value.empty()) return Unexpected("a value");
      comp->params.push_back(p);
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ')') {
        ++pos_;
        return Status::Ok();
      }
      return Unexpected("',' or ')'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Decimal integer with optional sign; false on any other text or overflow.
bool ParseInt(std::string_view text, int64_t* value) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) negative = text[i++] == '-';
  if (i == text.size()) return false;
  uint64_t v = 0;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9') return false;
    if (v > (uint64_t{1} << 62)) return false;  // far beyond every bound
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *value = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

// Parses one parameter value of `info` written as `text`.
Status ParseValue(const ParamInfo& info, std::string_view text, size_t pos, int64_t* value) {
  if (IsEnumParam(info.id)) {
    if (!ParseEnumWord(info.id, text, value)) {
      return SyntaxError(pos, std::string(info.key) + "=" + Quote(text) + " is not one of " +
                                  std::string(EnumChoices(info.id)));
    }
    return Status::Ok();
  }
  if (!ParseInt(text, value)) {
    return SyntaxError(pos, "value " + Quote(text) + " of '" + std::string(info.key) +
                                "' is not a decimal integer");
  }
  if (!InBounds(info, *value)) return SyntaxError(pos, OutOfRangeText(info, *value));
  return Status::Ok();
}

// Applies the parameters of one component. `component_label` is e.g.
// "transform 'delta'" for messages.
Status ApplyParams(const RawComponent& comp, ParamScope scope, std::string_view component_label,
                   Profile* profile) {
  std::array<bool, 64> seen{};
  for (const RawParam& raw : comp.params) {
    const ParamInfo* info = FindParamByKey(raw.key);
    if (info == nullptr) {
      return SyntaxError(raw.key_pos, "unknown parameter " + Quote(raw.key) + " in " +
                                          std::string(component_label));
    }
    bool applies = info->scope == scope &&
                   ParamApplies(info->id, profile->transform(), profile->quantizer(),
                                profile->codec());
    if (!applies) {
      std::string m = "'" + std::string(info->key) + "' does not apply to " +
                      std::string(component_label);
      if (info->scope != scope) m += " (it is a " + std::string(ScopeName(info->scope)) + " parameter)";
      return SyntaxError(raw.key_pos, m);
    }
    if (seen[Index(info->id)]) {
      return SyntaxError(raw.key_pos, "duplicate parameter '" + std::string(info->key) + "'");
    }
    seen[Index(info->id)] = true;
    int64_t value = 0;
    KVSERVE_RETURN_IF_ERROR(ParseValue(*info, raw.value, raw.value_pos, &value));
    Status s = profile->Set(info->id, value);
    if (!s.ok()) return SyntaxError(raw.key_pos, s.message());
  }
  return Status::Ok();
}

std::string Label(std::string_view kind, std::string_view name) {
  return std::string(kind) + " '" + std::string(name) + "'";
}

// Message for a component name in the wrong place or unknown.
Status BadComponent(const RawComponent& c, std::string_view expected_kind, std::string_view choices) {
  std::string m = "expected a " + std::string(expected_kind) + " (" + std::string(choices) +
                  "), got " + Quote(c.name);
  if (FindName(kTransformNames, c.name) >= 0) m += ", a transform";
  else if (FindName(kQuantizerNames, c.name) >= 0) m += ", a quantizer";
  else if (FindName(kCodecNames, c.name) >= 0) m += ", a codec";
  m += "; a spec is transform+quantizer+codec[+pipeline(...)] or a preset name";
  return SyntaxError(c.pos, m);
}

// Component JSON: {"name": "...", key: value...} with every applicable
// parameter of `scope` at its effective value.
Json ComponentJson(const Profile& p, ParamScope scope, std::string_view name) {
  Json obj = Json::object();
  obj["name"] = std::string(name);
  for (const ParamInfo& info : kParams) {
    if (info.scope != scope) continue;
    if (!ParamApplies(info.id, p.transform(), p.quantizer(), p.codec())) continue;
    int64_t v = p.Get(info.id);
    if (IsEnumParam(info.id)) {
      obj[std::string(info.key)] = std::string(EnumWord(info.id, v));
    } else {
      obj[std::string(info.key)] = v;
    }
  }
  return obj;
}

Status JsonError(std::string_view what) {
  return Status::InvalidArgument("profile json: " + std::string(what));
}

// Reads one parameter value from JSON.
Status JsonValue(const ParamInfo& info, const Json& j, int64_t* value) {
  std::string key(info.key);
  if (IsEnumParam(info.id)) {
    if (!j.is_string() || !ParseEnumWord(info.id, j.get_ref<const std::string&>(), value)) {
      return JsonError("'" + key + "' must be one of " + std::string(EnumChoices(info.id)));
    }
    return Status::Ok();
  }
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > (uint64_t{1} << 62)) return JsonError("'" + key + "' is out of range");
    *value = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    *value = j.get<int64_t>();
  } else {
    return JsonError("'" + key + "' must be an integer");
  }
  if (!InBounds(info, *value)) return JsonError(OutOfRangeText(info, *value));
  return Status::Ok();
}

Status JsonComponentParams(const Json& obj, ParamScope scope, std::string_view label,
                           Profile* p) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (it.key() == "name") continue;
    const ParamInfo* info = FindParamByKey(it.key());
    if (info == nullptr) {
      return JsonError("unknown parameter " + Quote(it.key()) + " in " + std::string(label));
    }
    if (info->scope != scope ||
        !ParamApplies(info->id, p->transform(), p->quantizer(), p->codec())) {
      return JsonError("'" + std::string(info->key) + "' does not apply to " + std::string(label));
    }
    int64_t v = 0;
    KVSERVE_RETURN_IF_ERROR(JsonValue(*info, it.value(), &v));
    KVSERVE_RETURN_IF_ERROR(p->Set(info->id, v));
  }
  return Status::Ok();
}

// Reads the "name" of component `field` and resolves it in `names`.
template <size_t N>
Result<int> JsonComponentName(const Json& root, const char* field,
                              const std::array<std::string_view, N>& names) {
  auto it = root.find(field);
  if (it == root.end() || !it->is_object()) {
    return JsonError(std::string("missing object '") + field + "'");
  }
  auto name = it->find("name");
  if (name == it->end() || !name->is_string()) {
    return JsonError(std::string("'") + field + "' has no string 'name'");
  }
  int index = FindName(names, name->get_ref<const std::string&>());
  if (index < 0) {
    return JsonError(std::string("unknown ") + field + " " +
                     Quote(name->get_ref<const std::string&>()) + " (expected " +
                     JoinNames(names) + ")");
  }
  return index;
}

Result<Profile> FromJsonImpl(std::string_view text) {
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return JsonError("not valid JSON");
  if (!root.is_object()) return JsonError("top level must be an object");
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& k = it.key();
    if (k != "spec" && k != "transform" && k != "quantizer" && k != "codec" && k != "chunk") {
      return JsonError("unknown field " + Quote(k));
    }
  }
  Profile p;
  KVSERVE_ASSIGN_OR_RETURN(int t, JsonComponentName(root, "transform", kTransformNames));
  KVSERVE_ASSIGN_OR_RETURN(int q, JsonComponentName(root, "quantizer", kQuantizerNames));
  KVSERVE_ASSIGN_OR_RETURN(int c, JsonComponentName(root, "codec", kCodecNames));
  p.set_transform(static_cast<TransformType>(t));
  p.set_quantizer(static_cast<QuantizerType>(q));
  p.set_codec(static_cast<CodecType>(c));
  KVSERVE_RETURN_IF_ERROR(JsonComponentParams(root["transform"], ParamScope::kTransform,
                                              Label("transform", TransformName(p.transform())), &p));
  KVSERVE_RETURN_IF_ERROR(JsonComponentParams(root["quantizer"], ParamScope::kQuantizer,
                                              Label("quantizer", QuantizerName(p.quantizer())), &p));
  KVSERVE_RETURN_IF_ERROR(JsonComponentParams(root["codec"], ParamScope::kCodec,
                                              Label("codec", CodecName(p.codec())), &p));
  auto chunk = root.find("chunk");
  if (chunk != root.end()) {
    const ParamInfo& info = *FindParam(ParamId::kChunkTokens);
    int64_t v = 0;
    KVSERVE_RETURN_IF_ERROR(JsonValue(info, *chunk, &v));
    KVSERVE_RETURN_IF_ERROR(p.Set(ParamId::kChunkTokens, v));
  }
  Status valid = p.Validate();
  if (!valid.ok()) return valid.WithContext("profile json");
  auto spec = root.find("spec");
  if (spec != root.end()) {
    if (!spec->is_string()) return JsonError("'spec' must be a string");
    Result<Profile> from_spec = Profile::Parse(spec->get_ref<const std::string&>());
    if (!from_spec.ok()) return from_spec.status().WithContext("profile json: 'spec'");
    if (!(*from_spec == p)) {
      return JsonError("'spec' " + Quote(spec->get_ref<const std::string&>()) +
                       " disagrees with the components (" + p.ToString() + ")");
    }
  }
  return p;
}

}  // namespace

std::span<const ParamInfo> AllParams() { return kParams; }

Result<ParamInfo> GetParamInfo(ParamId id) {
  const ParamInfo* info = FindParam(id);
  if (info == nullptr) {
    return Status::NotFound("no parameter number " + std::to_string(static_cast<int>(id)));
  }
  return *info;
}

std::string_view TransformName(TransformType t) {
  auto i = static_cast<size_t>(t);
  return i < kTransformNames.size() ? kTransformNames[i] : "unknown";
}

std::string_view QuantizerName(QuantizerType q) {
  auto i = static_cast<size_t>(q);
  return i < kQuantizerNames.size() ? kQuantizerNames[i] : "unknown";
}

std::string_view CodecName(CodecType c) {
  auto i = static_cast<size_t>(c);
  return i < kCodecNames.size() ? kCodecNames[i] : "unknown";
}

bool ParamApplies(ParamId id, TransformType t, QuantizerType q, CodecType c) {
  const bool quantizes = q != QuantizerType::kRaw;
  switch (id) {
    case ParamId::kSeed: return t == TransformType::kHadamard;
    case ParamId::kAnchor: return t == TransformType::kDelta;
    case ParamId::kBitsKey:
    case ParamId::kBitsValue:
    case ParamId::kLevelsKey:
    case ParamId::kLevelsValue:
      return q == QuantizerType::kUniform || q == QuantizerType::kKivi || q == QuantizerType::kDuo;
    case ParamId::kGroup:
    case ParamId::kSymmetric:
    case ParamId::kScaleDType:
    case ParamId::kResidual:
      return quantizes;
    case ParamId::kAxisKey:
    case ParamId::kAxisValue:
      // kivi and mixhq fix K per-channel / V per-token; tokenmix and duo
      // fix both per-token (docs/format.md §5.3).
      return q == QuantizerType::kUniform || q == QuantizerType::kLayerMix;
    case ParamId::kSinks:
    case ParamId::kRecent:
      return q == QuantizerType::kTokenMix || q == QuantizerType::kDuo;
    case ParamId::kBitsHigh:
    case ParamId::kBitsLow:
      return q == QuantizerType::kMixHQ || q == QuantizerType::kTokenMix;
    case ParamId::kHighPercent:
      return q == QuantizerType::kMixHQ || q == QuantizerType::kDuo;
    case ParamId::kBitsFirst:
    case ParamId::kBitsLast:
      return q == QuantizerType::kLayerMix;
    case ParamId::kTableBits: return c == CodecType::kRans;
    case ParamId::kZstdLevel: return c == CodecType::kZstd;
    case ParamId::kLz4Accel: return c == CodecType::kLz4;
    case ParamId::kChunkTokens: return true;
  }
  return false;
}

std::span<const Preset> Presets() { return kPresets; }

Profile::Profile() = default;

int64_t Profile::Get(ParamId id) const {
  const ParamInfo* info = FindParam(id);
  if (info == nullptr) return 0;
  const auto& v = values_[Index(id)];
  return v.has_value() ? *v : info->default_value;
}

bool Profile::IsSet(ParamId id) const {
  return FindParam(id) != nullptr && values_[Index(id)].has_value();
}

Status Profile::Set(ParamId id, int64_t value) {
  const ParamInfo* info = FindParam(id);
  if (info == nullptr) {
    return Status::InvalidArgument("no parameter number " + std::to_string(static_cast<int>(id)));
  }
  if (!InBounds(*info, value)) return Status::OutOfRange(OutOfRangeText(*info, value));
  if (!ParamApplies(id, transform_, quantizer_, codec_)) {
    return Status::InvalidArgument("'" + std::string(info->key) + "' does not apply to " +
                                   ToString());
  }
  values_[Index(id)] = value;
  return Status::Ok();
}

void Profile::Clear(ParamId id) {
  if (FindParam(id) != nullptr) values_[Index(id)].reset();
}

bool Profile::IsLossless() const { return quantizer_ == QuantizerType::kRaw; }

bool Profile::operator==(const Profile& other) const {
  if (transform_ != other.transform_ || quantizer_ != other.quantizer_ || codec_ != other.codec_) {
    return false;
  }
  for (const ParamInfo& info : kParams) {
    if (Get(info.id) != other.Get(info.id)) return false;
  }
  return true;
}

Status Profile::Validate() const {
  if (static_cast<size_t>(transform_) >= kTransformNames.size()) {
    return Status::InvalidArgument("unknown transform number " +
                                   std::to_string(static_cast<int>(transform_)));
  }
  if (static_cast<size_t>(quantizer_) >= kQuantizerNames.size()) {
    return Status::InvalidArgument("unknown quantizer number " +
                                   std::to_string(static_cast<int>(quantizer_)));
  }
  if (static_cast<size_t>(codec_) >= kCodecNames.size()) {
    return Status::InvalidArgument("unknown codec number " +
                                   std::to_string(static_cast<int>(codec_)));
  }
  // Slots with no table entry must stay empty (Set never fills them).
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].has_value() && FindParam(static_cast<ParamId>(i)) == nullptr) {
      return Status::Internal("value stored for unknown parameter number " + std::to_string(i));
    }
  }
  for (const ParamInfo& info : kParams) {
    if (!IsSet(info.id)) continue;
    int64_t v = Get(info.id);
    if (!InBounds(info, v)) return Status::InvalidArgument(OutOfRangeText(info, v));
    if (!ParamApplies(info.id, transform_, quantizer_, codec_)) {
      std::string label;
      switch (info.scope) {
        case ParamScope::kTransform: label = Label("transform", TransformName(transform_)); break;
        case ParamScope::kQuantizer: label = Label("quantizer", QuantizerName(quantizer_)); break;
        case ParamScope::kCodec: label = Label("codec", CodecName(codec_)); break;
        case ParamScope::kPipeline: label = "the pipeline"; break;
      }
      return Status::InvalidArgument("'" + std::string(info.key) + "' does not apply to " + label);
    }
  }
  // Rule 1: raw stores the source bytes; a transform would be ignored.
  if (quantizer_ == QuantizerType::kRaw && transform_ != TransformType::kIdentity) {
    return Status::InvalidArgument("quantizer 'raw' stores source bytes: transform must be "
                                   "'identity', not '" + std::string(TransformName(transform_)) +
                                   "'");
  }
  // Rule 2: an explicit level count replaces the bit width.
  const std::pair<ParamId, ParamId> kLevelPairs[] = {{ParamId::kLevelsKey, ParamId::kBitsKey},
                                                     {ParamId::kLevelsValue, ParamId::kBitsValue}};
  for (auto [levels, bits] : kLevelPairs) {
    const ParamInfo& bits_info = *FindParam(bits);
    if (Get(levels) != 0 && Get(bits) != bits_info.default_value) {
      return Status::InvalidArgument(
          std::string(FindParam(levels)->key) + "=" + std::to_string(Get(levels)) +
          " replaces " + std::string(bits_info.key) + ": leave " + std::string(bits_info.key) +
          " at its default (" + std::to_string(bits_info.default_value) + ")");
    }
  }
  // Rule 3: high-precision parts get at least as many bits as the rest.
  if ((quantizer_ == QuantizerType::kMixHQ || quantizer_ == QuantizerType::kTokenMix) &&
      Get(ParamId::kBitsHigh) < Get(ParamId::kBitsLow)) {
    return Status::InvalidArgument("high=" + std::to_string(Get(ParamId::kBitsHigh)) +
                                   " is below low=" + std::to_string(Get(ParamId::kBitsLow)));
  }
  // Rule 4: token groups tile a chunk.
  const int64_t chunk = Get(ParamId::kChunkTokens);
  const int64_t group = Get(ParamId::kGroup);
  if (GroupsAlongTokens(*this) && group != 0 && chunk % group != 0) {
    return Status::InvalidArgument(
        "chunk=" + std::to_string(chunk) + " is not a multiple of group=" + std::to_string(group) +
        " (quantizer '" + std::string(QuantizerName(quantizer_)) + "' groups along tokens)");
  }
  // Rule 5: anchors lie within a chunk (chunks decode independently).
  if (transform_ == TransformType::kDelta && Get(ParamId::kAnchor) > chunk) {
    return Status::InvalidArgument("anchor=" + std::to_string(Get(ParamId::kAnchor)) +
                                   " exceeds chunk=" + std::to_string(chunk));
  }
  return Status::Ok();
}

std::string Profile::ToString() const {
  auto append_params = [this](ParamScope scope, std::string* out) {
    bool first = true;
    for (const ParamInfo& info : kParams) {
      if (info.scope != scope || !IsSet(info.id)) continue;
      int64_t v = Get(info.id);
      if (v == info.default_value) continue;
      *out += first ? "(" : ",";
      first = false;
      *out += info.key;
      *out += "=";
      *out += FormatValue(info.id, v);
    }
    if (!first) *out += ")";
  };
  std::string s(TransformName(transform_));
  append_params(ParamScope::kTransform, &s);
  s += "+";
  s += QuantizerName(quantizer_);
  append_params(ParamScope::kQuantizer, &s);
  s += "+";
  s += CodecName(codec_);
  append_params(ParamScope::kCodec, &s);
  std::string pipeline;
  append_params(ParamScope::kPipeline, &pipeline);
  if (!pipeline.empty()) {
    s += "+";
    s += kPipelineName;
    s += pipeline;
  }
  return s;
}

Result<Profile> Profile::Parse(std::string_view spec) {
  // A preset name, possibly surrounded by whitespace.
  size_t b = 0, e = spec.size();
  while (b < e && IsSpace(spec[b])) ++b;
  while (e > b && IsSpace(spec[e - 1])) --e;
  for (const Preset& preset : kPresets) {
    if (spec.substr(b, e - b) == preset.name) {
      Result<Profile> p = Parse(preset.spec);
      if (!p.ok()) return p.status().WithContext("preset '" + std::string(preset.name) + "'");
      return p;
    }
  }

  std::vector<RawComponent> comps;
  KVSERVE_RETURN_IF_ERROR(Lexer(spec).Run(&comps));
  if (comps.size() < 3) {
    if (comps.size() == 1) {
      return SyntaxError(comps[0].pos, "unknown preset " + Quote(comps[0].name) +
                                           "; a spec is transform+quantizer+codec or a preset name");
    }
    return SyntaxError(spec.size(), "expected 3 components (transform+quantizer+codec), got " +
                                        std::to_string(comps.size()));
  }
  int t = FindName(kTransformNames, comps[0].name);
  if (t < 0) return BadComponent(comps[0], "transform", JoinNames(kTransformNames));
  int q = FindName(kQuantizerNames, comps[1].name);
  if (q < 0) return BadComponent(comps[1], "quantizer", JoinNames(kQuantizerNames));
  int c = FindName(kCodecNames, comps[2].name);
  if (c < 0) return BadComponent(comps[2], "codec", JoinNames(kCodecNames));
  if (comps.size() == 4 && comps[3].name != kPipelineName) {
    return SyntaxError(comps[3].pos, "expected 'pipeline' as the 4th component, got " +
                                         Quote(comps[3].name));
  }
  Profile p;
  p.set_transform(static_cast<TransformType>(t));
  p.set_quantizer(static_cast<QuantizerType>(q));
  p.set_codec(static_cast<CodecType>(c));
  KVSERVE_RETURN_IF_ERROR(ApplyParams(comps[0], ParamScope::kTransform,
                                      Label("transform", comps[0].name), &p));
  KVSERVE_RETURN_IF_ERROR(ApplyParams(comps[1], ParamScope::kQuantizer,
                                      Label("quantizer", comps[1].name), &p));
  KVSERVE_RETURN_IF_ERROR(ApplyParams(comps[2], ParamScope::kCodec,
                                      Label("codec", comps[2].name), &p));
  if (comps.size() == 4) {
    KVSERVE_RETURN_IF_ERROR(ApplyParams(comps[3], ParamScope::kPipeline, "pipeline", &p));
  }
  Status valid = p.Validate();
  if (!valid.ok()) return valid.WithContext("profile spec");
  return p;
}

std::string Profile::ToJson() const {
  try {
    Json root = Json::object();
    root["spec"] = ToString();
    root["transform"] = ComponentJson(*this, ParamScope::kTransform, TransformName(transform_));
    root["quantizer"] = ComponentJson(*this, ParamScope::kQuantizer, QuantizerName(quantizer_));
    root["codec"] = ComponentJson(*this, ParamScope::kCodec, CodecName(codec_));
    root["chunk"] = Get(ParamId::kChunkTokens);
    return root.dump();
  } catch (const std::exception&) {
    // Unreachable: every string above is ASCII. Keep the no-throw contract.
    return "{}";
  }
}

Result<Profile> Profile::FromJson(std::string_view json) {
  try {
    return FromJsonImpl(json);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("profile json: ") + e.what());
  }
}

}  // namespace kvserve
