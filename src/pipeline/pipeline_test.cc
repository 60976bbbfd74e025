// Properties of whole frames: every preset and random profiles round-trip,
// encoding is deterministic, streaming equals one-shot encoding, raw
// regions are exact, damaged frames are rejected without crashing, and
// the codec's AVX2 kernels leave the thread's upper vector state clean.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "pipeline/paged_test_util.h"

namespace kvserve {
namespace {

// A seeded KV cache with channel means, outlier channels and token
// correlation, in any dtype, optionally in a head-major (non-contiguous)
// layout to exercise strides.
struct TestCache {
  KvShape shape;
  DType dtype;
  std::vector<std::byte> storage;
  KvStrides strides;
  KvView view() const { return KvView{storage.data(), dtype, shape, strides}; }
};

TestCache MakeCache(std::mt19937& rng, KvShape shape, DType dtype, bool head_major) {
  TestCache c{shape, dtype, {}, {}};
  c.storage.resize(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype));
  if (head_major) {
    c.strides.dim = 1;
    c.strides.token = shape.head_dim;
    c.strides.kind = c.strides.token * shape.tokens;
    c.strides.head = c.strides.kind * 2;
    c.strides.layer = c.strides.head * shape.kv_heads;
  } else {
    c.strides = KvStrides::Contiguous(shape);
  }
  testing::FillRandomKv(rng, MutableKvView{c.storage.data(), dtype, shape, c.strides});
  return c;
}

HeadScores RandomScores(std::mt19937& rng, const KvShape& s) {
  HeadScores hs;
  hs.layers = s.layers;
  hs.kv_heads = s.kv_heads;
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int i = 0; i < s.layers * s.kv_heads; ++i) hs.scores.push_back(u(rng));
  return hs;
}

std::vector<uint8_t> EncodeOrDie(const Profile& p, const KvView& kv, const HeadScores* hs,
                                 int threads = 0) {
  EncodeOptions opt;
  opt.head_scores = hs;
  opt.threads = threads;
  auto enc = EncoderContext::Create(p, opt);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  Status s = (*enc)->Encode(kv, sink);
  EXPECT_TRUE(s.ok()) << p.ToString() << ": " << s.ToString();
  CountingSink counter;
  EXPECT_TRUE((*enc)->Encode(kv, counter).ok());
  EXPECT_EQ(counter.count(), frame.size());
  EXPECT_EQ((*enc)->stats().total_bytes, frame.size());
  return frame;
}

float MaxAbs(const KvView& v) {
  float m = 0;
  for (int l = 0; l < v.shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < v.shape.kv_heads; ++h)
        for (int t = 0; t < v.shape.tokens; ++t)
          for (int d = 0; d < v.shape.head_dim; ++d)
            m = std::max(m, std::fabs(LoadAsFloat(v.At(l, k, h, t, d), v.dtype)));
  return m;
}

KvShape RandomShape(std::mt19937& rng) {
  const int dims[] = {16, 32, 64, 128};
  return KvShape{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 4),
                 1 + static_cast<int>(rng() % 700), dims[rng() % 4]};
}

// Round trip of every preset on random shapes, dtypes and layouts: lossless
// presets are bit-exact, lossy ones reconstruct within a loose relative
// bound (per-element bounds are the quantizer tests' job), raw regions are
// exact, and a second encode gives identical bytes.
TEST(Pipeline, EveryPresetRoundTrips) {
  std::mt19937 rng(20261129);
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (const Preset& preset : Presets()) {
    for (int trial = 0; trial < 4; ++trial) {
      auto profile = Profile::Parse(preset.spec);
      ASSERT_TRUE(profile.ok()) << preset.name << ": " << profile.status().ToString();
      KvShape shape = RandomShape(rng);
      if (profile->transform() == TransformType::kHadamard && (shape.head_dim & (shape.head_dim - 1)))
        shape.head_dim = 64;
      TestCache cache = MakeCache(rng, shape, dtypes[rng() % 3], rng() % 2);
      HeadScores hs = RandomScores(rng, shape);
      auto frame = EncodeOrDie(*profile, cache.view(), &hs);
      EXPECT_EQ(frame, EncodeOrDie(*profile, cache.view(), &hs, 1)) << "non-deterministic bytes";
      KvCache out(cache.dtype, shape);
      auto dec = DecoderContext::Create();
      ASSERT_TRUE(dec.ok());
      std::vector<uint8_t> mask;
      Status s = (*dec)->Decode(frame, out.mutable_view(), &mask);
      ASSERT_TRUE(s.ok()) << preset.name << ": " << s.ToString();
      const float scale = MaxAbs(cache.view());
      double err2 = 0, ref2 = 0;
      KvView in = cache.view(), o = out.view();
      for (int l = 0; l < shape.layers; ++l)
        for (int k = 0; k < 2; ++k)
          for (int h = 0; h < shape.kv_heads; ++h)
            for (int t = 0; t < shape.tokens; ++t) {
              const bool kept =
                  mask[((static_cast<size_t>(l) * 2 + k) * shape.kv_heads + h) * shape.tokens + t];
              for (int d = 0; d < shape.head_dim; ++d) {
                float a = LoadAsFloat(in.At(l, k, h, t, d), in.dtype);
                float b = LoadAsFloat(o.At(l, k, h, t, d), o.dtype);
                if (profile->IsLossless()) {
                  ASSERT_EQ(std::memcmp(in.At(l, k, h, t, d), o.At(l, k, h, t, d),
                                        DTypeSize(in.dtype)), 0);
                } else if (!kept) {
                  ASSERT_EQ(b, 0.f);
                } else {
                  ASSERT_LE(std::fabs(a - b), scale) << preset.name;
                  err2 += double(a - b) * (a - b);
                  ref2 += double(a) * a;
                }
              }
            }
      if (!profile->IsLossless() && ref2 > 0) EXPECT_LT(err2 / ref2, 0.5) << preset.name;
    }
  }
}

