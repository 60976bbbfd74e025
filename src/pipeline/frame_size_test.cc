// PlanFrameSize against real encodes: for every preset and more specs (all
// quantizer modes, affine side bytes, the pack and entropy codecs), random
// shapes and dtypes, the planned fixed bytes equal the encoder's header,
// record, side and params bytes, and with the pack codec the planned total
// is the frame's size to the byte.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"

namespace kvserve {
namespace {

TEST(FrameSize, PlanMatchesTheEncoder) {
  std::vector<std::string> specs;
  for (const Preset& p : Presets()) specs.emplace_back(p.spec);
  for (const char* s : {"identity+tokenmix(high=6,low=2,sinks=4,recent=32)+pack",
                        "affine+uniform(k=3,v=5,group=16)+pack+pipeline(chunk=64)",
                        "hadamard+layermix(first=6,last=2,residual=8)+pack",
                        "identity+duo(heads=25,sinks=2,recent=8)+pack",
                        "identity+kivi(k=2,v=2,group=16,residual=37)+pack+pipeline(chunk=32)",
                        "identity+mixhq(high=5,low=1,heads=40)+lz4"})
    specs.push_back(s);
  std::mt19937 rng(4242);
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (const std::string& spec : specs) {
    auto profile = Profile::Parse(spec);
    ASSERT_TRUE(profile.ok()) << spec << ": " << profile.status().ToString();
    for (int trial = 0; trial < 4; ++trial) {
      const KvShape shape{1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 3),
                          1 + static_cast<int>(rng() % 600), 16 << (rng() % 3)};
      const DType dtype = dtypes[rng() % 3];
      SCOPED_TRACE(spec + " " + std::to_string(shape.tokens) + " tokens");
      KvCache kv(dtype, shape);
      std::normal_distribution<float> n(0.f, 1.f);
      for (size_t i = 0; i < kv.size_bytes() / DTypeSize(dtype); ++i)
        StoreFromFloat(n(rng), kv.bytes() + i * DTypeSize(dtype), dtype);
      HeadScores scores{shape.layers, shape.kv_heads, {}};
      for (int i = 0; i < shape.layers * shape.kv_heads; ++i) scores.scores.push_back(n(rng));
      auto encoder = EncoderContext::Create(*profile, {.threads = 1, .head_scores = &scores});
      ASSERT_TRUE(encoder.ok());
      CountingSink sink;
      ASSERT_TRUE((*encoder)->Encode(kv.view(), sink).ok());
      const FrameStats& s = (*encoder)->stats();
      auto plan = PlanFrameSize(*profile, shape, dtype, &scores);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->fixed_bytes,
                s.header_bytes + s.record_header_bytes + s.transform_bytes + s.param_bytes);
      EXPECT_EQ(plan->exact, profile->codec() == CodecType::kPack);
      if (plan->exact) {
        EXPECT_EQ(plan->total_bytes(), sink.count());
        EXPECT_EQ(plan->code_bytes, s.code_bytes);
        EXPECT_EQ(plan->raw_bytes, s.raw_bytes);
      }
    }
  }
}

TEST(FrameSize, ShortPromptUnderAResidualIsAllRaw) {
  // kivi-2 keeps the last 128 tokens raw: 64 tokens have no coded region,
  // so the frame is the raw bytes plus headers, more than the KV itself.
  auto profile = Profile::Parse("kivi-2");
  ASSERT_TRUE(profile.ok());
  const KvShape shape{8, 2, 64, 64};
  auto plan = PlanFrameSize(*profile, shape, DType::kF16);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->code_bytes, 0u);
  EXPECT_EQ(plan->raw_bytes, static_cast<uint64_t>(shape.NumElements()) * 2);
  EXPECT_GT(plan->total_bytes(), plan->raw_bytes);
  EXPECT_EQ(PlanFrameSize(*profile, KvShape{8, 2, 0, 64}, DType::kF16).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
