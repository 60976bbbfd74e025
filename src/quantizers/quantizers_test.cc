// Copyright kvserve authors. Properties of every quantizer mode on random
// shapes, configs and data.
#include "quantizers/quantizers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quantizers/planned_quantizer.h"

namespace kvserve::quantizers {
namespace {

using pipeline::ChunkInfo;
using pipeline::ChunkTensor;
using pipeline::QuantizedChunk;

constexpr QuantizerType kLossyModes[] = {QuantizerType::kUniform,  QuantizerType::kKivi,
                                         QuantizerType::kLayerMix, QuantizerType::kMixHQ,
                                         QuantizerType::kTokenMix, QuantizerType::kDuo};

int Rand(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

KvShape RandomShape(std::mt19937_64& rng) {
  static const int kDims[] = {16, 32, 64, 128};
  return KvShape{Rand(rng, 1, 5), Rand(rng, 1, 8), 0, kDims[Rand(rng, 0, 3)]};
}

QuantConfig RandomConfig(std::mt19937_64& rng, QuantizerType type, const KvShape& shape) {
  QuantConfig c;
  c.type = type;
  c.bits_key = Rand(rng, 1, 8);
  c.bits_value = Rand(rng, 1, 8);
  const int explicit_levels[] = {0, 0, 3, 5, 100, 256, 2};
  c.levels_key = explicit_levels[Rand(rng, 0, 6)];
  c.levels_value = explicit_levels[Rand(rng, 0, 6)];
  c.axis_key = Rand(rng, 0, 1) ? QuantAxis::kChannel : QuantAxis::kToken;
  c.axis_value = Rand(rng, 0, 1) ? QuantAxis::kChannel : QuantAxis::kToken;
  c.symmetric = Rand(rng, 0, 3) == 0;
  c.scale_dtype = Rand(rng, 0, 1) ? ScaleDType::kF32 : ScaleDType::kF16;
  c.residual = Rand(rng, 0, 2) == 0 ? 0 : Rand(rng, 0, 100);
  c.sinks = Rand(rng, 0, 20);
  c.recent = Rand(rng, 0, 120);
  c.bits_high = Rand(rng, 1, 8);
  c.bits_low = Rand(rng, 1, 8);
  c.high_percent = Rand(rng, 0, 100);
  c.bits_first = Rand(rng, 1, 8);
  c.bits_last = Rand(rng, 1, 8);
  // A group that is valid both as channels (divides head_dim) and tokens.
  const int groups[] = {0, 4, 8, 16};
  c.group = groups[Rand(rng, 0, 3)];
  if (shape.head_dim % 16 == 0 && Rand(rng, 0, 2) == 0) c.group = shape.head_dim;
  return c;
}

HeadScores RandomScores(std::mt19937_64& rng, const KvShape& shape) {
  HeadScores s;
  s.layers = shape.layers;
  s.kv_heads = shape.kv_heads;
  for (int i = 0; i < shape.layers * shape.kv_heads; ++i) {
    s.scores.push_back(static_cast<float>(Rand(rng, 0, 5)) * 0.25f);  // many ties
  }
  return s;
}

// Independent description of what each mode must do to element (head, abs
// token) of a chunk: its level count (0 = pruned), axis and group.
struct Expect {
  int levels;
  QuantAxis axis;
  int group;
};

Expect Expected(const QuantConfig& c, const std::vector<uint8_t>& state, const ChunkInfo& info,
                int head, int abs_token) {
  const bool key = info.kind == KvKind::kKey;
  const int kv_levels = key ? (c.levels_key ? c.levels_key : 1 << c.bits_key)
                            : (c.levels_value ? c.levels_value : 1 << c.bits_value);
  const bool edge = abs_token < c.sinks || abs_token >= info.total_tokens - c.recent;
  const size_t pair = static_cast<size_t>(info.layer) * info.kv_heads + head;
  switch (c.type) {
    case QuantizerType::kUniform:
      return {kv_levels, key ? c.axis_key : c.axis_value, c.group};
    case QuantizerType::kKivi:
      return {kv_levels, key ? QuantAxis::kChannel : QuantAxis::kToken, key ? c.group : 0};
    case QuantizerType::kLayerMix: {
      int bits = c.bits_first;
      if (info.num_layers > 1) {
        bits = c.bits_first +
               static_cast<int>(std::floor(
                   double(c.bits_last - c.bits_first) * info.layer / (info.num_layers - 1) + 0.5));
      }
      return {1 << bits, key ? c.axis_key : c.axis_value, c.group};
    }
    case QuantizerType::kMixHQ:
      return {1 << state[pair], key ? QuantAxis::kChannel : QuantAxis::kToken, key ? c.group : 0};
    case QuantizerType::kTokenMix:
      return {1 << (edge ? c.bits_high : c.bits_low), QuantAxis::kToken, c.group};
    case QuantizerType::kDuo:
      return {(state[pair] || edge) ? kv_levels : 0, QuantAxis::kToken, c.group};
    default:
      return {0, QuantAxis::kToken, 0};
  }
}

float Ulp(float v) {
  const float a = std::fabs(v);
  return std::nextafter(a, INFINITY) - a;
}

struct Case {
  KvShape shape;
  QuantConfig config;
  HeadScores scores;
  std::unique_ptr<pipeline::Quantizer> encoder;
  std::unique_ptr<pipeline::Quantizer> decoder;
  std::vector<uint8_t> state;
};

Case MakeCase(std::mt19937_64& rng, QuantizerType type) {
  Case k;
  k.shape = RandomShape(rng);
  k.config = RandomConfig(rng, type, k.shape);
  k.scores = RandomScores(rng, k.shape);
  auto enc = NewQuantizerForEncode(k.config, k.shape, &k.scores);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  k.encoder = std::move(enc).value();
  pipeline::ByteWriter w(&k.state);
  k.encoder->SerializeState(w);
  auto dec = NewQuantizerForDecode(k.config, k.shape, k.state);
  EXPECT_TRUE(dec.ok()) << dec.status().ToString();
  k.decoder = std::move(dec).value();
  return k;
}

std::vector<float> RandomChunkData(std::mt19937_64& rng, size_t n) {
  std::vector<float> v(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scale = std::ldexp(1.0f, Rand(rng, -6, 6));
  const float offset = normal(rng) * scale;
  for (float& x : v) x = offset + normal(rng) * scale * (Rand(rng, 0, 50) == 0 ? 8.0f : 1.0f);
  if (Rand(rng, 0, 5) == 0) {  // constant stretches
    const size_t a = Rand(rng, 0, static_cast<int>(n) - 1);
    std::fill(v.begin() + a, v.begin() + std::min(n, a + 300), v[a]);
  }
  return v;
}

// Checks every element of a decoded chunk against an independent bound on
// its group's stored scale.
void CheckChunk(const Case& k, const ChunkInfo& info, const std::vector<float>& x,
                const std::vector<float>& y, const std::vector<uint8_t>& mask) {
  const int dim = info.head_dim;
  auto at = [&](const std::vector<float>& v, int h, int t, int d) {
    return v[(static_cast<size_t>(h) * info.tokens + t) * dim + d];
  };
  for (int h = 0; h < info.kv_heads; ++h) {
    for (int t = 0; t < info.tokens; ++t) {
      const Expect e = Expected(k.config, k.state, info, h, info.token_begin + t);
      ASSERT_EQ(mask[static_cast<size_t>(h) * info.tokens + t], e.levels == 0 ? 0 : 1);
      for (int d = 0; d < dim; ++d) {
        if (e.levels == 0) {
          ASSERT_EQ(at(y, h, t, d), 0.0f);
          continue;
        }
        // The element's group statistics, straight from the input.
        float mn = INFINITY, mx = -INFINITY;
        if (e.axis == QuantAxis::kToken) {
          const int gc = (e.group == 0 || e.group >= dim) ? dim : e.group;
          for (int j = d / gc * gc; j < (d / gc + 1) * gc; ++j) {
            mn = std::min(mn, at(x, h, t, j));
            mx = std::max(mx, at(x, h, t, j));
          }
        } else {
          const int gt = e.group == 0 ? info.tokens : e.group;
          for (int j = t / gt * gt; j < std::min(info.tokens, (t / gt + 1) * gt); ++j) {
            mn = std::min(mn, at(x, h, j, d));
            mx = std::max(mx, at(x, h, j, d));
          }
        }
        const bool f16 = k.config.scale_dtype == ScaleDType::kF16;
        const double lm1 = e.levels - 1;
        double range;
        if (k.config.symmetric) {
          range = 2.0 * std::max(std::fabs(mn), std::fabs(mx));
        } else {
          range = double{mx} - mn + (f16 ? std::fabs(mn) * 0x1p-10 + 0x1p-24 : 0.0);
        }
        const double scale =
            range / lm1 * (1 + (f16 ? 0x1p-9 : 0x1p-20)) + (f16 ? 0x1p-24 : FLT_MIN);
        const double err = std::fabs(double{at(y, h, t, d)} - at(x, h, t, d));
        const double bound =
            0.5 * scale + scale * 0x1p-13 +
            4 * Ulp(std::max({std::fabs(mn), std::fabs(mx), std::fabs(at(y, h, t, d))}));
        ASSERT_LE(err, bound) << "mode " << QuantizerName(k.config.type) << " h=" << h << " t=" << t
                              << " d=" << d << " levels=" << e.levels;
        if (!k.config.symmetric && mn == mx && !f16) ASSERT_EQ(at(y, h, t, d), at(x, h, t, d));
      }
    }
  }
}

// Chunk boundaries as the frame layer cuts the coded region: starts at
// multiples of `chunk` (itself a multiple of the token group).
int RandomChunkTokens(std::mt19937_64& rng, const QuantConfig& c) {
  const int g = c.group == 0 ? 1 : c.group;
  return std::max(16, Rand(rng, 1, 12) * 16 / g * g);
}

TEST(QuantizersTest, EveryModeRoundTripsWithinHalfAStepAndIsDeterministic) {
  std::mt19937_64 rng(11);
  for (QuantizerType type : kLossyModes) {
    for (int trial = 0; trial < 25; ++trial) {
      Case k = MakeCase(rng, type);
      const int total = Rand(rng, 1, 400);
      const int coded = k.encoder->CodedTokens(total);
      const int chunk = RandomChunkTokens(rng, k.config);
      for (int begin = 0; begin < coded; begin += chunk) {
        ChunkInfo info;
        info.num_layers = k.shape.layers;
        info.layer = Rand(rng, 0, k.shape.layers - 1);
        info.kind = Rand(rng, 0, 1) ? KvKind::kKey : KvKind::kValue;
        info.kv_heads = k.shape.kv_heads;
        info.head_dim = k.shape.head_dim;
        info.token_begin = begin;
        info.tokens = std::min(chunk, coded - begin);
        info.total_tokens = total;
        const size_t n = static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim;
        std::vector<float> x = RandomChunkData(rng, n), y(n, -7.0f);
        const ChunkTensor xt{x.data(), info.kv_heads, info.tokens, info.head_dim};
        QuantizedChunk q1, q2;
        ASSERT_TRUE(k.encoder->Quantize(info, xt, &q1).ok());
        ASSERT_TRUE(k.encoder->Quantize(info, xt, &q2).ok());
        ASSERT_EQ(q1.params, q2.params);
        ASSERT_EQ(q1.segments.size(), q2.segments.size());
        for (size_t s = 0; s < q1.segments.size(); ++s) {
          ASSERT_EQ(q1.segments[s].levels, q2.segments[s].levels);
          ASSERT_EQ(q1.segments[s].symbols, q2.segments[s].symbols);
          for (uint8_t v : q1.segments[s].symbols) ASSERT_LT(v, q1.segments[s].levels);
        }
        std::vector<uint8_t> mask(static_cast<size_t>(info.kv_heads) * info.tokens, 9);
        const ChunkTensor yt{y.data(), info.kv_heads, info.tokens, info.head_dim};
        const Status st = k.decoder->Dequantize(info, q1, yt, mask.data());
        ASSERT_TRUE(st.ok()) << st.ToString();
        CheckChunk(k, info, x, y, mask);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Row source / sink over a dense [head][token][dim] chunk, for the
// streaming forms.
class VectorRows final : public pipeline::RowSource, public pipeline::RowSink {
 public:
  VectorRows(std::vector<float>* v, const ChunkInfo& info) : v_(v), info_(info) {}
  void Read(int head, int token, int count, float* out) override {
    std::memcpy(out, At(head, token), sizeof(float) * count * info_.head_dim);
  }
  void Write(int head, int token, int count, float* rows) override {
    std::memcpy(At(head, token), rows, sizeof(float) * count * info_.head_dim);
  }
  void WriteZeros(int head, int token, int count) override {
    std::fill(At(head, token), At(head, token) + static_cast<size_t>(count) * info_.head_dim,
              0.0f);
  }

 private:
  float* At(int head, int token) {
    return v_->data() + (static_cast<size_t>(head) * info_.tokens + token) * info_.head_dim;
  }
  std::vector<float>* v_;
  ChunkInfo info_;
};

TEST(QuantizersTest, StreamingFormsMatchWholeChunkForms) {
  std::mt19937_64 rng(0x5712);
  for (GridKernelIsa isa : {GridKernelIsa::kScalar, GridKernelIsa::kAuto}) {
    SetGridKernelIsaForTesting(isa);
    for (QuantizerType type : kLossyModes) {
      for (int trial = 0; trial < 12; ++trial) {
        Case k = MakeCase(rng, type);
        const int total = Rand(rng, 1, 700);
        const int coded = k.encoder->CodedTokens(total);
        // Long chunks, so that runs span several streaming tiles.
        const int chunk = RandomChunkTokens(rng, k.config) * Rand(rng, 1, 4);
        for (int begin = 0; begin < coded; begin += chunk) {
          ChunkInfo info{Rand(rng, 0, k.shape.layers - 1),
                         k.shape.layers,
                         Rand(rng, 0, 1) ? KvKind::kKey : KvKind::kValue,
                         k.shape.kv_heads,
                         k.shape.head_dim,
                         begin,
                         std::min(chunk, coded - begin),
                         total,
                         DType::kF32};
          const size_t n = static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim;
          std::vector<float> x = RandomChunkData(rng, n), y1(n, -7.0f), y2(n, -9.0f);
          const ChunkTensor xt{x.data(), info.kv_heads, info.tokens, info.head_dim};
          QuantizedChunk whole, streamed;
          ASSERT_TRUE(k.encoder->Quantize(info, xt, &whole).ok());
          VectorRows source(&x, info);
          ASSERT_TRUE(k.encoder->QuantizeRows(info, source, &streamed).ok());
          ASSERT_EQ(whole.params, streamed.params);
          ASSERT_EQ(whole.segments.size(), streamed.segments.size());
          for (size_t s = 0; s < whole.segments.size(); ++s) {
            ASSERT_EQ(whole.segments[s].levels, streamed.segments[s].levels);
            ASSERT_EQ(whole.segments[s].symbols, streamed.segments[s].symbols);
          }
          std::vector<uint8_t> mask1(n / info.head_dim, 7), mask2(n / info.head_dim, 8);
          const ChunkTensor yt{y1.data(), info.kv_heads, info.tokens, info.head_dim};
          ASSERT_TRUE(k.decoder->Dequantize(info, whole, yt, mask1.data()).ok());
          VectorRows sink(&y2, info);
          ASSERT_TRUE(k.decoder->DequantizeRows(info, whole, sink, mask2.data()).ok());
          ASSERT_EQ(mask1, mask2);
          ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), n * sizeof(float)));
        }
      }
    }
  }
  SetGridKernelIsaForTesting(GridKernelIsa::kAuto);
}

TEST(QuantizersTest, CodedTokensLeavesResidualAndWholeTokenGroups) {
  std::mt19937_64 rng(12);
  for (QuantizerType type : kLossyModes) {
    for (int trial = 0; trial < 200; ++trial) {
      Case k = MakeCase(rng, type);
      const int total = Rand(rng, 0, 2000);
      const int coded = k.encoder->CodedTokens(total);
      const bool token_grouped =
          type == QuantizerType::kKivi || type == QuantizerType::kMixHQ ||
          ((type == QuantizerType::kUniform || type == QuantizerType::kLayerMix) &&
           (k.config.axis_key == QuantAxis::kChannel ||
            k.config.axis_value == QuantAxis::kChannel));
      const int g = token_grouped && k.config.group > 0 ? k.config.group : 1;
      EXPECT_GE(coded, 0);
      EXPECT_LE(coded, total);
      EXPECT_EQ(coded % g, 0);
      EXPECT_GE(total - coded, std::min(total, k.config.residual));
      EXPECT_LT(total - coded, k.config.residual + g);  // only the ragged tail more
    }
  }
}

TEST(QuantizersTest, MalformedChunksAreCorruption) {
  std::mt19937_64 rng(13);
  for (QuantizerType type : kLossyModes) {
    for (int trial = 0; trial < 30; ++trial) {
      Case k = MakeCase(rng, type);
      ChunkInfo info{Rand(rng, 0, k.shape.layers - 1),
                     k.shape.layers,
                     Rand(rng, 0, 1) ? KvKind::kKey : KvKind::kValue,
                     k.shape.kv_heads,
                     k.shape.head_dim,
                     0,
                     Rand(rng, 1, 64),
                     0,
                     DType::kF32};
      info.total_tokens = info.tokens + Rand(rng, 0, 50);
      info.token_begin = Rand(rng, 0, info.total_tokens - info.tokens);
      const size_t n = static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim;
      std::vector<float> x = RandomChunkData(rng, n), y(n);
      const ChunkTensor xt{x.data(), info.kv_heads, info.tokens, info.head_dim};
      const ChunkTensor yt{y.data(), info.kv_heads, info.tokens, info.head_dim};
      QuantizedChunk good;
      ASSERT_TRUE(k.encoder->Quantize(info, xt, &good).ok());
      std::vector<QuantizedChunk> bad;
      auto mutate = [&](auto fn) {
        QuantizedChunk c = good;
        fn(c);
        bad.push_back(std::move(c));
      };
      mutate([](QuantizedChunk& c) { c.segments.push_back({2, {0}}); });
      mutate([](QuantizedChunk& c) { c.params.push_back(0); });
      if (!good.params.empty()) mutate([](QuantizedChunk& c) { c.params.pop_back(); });
      if (!good.segments.empty()) {
        const size_t s = Rand(rng, 0, static_cast<int>(good.segments.size()) - 1);
        mutate([&](QuantizedChunk& c) { c.segments.erase(c.segments.begin() + s); });
        mutate([&](QuantizedChunk& c) { c.segments[s].symbols.pop_back(); });
        mutate([&](QuantizedChunk& c) { c.segments[s].symbols.push_back(0); });
        mutate([&](QuantizedChunk& c) {
          c.segments[s].levels = c.segments[s].levels == 256 ? 255 : c.segments[s].levels + 1;
        });
        if (good.segments[s].levels < 256) {
          mutate([&](QuantizedChunk& c) {
            c.segments[s]
                .symbols[Rand(rng, 0, static_cast<int>(c.segments[s].symbols.size()) - 1)] =
                static_cast<uint8_t>(c.segments[s].levels);
          });
        }
        mutate([&](QuantizedChunk& c) {  // a NaN scale
          if (k.config.scale_dtype == ScaleDType::kF16) {
            c.params[0] = 0x00;
            c.params[1] = 0x7E;
          } else {
            const uint32_t nan = 0x7FC00000u;
            std::memcpy(c.params.data(), &nan, 4);
          }
        });
      }
      for (const QuantizedChunk& c : bad) {
        std::vector<uint8_t> mask(static_cast<size_t>(info.kv_heads) * info.tokens);
        EXPECT_EQ(k.decoder->Dequantize(info, c, yt, mask.data()).code(), StatusCode::kCorruption);
      }
      // A chunk that does not fit the cache shape.
      ChunkInfo wrong = info;
      wrong.layer = k.shape.layers;
      EXPECT_EQ(k.decoder->Dequantize(wrong, good, yt, nullptr).code(), StatusCode::kCorruption);
      EXPECT_TRUE(k.decoder->Dequantize(info, good, yt, nullptr).ok());
    }
  }
}

TEST(QuantizersTest, NonFiniteInputIsInvalidArgument) {
  std::mt19937_64 rng(14);
  for (QuantizerType type : kLossyModes) {
    Case k = MakeCase(rng, type);
    k.config.type = type;
    ChunkInfo info{0,  k.shape.layers, KvKind::kKey, k.shape.kv_heads, k.shape.head_dim, 0, 32,
                   32, DType::kF32};
    std::vector<float> x = RandomChunkData(rng, size_t{32} * info.kv_heads * info.head_dim);
    // Token 0 is kept by every mode (sinks or retrieval may not cover it:
    // put the NaN everywhere in head 0, token 0).
    for (int d = 0; d < info.head_dim; ++d) x[d] = NAN;
    for (int h = 0; h < info.kv_heads; ++h)
      x[static_cast<size_t>(h) * 32 * info.head_dim + 31 * info.head_dim] = NAN;
    QuantizedChunk q;
    const Status st =
        k.encoder->Quantize(info, ChunkTensor{x.data(), info.kv_heads, 32, info.head_dim}, &q);
    if (type == QuantizerType::kDuo && k.config.recent == 0) continue;  // may be fully pruned
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << QuantizerName(type);
  }
}

TEST(QuantizersTest, StatefulModesSelectTopHeadsAndRoundTripState) {
  std::mt19937_64 rng(15);
  for (QuantizerType type : {QuantizerType::kMixHQ, QuantizerType::kDuo}) {
    for (int trial = 0; trial < 50; ++trial) {
      Case k = MakeCase(rng, type);
      const size_t pairs = static_cast<size_t>(k.shape.layers) * k.shape.kv_heads;
      ASSERT_EQ(k.state.size(), pairs);
      // Brute force: a pair is a retrieval head iff fewer than `count` pairs
      // rank above it.
      const int64_t count = RetrievalHeadCount(k.config.high_percent, static_cast<int64_t>(pairs));
      EXPECT_EQ(count, static_cast<int64_t>(
                           std::floor(k.config.high_percent * double(pairs) / 100.0 + 0.5)));
      for (size_t i = 0; i < pairs; ++i) {
        int64_t above = 0;
        for (size_t j = 0; j < pairs; ++j) {
          const float si = k.scores.scores[i], sj = k.scores.scores[j];
          above += (sj > si || (sj == si && j < i)) ? 1 : 0;
        }
        const bool retrieval = above < count;
        if (type == QuantizerType::kDuo) {
          EXPECT_EQ(k.state[i], retrieval ? 1 : 0);
        } else {
          EXPECT_EQ(k.state[i], retrieval ? k.config.bits_high : k.config.bits_low);
        }
      }
      // The decoder rebuilt from the state writes the same state.
      std::vector<uint8_t> again;
      pipeline::ByteWriter w(&again);
      k.decoder->SerializeState(w);
      EXPECT_EQ(again, k.state);
      // Malformed state.
      std::vector<uint8_t> longer = k.state, shorter = k.state, bad_value = k.state;
      longer.push_back(1);
      shorter.pop_back();
      bad_value[Rand(rng, 0, static_cast<int>(pairs) - 1)] =
          type == QuantizerType::kDuo ? 2 : (trial % 2 ? 0 : 9);
      for (const auto& s : {longer, shorter, bad_value}) {
        EXPECT_EQ(NewQuantizerForDecode(k.config, k.shape, s).status().code(),
                  StatusCode::kCorruption);
      }
      // Missing or mismatched scores at encode.
      const auto missing = NewQuantizerForEncode(k.config, k.shape, nullptr);
      EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(missing.status().message().find("head-scores"), std::string::npos);
      HeadScores wrong = k.scores;
      wrong.layers += 1;
      EXPECT_EQ(NewQuantizerForEncode(k.config, k.shape, &wrong).status().code(),
                StatusCode::kInvalidArgument);
    }
  }
}

TEST(QuantizersTest, StatelessModesRejectState) {
  std::mt19937_64 rng(16);
  for (QuantizerType type : {QuantizerType::kRaw, QuantizerType::kUniform, QuantizerType::kKivi,
                             QuantizerType::kLayerMix, QuantizerType::kTokenMix}) {
    const KvShape shape = RandomShape(rng);
    const QuantConfig c = RandomConfig(rng, type, shape);
    const std::vector<uint8_t> state = {1};
    EXPECT_EQ(NewQuantizerForDecode(c, shape, state).status().code(), StatusCode::kCorruption);
    EXPECT_TRUE(NewQuantizerForDecode(c, shape, {}).ok());
  }
}

TEST(QuantizersTest, LayerMixBitsMatchesRoundHalfUp) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 5000; ++trial) {
    const int first = Rand(rng, 1, 8), last = Rand(rng, 1, 8), n = Rand(rng, 1, 100);
    const int layer = Rand(rng, 0, n - 1);
    const int bits = LayerMixBits(first, last, layer, n);
    const int expect =
        n == 1 ? first
               : first + static_cast<int>(std::floor(double(last - first) * layer / (n - 1) + 0.5));
    ASSERT_EQ(bits, expect) << first << " " << last << " " << layer << "/" << n;
    ASSERT_GE(bits, std::min(first, last));
    ASSERT_LE(bits, std::max(first, last));
  }
  EXPECT_EQ(LayerMixBits(8, 2, 0, 7), 8);
  EXPECT_EQ(LayerMixBits(8, 2, 6, 7), 2);
}

TEST(QuantizersTest, TokenModesSegmentPerMaximalRun) {
  std::mt19937_64 rng(18);
  for (QuantizerType type : {QuantizerType::kTokenMix, QuantizerType::kDuo}) {
    for (int trial = 0; trial < 100; ++trial) {
      Case k = MakeCase(rng, type);
      ChunkInfo info{Rand(rng, 0, k.shape.layers - 1),
                     k.shape.layers,
                     KvKind::kValue,
                     k.shape.kv_heads,
                     k.shape.head_dim,
                     0,
                     Rand(rng, 1, 200),
                     0,
                     DType::kF32};
      info.total_tokens = info.tokens + Rand(rng, 0, 300);
      info.token_begin = Rand(rng, 0, info.total_tokens - info.tokens);
      std::vector<float> x =
          RandomChunkData(rng, static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim);
      QuantizedChunk q;
      ASSERT_TRUE(
          k.encoder
              ->Quantize(info, ChunkTensor{x.data(), info.kv_heads, info.tokens, info.head_dim}, &q)
              .ok());
      size_t expected = 0;
      for (int h = 0; h < info.kv_heads; ++h) {
        int prev = -1;
        for (int t = 0; t < info.tokens; ++t) {
          const int l = Expected(k.config, k.state, info, h, info.token_begin + t).levels;
          if (l != prev && l != 0) ++expected;
          prev = l;
        }
      }
      EXPECT_EQ(q.segments.size(), expected);
    }
  }
}

TEST(QuantizersTest, RawCodesNothing) {
  auto q = NewQuantizerForEncode(QuantConfig{.type = QuantizerType::kRaw}, KvShape{2, 2, 0, 16},
                                 nullptr);
  ASSERT_TRUE(q.ok());
  std::mt19937_64 rng(19);
  for (int i = 0; i < 100; ++i) EXPECT_EQ((*q)->CodedTokens(Rand(rng, 0, 100000)), 0);
  std::vector<float> x(2 * 4 * 16, 1.0f);
  ChunkInfo info{0, 2, KvKind::kKey, 2, 16, 0, 4, 4, DType::kF32};
  QuantizedChunk out;
  EXPECT_EQ((*q)->Quantize(info, ChunkTensor{x.data(), 2, 4, 16}, &out).code(),
            StatusCode::kInternal);
  EXPECT_EQ((*q)->Dequantize(info, out, ChunkTensor{x.data(), 2, 4, 16}, nullptr).code(),
            StatusCode::kInternal);
}

TEST(QuantizersTest, InvalidConfigsAreRejected) {
  const KvShape shape{2, 2, 0, 48};
  QuantConfig c;
  c.type = QuantizerType::kUniform;
  c.axis_value = QuantAxis::kToken;
  c.group = 32;  // does not divide 48
  EXPECT_EQ(NewQuantizerForEncode(c, shape, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewQuantizerForDecode(c, shape, {}).status().code(), StatusCode::kCorruption);
  c.type = QuantizerType::kKivi;  // values use the whole head_dim: fine
  EXPECT_TRUE(NewQuantizerForEncode(c, shape, nullptr).ok());
  c.bits_key = 9;
  EXPECT_EQ(NewQuantizerForEncode(c, shape, nullptr).status().code(), StatusCode::kInvalidArgument);
  c.bits_key = 2;
  c.levels_value = 1;
  EXPECT_EQ(NewQuantizerForEncode(c, shape, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::quantizers