// Encoding and decoding on the calling thread (threads = 1) leave the upper
// halves of its vector registers unused: an AVX2 kernel that returned
// without vzeroupper would slow every later SSE instruction of the thread
// (a serving thread's model prefill ran 4-5x slower after one checksum).
TEST(Pipeline, CodecLeavesTheUpperVectorStateClean) {
  if (!__builtin_cpu_supports("avx")) GTEST_SKIP() << "no AVX";
  ClearAvxUpperState();  // whatever ran before on this thread
  if (AvxUpperStateInUse() != std::optional<bool>(false))
    GTEST_SKIP() << "the CPU cannot report its upper vector state";
  std::mt19937 rng(std::random_device{}());
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (const Preset& preset : Presets()) {
    const Profile profile = *Profile::Parse(preset.spec);
    KvShape shape = RandomShape(rng);
    if (profile.transform() == TransformType::kHadamard && (shape.head_dim & (shape.head_dim - 1)))
      shape.head_dim = 64;
    const TestCache cache = MakeCache(rng, shape, dtypes[rng() % 3], rng() % 2);
    const HeadScores hs = RandomScores(rng, shape);
    SCOPED_TRACE(std::string(preset.name) + " " + std::string(DTypeName(cache.dtype)));
    const auto frame = EncodeOrDie(profile, cache.view(), &hs, 1);
    EXPECT_EQ(AvxUpperStateInUse(), std::optional<bool>(false)) << "after encoding";
    KvCache out(cache.dtype, shape);
    auto dec = DecoderContext::Create({.threads = 1});
    ASSERT_TRUE(dec.ok());
    ASSERT_TRUE((*dec)->Decode(frame, out.mutable_view(), nullptr).ok());
    EXPECT_EQ(AvxUpperStateInUse(), std::optional<bool>(false)) << "after decoding";
    ClearAvxUpperState();  // one failure is reported once
  }
}

// The KIVI residual window (the most recent tokens) survives bit-exactly.
TEST(Pipeline, ResidualTokensAreExact) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    const int residual = 1 + static_cast<int>(rng() % 64);
    auto profile = Profile::Parse("identity+kivi(k=2,v=2,group=32,residual=" +
                                  std::to_string(residual) + ")+pack");
    ASSERT_TRUE(profile.ok()) << profile.status().ToString();
    KvShape shape = RandomShape(rng);
    TestCache cache = MakeCache(rng, shape, DType::kBF16, false);
    auto frame = EncodeOrDie(*profile, cache.view(), nullptr);
    KvCache out(DType::kBF16, shape);
    auto dec = DecoderContext::Create();
    ASSERT_TRUE((*dec)->Decode(frame, out.mutable_view()).ok());
    for (int l = 0; l < shape.layers; ++l)
      for (int k = 0; k < 2; ++k)
        for (int h = 0; h < shape.kv_heads; ++h)
          for (int t = std::max(0, shape.tokens - residual); t < shape.tokens; ++t)
            ASSERT_EQ(std::memcmp(cache.view().At(l, k, h, t, 0), out.view().At(l, k, h, t, 0),
                                  2 * shape.head_dim), 0);
  }
}

