#include "kvserve/profile.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

constexpr int kTransforms = 4;
constexpr int kQuantizers = 7;
constexpr int kCodecs = 4;

bool IsEnum(ParamId id) {
  return id == ParamId::kAxisKey || id == ParamId::kAxisValue || id == ParamId::kScaleDType;
}

std::string WordOrNumber(ParamId id, int64_t v) {
  if (id == ParamId::kScaleDType) return v == 1 ? "f32" : "f16";
  if (IsEnum(id)) return v == 1 ? "channel" : "token";
  return std::to_string(v);
}

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Whether statistics run along tokens for K or V (the test's own statement
// of validation rule 4).
bool GroupsAlongTokens(const Profile& p) {
  if (p.quantizer() == QuantizerType::kRaw) return false;
  if (p.quantizer() == QuantizerType::kKivi) return true;
  return p.Get(ParamId::kAxisKey) == 1 || p.Get(ParamId::kAxisValue) == 1;
}

// A random profile that satisfies every documented rule: random components,
// each applicable parameter set with probability 1/2 to a random in-bound
// value (bounds drawn often), then the cross-parameter rules repaired.
Profile RandomValidProfile(std::mt19937_64& rng) {
  Profile p;
  p.set_transform(static_cast<TransformType>(Uniform(rng, 0, kTransforms - 1)));
  p.set_quantizer(static_cast<QuantizerType>(Uniform(rng, 0, kQuantizers - 1)));
  p.set_codec(static_cast<CodecType>(Uniform(rng, 0, kCodecs - 1)));
  if (p.quantizer() == QuantizerType::kRaw) p.set_transform(TransformType::kIdentity);
  for (const ParamInfo& info : AllParams()) {
    if (!ParamApplies(info.id, p.transform(), p.quantizer(), p.codec())) continue;
    if (Uniform(rng, 0, 1) == 0) continue;
    int64_t v;
    switch (Uniform(rng, 0, 4)) {
      case 0: v = info.min_value; break;
      case 1: v = info.max_value; break;
      case 2: v = info.default_value; break;
      default: v = Uniform(rng, info.min_value, info.max_value); break;
    }
    EXPECT_TRUE(p.Set(info.id, v).ok()) << info.key << "=" << v;
  }
  // Rule 2: levels replace bits.
  if (p.Get(ParamId::kLevelsKey) != 0) p.Clear(ParamId::kBitsKey);
  if (p.Get(ParamId::kLevelsValue) != 0) p.Clear(ParamId::kBitsValue);
  // Rule 3: high >= low.
  if (p.Get(ParamId::kBitsHigh) < p.Get(ParamId::kBitsLow)) {
    int64_t high = p.Get(ParamId::kBitsHigh), low = p.Get(ParamId::kBitsLow);
    EXPECT_TRUE(p.Set(ParamId::kBitsHigh, low).ok());
    EXPECT_TRUE(p.Set(ParamId::kBitsLow, high).ok());
  }
  // Rule 4: chunk a multiple of group when grouping along tokens.
  int64_t group = p.Get(ParamId::kGroup);
  if (GroupsAlongTokens(p) && group != 0 && p.Get(ParamId::kChunkTokens) % group != 0) {
    int64_t m = Uniform(rng, (16 + group - 1) / group, 65536 / group);
    EXPECT_TRUE(p.Set(ParamId::kChunkTokens, group * m).ok());
  }
  // Rule 5: anchor <= chunk.
  if (p.transform() == TransformType::kDelta &&
      p.Get(ParamId::kAnchor) > p.Get(ParamId::kChunkTokens)) {
    EXPECT_TRUE(p.Set(ParamId::kAnchor, Uniform(rng, 1, p.Get(ParamId::kChunkTokens))).ok());
  }
  return p;
}

// Inserts random whitespace around the punctuation of a spec.
std::string SprinkleWhitespace(const std::string& spec, std::mt19937_64& rng) {
  static const char kSpace[] = {' ', '\t', '\n', '\r'};
  auto blank = [&] {
    std::string s;
    for (int64_t n = Uniform(rng, 0, 2); n > 0; --n) s += kSpace[Uniform(rng, 0, 3)];
    return s;
  };
  std::string out = blank();
  for (char c : spec) {
    bool punct = c == '+' || c == '(' || c == ')' || c == ',' || c == '=';
    if (punct) out += blank();
    out += c;
    if (punct) out += blank();
  }
  return out + blank();
}

void ExpectInvalid(std::string_view spec, std::string_view needle) {
  Result<Profile> r = Profile::Parse(spec);
  ASSERT_FALSE(r.ok()) << "accepted: " << spec;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << spec;
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "spec: " << spec << "\nmessage: " << r.status().message() << "\nwanted: " << needle;
}

// ------------------------------------------------------------ param table

TEST(ParamTable, IdsIncreaseKeysUniqueDefaultsSane) {
  std::set<std::string_view> keys;
  int previous = 0;
  for (const ParamInfo& info : AllParams()) {
    EXPECT_GT(static_cast<int>(info.id), previous);
    EXPECT_LT(static_cast<int>(info.id), 64);  // fits Profile::values_
    previous = static_cast<int>(info.id);
    EXPECT_TRUE(keys.insert(info.key).second) << info.key;
    EXPECT_LE(info.min_value, info.max_value) << info.key;
    EXPECT_FALSE(info.help.empty()) << info.key;
    Result<ParamInfo> again = GetParamInfo(info.id);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->key, info.key);
    // A default outside the bounds is a sentinel 0 ("derived").
    if (info.default_value < info.min_value || info.default_value > info.max_value) {
      EXPECT_EQ(info.default_value, 0) << info.key;
    }
  }
  EXPECT_EQ(GetParamInfo(static_cast<ParamId>(3)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(GetParamInfo(static_cast<ParamId>(63)).status().code(), StatusCode::kNotFound);
}

// A parameter's applicability depends only on the component of its scope,
// and every parameter applies somewhere.
TEST(ParamTable, ApplicabilityFollowsScope) {
  for (const ParamInfo& info : AllParams()) {
    bool anywhere = false;
    for (int t = 0; t < kTransforms; ++t) {
      for (int q = 0; q < kQuantizers; ++q) {
        for (int c = 0; c < kCodecs; ++c) {
          bool a = ParamApplies(info.id, TransformType(t), QuantizerType(q), CodecType(c));
          anywhere |= a;
          bool base = ParamApplies(info.id, TransformType(0), QuantizerType(0), CodecType(0));
          switch (info.scope) {
            case ParamScope::kTransform:
              EXPECT_EQ(a, ParamApplies(info.id, TransformType(t), QuantizerType(0), CodecType(0)));
              break;
            case ParamScope::kQuantizer:
              EXPECT_EQ(a, ParamApplies(info.id, TransformType(0), QuantizerType(q), CodecType(0)));
              break;
            case ParamScope::kCodec:
              EXPECT_EQ(a, ParamApplies(info.id, TransformType(0), QuantizerType(0), CodecType(c)));
              break;
            case ParamScope::kPipeline:
              EXPECT_EQ(a, base);
              break;
          }
        }
      }
    }
    EXPECT_TRUE(anywhere) << info.key;
  }
  // The mapping's notable exclusions.
  EXPECT_FALSE(ParamApplies(ParamId::kAxisKey, TransformType::kIdentity, QuantizerType::kKivi,
                            CodecType::kPack));
  EXPECT_FALSE(ParamApplies(ParamId::kGroup, TransformType::kIdentity, QuantizerType::kRaw,
                            CodecType::kPack));
  EXPECT_TRUE(ParamApplies(ParamId::kChunkTokens, TransformType::kIdentity, QuantizerType::kRaw,
                           CodecType::kPack));
}

TEST(ComponentNames, RoundTripThroughParse) {
  for (int t = 0; t < kTransforms; ++t) EXPECT_NE(TransformName(TransformType(t)), "unknown");
  for (int q = 0; q < kQuantizers; ++q) EXPECT_NE(QuantizerName(QuantizerType(q)), "unknown");
  for (int c = 0; c < kCodecs; ++c) EXPECT_NE(CodecName(CodecType(c)), "unknown");
  EXPECT_EQ(TransformName(TransformType(kTransforms)), "unknown");
  EXPECT_EQ(QuantizerName(QuantizerType(kQuantizers)), "unknown");
  EXPECT_EQ(CodecName(CodecType(kCodecs)), "unknown");
  Result<Profile> p = Profile::Parse("hadamard+tokenmix+lz4");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->transform(), TransformType::kHadamard);
  EXPECT_EQ(p->quantizer(), QuantizerType::kTokenMix);
  EXPECT_EQ(p->codec(), CodecType::kLz4);
}

// ------------------------------------------------------------ round trips

TEST(ProfileRoundTrip, RandomProfilesPrintParsePrint) {
  std::mt19937_64 rng(0x9e0f11e);
  for (int i = 0; i < 5000; ++i) {
    Profile p = RandomValidProfile(rng);
    ASSERT_TRUE(p.Validate().ok()) << p.ToString() << ": " << p.Validate().ToString();
    std::string spec = p.ToString();
    Result<Profile> q = Profile::Parse(spec);
    ASSERT_TRUE(q.ok()) << spec << ": " << q.status().ToString();
    EXPECT_TRUE(*q == p) << spec;
    EXPECT_EQ(q->ToString(), spec);
    EXPECT_EQ(q->IsLossless(), p.quantizer() == QuantizerType::kRaw);
    // Whitespace anywhere between tokens changes nothing.
    std::string spaced = SprinkleWhitespace(spec, rng);
    Result<Profile> r = Profile::Parse(spaced);
    ASSERT_TRUE(r.ok()) << "[" << spaced << "]: " << r.status().ToString();
    EXPECT_TRUE(*r == p) << spaced;
  }
}

TEST(ProfileRoundTrip, RandomProfilesThroughJson) {
  std::mt19937_64 rng(0x15011);
  for (int i = 0; i < 3000; ++i) {
    Profile p = RandomValidProfile(rng);
    std::string json = p.ToJson();
    Result<Profile> q = Profile::FromJson(json);
    ASSERT_TRUE(q.ok()) << json << ": " << q.status().ToString();
    EXPECT_TRUE(*q == p) << json;
    EXPECT_EQ(q->ToString(), p.ToString());
    EXPECT_EQ(q->ToJson(), json);  // deterministic
    nlohmann::json j = nlohmann::json::parse(json);
    EXPECT_EQ(j["spec"], p.ToString());
    EXPECT_EQ(j["chunk"], p.Get(ParamId::kChunkTokens));
    EXPECT_EQ(j["quantizer"]["name"], std::string(QuantizerName(p.quantizer())));
  }
}

// Explicitly setting a parameter to its default is the same profile as
// leaving it unset, and prints the same.
TEST(ProfileEquality, ExplicitDefaultsEqualUnset) {
  std::mt19937_64 rng(77);
  for (int i = 0; i < 500; ++i) {
    Profile p = RandomValidProfile(rng);
    Profile bare;
    bare.set_transform(p.transform());
    bare.set_quantizer(p.quantizer());
    bare.set_codec(p.codec());
    Profile explicit_defaults = bare;
    for (const ParamInfo& info : AllParams()) {
      if (!ParamApplies(info.id, p.transform(), p.quantizer(), p.codec())) continue;
      ASSERT_TRUE(explicit_defaults.Set(info.id, info.default_value).ok()) << info.key;
      EXPECT_TRUE(explicit_defaults.IsSet(info.id));
    }
    EXPECT_TRUE(explicit_defaults == bare);
    EXPECT_EQ(explicit_defaults.ToString(), bare.ToString());
    EXPECT_TRUE(explicit_defaults.Validate().ok());
    // And two random profiles are equal exactly when they print the same.
    Profile other = RandomValidProfile(rng);
    EXPECT_EQ(other == p, other.ToString() == p.ToString());
  }
}

TEST(ProfileDefaults, DefaultIsNoneAndLossless) {
  Profile p;
  EXPECT_EQ(p.ToString(), "identity+raw+pack");
  EXPECT_TRUE(p.IsLossless());
  EXPECT_TRUE(p.Validate().ok());
  Result<Profile> none = Profile::Parse("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(*none == p);
}

// ------------------------------------------------------------ presets

TEST(Presets, ParseValidateAndAreCanonical) {
  std::set<std::string_view> names;
  for (const Preset& preset : Presets()) {
    EXPECT_TRUE(names.insert(preset.name).second) << preset.name;
    EXPECT_FALSE(preset.description.empty());
    Result<Profile> from_spec = Profile::Parse(preset.spec);
    ASSERT_TRUE(from_spec.ok()) << preset.name << ": " << from_spec.status().ToString();
    EXPECT_TRUE(from_spec->Validate().ok());
    EXPECT_EQ(from_spec->ToString(), preset.spec) << "preset spec is not canonical";
    Result<Profile> from_name = Profile::Parse("  " + std::string(preset.name) + "\n");
    ASSERT_TRUE(from_name.ok()) << preset.name;
    EXPECT_TRUE(*from_name == *from_spec);
    bool lossless = preset.name == "none" || preset.name == "zstd" || preset.name == "lz4";
    EXPECT_EQ(from_spec->IsLossless(), lossless) << preset.name;
  }
  for (std::string_view required : {"none", "kivi-2", "kivi-4", "cachegen", "duo", "mixhq", "zstd",
                                    "lz4"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
  int recompositions = 0;
  for (std::string_view n : names) recompositions += n.starts_with("kvserve-");
  EXPECT_GE(recompositions, 3);
  // Spot-check the published contents.
  Result<Profile> kivi2 = Profile::Parse("kivi-2");
  ASSERT_TRUE(kivi2.ok());
  EXPECT_EQ(kivi2->quantizer(), QuantizerType::kKivi);
  EXPECT_EQ(kivi2->Get(ParamId::kBitsKey), 2);
  EXPECT_EQ(kivi2->Get(ParamId::kBitsValue), 2);
  EXPECT_EQ(kivi2->Get(ParamId::kGroup), 32);
  EXPECT_EQ(kivi2->Get(ParamId::kResidual), 128);
}

// ------------------------------------------------------------ errors

TEST(ProfileParseErrors, BoundsPlusMinusOne) {
  for (const ParamInfo& info : AllParams()) {
    // Find a component choice where the parameter applies.
    Profile base;
    bool found = false;
    for (int t = 0; t < kTransforms && !found; ++t) {
      for (int q = 1; q < kQuantizers && !found; ++q) {
        for (int c = 0; c < kCodecs && !found; ++c) {
          if (ParamApplies(info.id, TransformType(t), QuantizerType(q), CodecType(c))) {
            base.set_transform(TransformType(t));
            base.set_quantizer(QuantizerType(q));
            base.set_codec(CodecType(c));
            found = true;
          }
        }
      }
    }
    ASSERT_TRUE(found) << info.key;
    // Set: bounds inclusive, one beyond is OutOfRange (unless it is the sentinel).
    for (int64_t v : {info.min_value, info.max_value, info.default_value}) {
      Profile p = base;
      EXPECT_TRUE(p.Set(info.id, v).ok()) << info.key << "=" << v;
      EXPECT_EQ(p.Get(info.id), v);
    }
    for (int64_t v : {info.min_value - 1, info.max_value + 1, info.min_value - 1000}) {
      if (v == info.default_value) continue;
      Profile p = base;
      Status s = p.Set(info.id, v);
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << info.key << "=" << v;
      EXPECT_FALSE(p.IsSet(info.id));
    }
    // Parse: in-bound values are not range errors; out-of-bound ones are,
    // with the bounds in the message.
    std::string components[4] = {std::string(TransformName(base.transform())),
                                 std::string(QuantizerName(base.quantizer())),
                                 std::string(CodecName(base.codec())), "pipeline"};
    int slot = static_cast<int>(info.scope);
    auto spec_with = [&](const std::string& kv) {
      std::string s;
      for (int i = 0; i < 4; ++i) {
        if (i == 3 && slot != 3) break;
        if (i) s += "+";
        s += components[i];
        if (i == slot) s += "(" + kv + ")";
      }
      return s;
    };
    if (IsEnum(info.id)) {
      ExpectInvalid(spec_with(std::string(info.key) + "=2"), "is not one of");
      ExpectInvalid(spec_with(std::string(info.key) + "=sideways"), "is not one of");
      continue;
    }
    for (int64_t v : {info.min_value, info.max_value}) {
      Result<Profile> r = Profile::Parse(spec_with(std::string(info.key) + "=" + std::to_string(v)));
      if (!r.ok()) {
        EXPECT_EQ(r.status().message().find("out of range"), std::string::npos)
            << r.status().message();
      }
    }
    for (int64_t v : {info.min_value - 1, info.max_value + 1}) {
      if (v == info.default_value) continue;
      std::string text = std::string(info.key) + "=" + std::to_string(v);
      ExpectInvalid(spec_with(text), text + " out of range [" + std::to_string(info.min_value) +
                                         ", " + std::to_string(info.max_value) + "]");
    }
  }
  ExpectInvalid("identity+kivi(k=9)+pack", "k=9 out of range [1, 8]");
  ExpectInvalid("identity+kivi(k=99999999999999999999999)+pack", "is not a decimal integer");
  ExpectInvalid("identity+kivi(k=2.5)+pack", "position");
  ExpectInvalid("identity+kivi(k=two)+pack", "is not a decimal integer");
}

TEST(ProfileParseErrors, WrongScopeForEveryComponentChoice) {
  for (const ParamInfo& info : AllParams()) {
    std::string value = WordOrNumber(info.id, info.min_value);
    for (int t = 0; t < kTransforms; ++t) {
      for (int q = 0; q < kQuantizers; ++q) {
        for (int c = 0; c < kCodecs; ++c) {
          if (ParamApplies(info.id, TransformType(t), QuantizerType(q), CodecType(c))) continue;
          std::string names[3] = {std::string(TransformName(TransformType(t))),
                                  std::string(QuantizerName(QuantizerType(q))),
                                  std::string(CodecName(CodecType(c)))};
          int slot = static_cast<int>(info.scope);
          ASSERT_LT(slot, 3);
          names[slot] += "(" + std::string(info.key) + "=" + value + ")";
          std::string spec = names[0] + "+" + names[1] + "+" + names[2];
          ExpectInvalid(spec, "'" + std::string(info.key) + "' does not apply to");
        }
      }
    }
  }
  ExpectInvalid("delta(seed=7)+kivi+pack", "'seed' does not apply to transform 'delta'");
  ExpectInvalid("identity+kivi(axis_k=token)+pack", "'axis_k' does not apply to quantizer 'kivi'");
  ExpectInvalid("identity+kivi+pack(k=2)", "(it is a quantizer parameter)");
  ExpectInvalid("identity+kivi(level=3)+zstd", "(it is a codec parameter)");
  ExpectInvalid("identity+kivi+pack+pipeline(k=2)", "does not apply to pipeline");
  ExpectInvalid("identity+kivi(chunk=64)+pack", "(it is a pipeline parameter)");
}

TEST(ProfileParseErrors, SyntaxAndNames) {
  ExpectInvalid("identity+kivi(k=2,k=3)+pack", "duplicate parameter 'k'");
  ExpectInvalid("identity+kivi(foo=1)+pack", "position 14: unknown parameter 'foo' in quantizer 'kivi'");
  ExpectInvalid("identity+kiwi+pack", "position 9: expected a quantizer");
  ExpectInvalid("kivi+identity+pack", "expected a transform");
  ExpectInvalid("identity+pack+kivi", "got 'pack', a codec");
  ExpectInvalid("identity+kivi", "expected 3 components");
  ExpectInvalid("identity+kivi+pack+pipeline+pipeline", "too many components");
  ExpectInvalid("identity+kivi+pack+rans", "expected 'pipeline'");
  ExpectInvalid("", "position 0: expected a component name, got end of spec");
  ExpectInvalid("   ", "expected a component name");
  ExpectInvalid("kivi-3", "unknown preset 'kivi-3'");
  ExpectInvalid("identity+kivi(k=)+pack", "position 16: expected a value");
  ExpectInvalid("identity+kivi(k=2+pack", "expected ',' or ')'");
  ExpectInvalid("identity+kivi()+pack", "expected a parameter name");
  ExpectInvalid("identity+kivi(k 2)+pack", "expected '='");
  ExpectInvalid("identity+kivi(k=2,)+pack", "expected a parameter name");
  ExpectInvalid("identity++pack", "position 9: expected a component name");
  ExpectInvalid("identity+kivi+pack+", "end of spec");
  ExpectInvalid("identity+kivi+pack)", "expected '+' or end of spec, got ')'");
  ExpectInvalid("identity+kivi+pack\x01", "'\\x01'");
  ExpectInvalid("IDENTITY+kivi+pack", "'IDENTITY'");
  ExpectInvalid("identity+kivi(sym=2)+pack", "sym=2 out of range [0, 1]");
  ExpectInvalid("identity+kivi(scale=f64)+pack", "scale='f64' is not one of f16|f32");
  // Accepted forms.
  EXPECT_TRUE(Profile::Parse("identity+kivi+pack+pipeline").ok());
  EXPECT_TRUE(Profile::Parse(" identity + kivi ( k = 2 , v = 3 ) + pack ").ok());
  EXPECT_TRUE(Profile::Parse("identity+uniform(axis_k=token,scale=f32,sym=1)+pack").ok());
}

TEST(ProfileValidation, CrossParameterRules) {
  // Rule 1: raw keeps source bytes, so no transform.
  ExpectInvalid("hadamard+raw+pack", "transform must be 'identity'");
  ExpectInvalid("delta+raw+zstd", "transform must be 'identity'");
  // Rule 2: levels replace bits.
  ExpectInvalid("identity+uniform(k=3,levels_k=10)+pack", "levels_k=10 replaces k");
  ExpectInvalid("identity+uniform(v=3,levels_v=10)+pack", "levels_v=10 replaces v");
  EXPECT_TRUE(Profile::Parse("identity+uniform(levels_k=10,levels_v=3)+pack").ok());
  EXPECT_TRUE(Profile::Parse("identity+uniform(k=4,levels_k=10)+pack").ok());  // k at default
  // Rule 3: high >= low.
  ExpectInvalid("identity+mixhq(high=2,low=4)+pack", "high=2 is below low=4");
  ExpectInvalid("identity+tokenmix(high=1)+pack", "high=1 is below low=2");
  EXPECT_TRUE(Profile::Parse("identity+mixhq(high=3,low=3)+pack").ok());
  // Rule 4: chunk a multiple of group when grouping along tokens.
  ExpectInvalid("identity+kivi(group=48)+pack", "chunk=256 is not a multiple of group=48");
  EXPECT_TRUE(Profile::Parse("identity+kivi(group=48)+pack+pipeline(chunk=480)").ok());
  EXPECT_TRUE(Profile::Parse("identity+kivi(group=0)+pack+pipeline(chunk=100)").ok());
  ExpectInvalid("identity+uniform(group=48)+pack", "groups along tokens");  // axis_k channel
  EXPECT_TRUE(Profile::Parse("identity+uniform(group=48,axis_k=token)+pack").ok());
  ExpectInvalid("identity+uniform(group=48,axis_k=token,axis_v=channel)+pack", "group=48");
  EXPECT_TRUE(Profile::Parse("identity+raw+pack+pipeline(chunk=100)").ok());
  // Rule 5: anchor within a chunk.
  ExpectInvalid("delta(anchor=512)+kivi+pack", "anchor=512 exceeds chunk=256");
  EXPECT_TRUE(Profile::Parse("delta(anchor=512)+kivi+pack+pipeline(chunk=512)").ok());
  // Validate catches what setters cannot: components changed after Set.
  Profile p;
  p.set_transform(TransformType::kHadamard);
  p.set_quantizer(QuantizerType::kKivi);
  ASSERT_TRUE(p.Set(ParamId::kSeed, 7).ok());
  p.set_transform(TransformType::kDelta);
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.Validate().message().find("'seed' does not apply"), std::string::npos);
  p.Clear(ParamId::kSeed);
  EXPECT_TRUE(p.Validate().ok());
  p.set_codec(static_cast<CodecType>(9));
  EXPECT_FALSE(p.Validate().ok());
}

TEST(ProfileSet, ScopeAndSentinels) {
  Profile p;  // identity+raw+pack
  EXPECT_EQ(p.Set(ParamId::kBitsKey, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Set(static_cast<ParamId>(5), 2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(p.Set(ParamId::kChunkTokens, 1024).ok());
  EXPECT_EQ(p.ToString(), "identity+raw+pack+pipeline(chunk=1024)");
  p.Clear(ParamId::kChunkTokens);
  EXPECT_FALSE(p.IsSet(ParamId::kChunkTokens));
  EXPECT_EQ(p.Get(ParamId::kChunkTokens), 256);
  p.set_quantizer(QuantizerType::kUniform);
  EXPECT_TRUE(p.Set(ParamId::kLevelsKey, 0).ok());  // the sentinel default
  EXPECT_EQ(p.Set(ParamId::kLevelsKey, 1).code(), StatusCode::kOutOfRange);
  p.set_transform(TransformType::kDelta);
  EXPECT_TRUE(p.Set(ParamId::kAnchor, 0).ok());
  EXPECT_EQ(p.Set(ParamId::kAnchor, -1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(p.ToString(), "delta+uniform+pack");
}

// Arbitrary bytes never crash the parser, and whatever it accepts is valid
// and round-trips.
TEST(ProfileParseFuzz, RandomBytesAndMutations) {
  std::mt19937_64 rng(0xf022);
  static const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyz_-0123456789+(),= \t";
  int accepted = 0;
  auto check = [&](const std::string& s) {
    Result<Profile> r = Profile::Parse(s);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      return;
    }
    ++accepted;
    EXPECT_TRUE(r->Validate().ok()) << s;
    Result<Profile> again = Profile::Parse(r->ToString());
    ASSERT_TRUE(again.ok()) << s;
    EXPECT_TRUE(*again == *r) << s;
  };
  for (int i = 0; i < 20000; ++i) {
    std::string s(static_cast<size_t>(Uniform(rng, 0, 48)), '\0');
    bool bytes = Uniform(rng, 0, 3) == 0;
    for (char& c : s) {
      c = bytes ? static_cast<char>(Uniform(rng, 0, 255))
                : kAlphabet[static_cast<size_t>(Uniform(rng, 0, kAlphabet.size() - 1))];
    }
    check(s);
  }
  for (int i = 0; i < 20000; ++i) {
    std::string s = RandomValidProfile(rng).ToString();
    for (int64_t n = Uniform(rng, 1, 3); n > 0; --n) {
      size_t at = static_cast<size_t>(Uniform(rng, 0, static_cast<int64_t>(s.size())));
      switch (Uniform(rng, 0, 2)) {
        case 0: if (at < s.size()) s.erase(at, 1); break;
        case 1: s.insert(at, 1, kAlphabet[static_cast<size_t>(Uniform(rng, 0, kAlphabet.size() - 1))]); break;
        default: if (at < s.size()) s[at] = static_cast<char>(Uniform(rng, 0, 255)); break;
      }
    }
    check(s);
  }
  EXPECT_GT(accepted, 0);
}

// ------------------------------------------------------------ JSON errors

TEST(ProfileJson, RejectsMalformedInput) {
  auto expect_bad = [](std::string_view json, std::string_view needle) {
    Result<Profile> r = Profile::FromJson(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << json << " -> " << r.status().message();
  };
  const std::string ok_json =
      R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi","k":2},"codec":{"name":"pack"}})";
  Result<Profile> good = Profile::FromJson(ok_json);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->ToString(), "identity+kivi(k=2)+pack");
  expect_bad("{", "not valid JSON");
  expect_bad("[]", "top level must be an object");
  expect_bad(R"({"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})", "missing object 'transform'");
  expect_bad(R"({"transform":{},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})", "no string 'name'");
  expect_bad(R"({"transform":{"name":"rot"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})",
             "unknown transform 'rot'");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi","k":9},"codec":{"name":"pack"}})",
             "k=9 out of range [1, 8]");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi","k":2.5},"codec":{"name":"pack"}})",
             "'k' must be an integer");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi","k":"2"},"codec":{"name":"pack"}})",
             "'k' must be an integer");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"uniform","axis_k":1},"codec":{"name":"pack"}})",
             "token|channel");
  expect_bad(R"({"transform":{"name":"delta","seed":3},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})",
             "'seed' does not apply");
  expect_bad(R"({"transform":{"name":"identity","zzz":3},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})",
             "unknown parameter 'zzz'");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"},"extra":1})",
             "unknown field 'extra'");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"},"chunk":17})",
             "chunk=17 is not a multiple of group=32");
  expect_bad(R"({"transform":{"name":"identity"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"},"chunk":18446744073709551615})",
             "out of range");
  expect_bad(R"({"spec":"identity+kivi(k=3)+pack","transform":{"name":"identity"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})",
             "disagrees");
  expect_bad(R"({"spec":"identity+kivi(k=33)+pack","transform":{"name":"identity"},"quantizer":{"name":"kivi"},"codec":{"name":"pack"}})",
             "'spec'");
  // Random mutations of valid JSON never crash.
  std::mt19937_64 rng(0x750);
  for (int i = 0; i < 5000; ++i) {
    std::string s = RandomValidProfile(rng).ToJson();
    size_t at = static_cast<size_t>(Uniform(rng, 0, static_cast<int64_t>(s.size()) - 1));
    s[at] = static_cast<char>(Uniform(rng, 0, 255));
    Result<Profile> r = Profile::FromJson(s);
    if (r.ok()) {
      EXPECT_TRUE(r->Validate().ok());
    }
  }
}

}  // namespace
}  // namespace kvserve