// Layer-at-a-time encoding (Begin / EncodeLayer in layer order / Finish)
// writes exactly the bytes of a one-shot Encode, and a receiver decoding
// records one at a time, in reverse order, gets a one-shot decode's values.
TEST(Pipeline, StreamingEqualsOneShot) {
  std::mt19937 rng(11);
  for (const char* spec : {"kivi-2", "cachegen", "hadamard(seed=3)+kivi(k=4,v=2,group=32,residual=64)+rans"}) {
    auto profile = Profile::Parse(spec);
    ASSERT_TRUE(profile.ok()) << spec;
    KvShape shape = RandomShape(rng);
    shape.head_dim = 64;
    TestCache cache = MakeCache(rng, shape, DType::kF16, false);
    auto whole = EncodeOrDie(*profile, cache.view(), nullptr);
    auto enc = EncoderContext::Create(*profile);
    std::vector<uint8_t> streamed;
    VectorSink sink(&streamed);
    ASSERT_TRUE((*enc)->Begin(shape, DType::kF16, sink).ok());
    for (int l = 0; l < shape.layers; ++l) ASSERT_TRUE((*enc)->EncodeLayer(l, cache.view()).ok());
    ASSERT_TRUE((*enc)->Finish().ok());
    EXPECT_EQ(whole, streamed);

    // A receiver decoding record by record (in reverse order) gets the same
    // values as a one-shot decode.
    auto info = InspectFrame(whole);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    KvCache a(DType::kF16, shape), b(DType::kF16, shape);
    auto dec = DecoderContext::Create();
    ASSERT_TRUE((*dec)->Decode(whole, a.mutable_view()).ok());
    auto dec2 = DecoderContext::Create();
    auto used = (*dec2)->Start(whole);
    ASSERT_TRUE(used.ok());
    for (auto it = info->chunks.rbegin(); it != info->chunks.rend(); ++it) {
      auto r = (*dec2)->DecodeRecord(std::span(whole).subspan(it->offset), b.mutable_view());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(*r, it->size);
    }
    EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.size_bytes()), 0);
    // Encoding the same layer twice and finishing early are errors.
    ASSERT_TRUE((*enc)->Begin(shape, DType::kF16, sink).ok());
    ASSERT_TRUE((*enc)->EncodeLayer(0, cache.view()).ok());
    EXPECT_FALSE((*enc)->EncodeLayer(0, cache.view()).ok());
    if (shape.layers > 1) EXPECT_FALSE((*enc)->Finish().ok());
  }
}

// Any single bit flip, any truncation and random bytes are rejected with an
// error (never a crash), and the decoder still works afterwards.
TEST(Pipeline, DamagedFramesAreRejected) {
  std::mt19937 rng(5);
  for (const char* spec : {"kivi-2", "cachegen", "none", "zstd", "mixhq"}) {
    auto profile = Profile::Parse(spec);
    ASSERT_TRUE(profile.ok()) << spec;
    KvShape shape{2, 2, 40 + static_cast<int>(rng() % 100), 32};
    TestCache cache = MakeCache(rng, shape, DType::kBF16, false);
    HeadScores hs = RandomScores(rng, shape);
    auto frame = EncodeOrDie(*profile, cache.view(), &hs);
    KvCache out(DType::kBF16, shape);
    auto dec = DecoderContext::Create();
    const size_t flips = std::min<size_t>(frame.size() * 8, 3000);
    for (size_t i = 0; i < flips; ++i) {
      const size_t bit = frame.size() * 8 <= 3000 ? i : rng() % (frame.size() * 8);
      auto bad = frame;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      EXPECT_FALSE((*dec)->Decode(bad, out.mutable_view()).ok()) << spec << " bit " << bit;
    }
    for (size_t len = 0; len < frame.size(); len += 1 + frame.size() / 500) {
      EXPECT_FALSE((*dec)->Decode(std::span(frame).first(len), out.mutable_view()).ok());
      EXPECT_FALSE(InspectFrame(std::span(frame).first(len)).ok());
    }
    for (int i = 0; i < 200; ++i) {
      std::vector<uint8_t> junk(rng() % 4096);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      if (i % 2 && junk.size() >= 4) std::memcpy(junk.data(), "KVSF", 4);
      EXPECT_FALSE((*dec)->Decode(junk, out.mutable_view()).ok());
    }
    ASSERT_TRUE((*dec)->Decode(frame, out.mutable_view()).ok());
  }
}

TEST(Pipeline, RejectsMismatchedOutput) {
  std::mt19937 rng(3);
  KvShape shape{1, 1, 64, 32};
  TestCache cache = MakeCache(rng, shape, DType::kF16, false);
  auto frame = EncodeOrDie(*Profile::Parse("kivi-4"), cache.view(), nullptr);
  auto dec = DecoderContext::Create();
  KvCache wrong_dtype(DType::kF32, shape);
  EXPECT_EQ((*dec)->Decode(frame, wrong_dtype.mutable_view()).code(), StatusCode::kInvalidArgument);
  KvCache wrong_shape(DType::kF16, KvShape{1, 1, 63, 32});
  EXPECT_EQ((*dec)->Decode(frame, wrong_shape.mutable_view()).code(), StatusCode::kInvalidArgument);
}

// Inspect's section sizes add up to the frame size.
TEST(Pipeline, InspectAccountsForEveryByte) {
  std::mt19937 rng(9);
  for (const Preset& preset : Presets()) {
    auto profile = Profile::Parse(preset.spec);
    KvShape shape = RandomShape(rng);
    shape.head_dim = 64;
    TestCache cache = MakeCache(rng, shape, DType::kBF16, false);
    HeadScores hs = RandomScores(rng, shape);
    auto frame = EncodeOrDie(*profile, cache.view(), &hs);
    auto info = InspectFrame(frame);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    const FrameStats& s = info->stats;
    EXPECT_EQ(s.header_bytes + s.record_header_bytes + s.transform_bytes + s.param_bytes +
                  s.code_bytes + s.raw_bytes,
              frame.size())
        << preset.name;
    EXPECT_EQ(info->chunks.size(), info->chunk_count);
  }
}

}  // namespace
}  // namespace kvserve
