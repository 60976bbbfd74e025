// Copyright kvserve authors. MeasureProfileCost: the sizes it reports are
// those of a separate encode of the same cache, its kept output is what a
// separate decode gives, the overhead is measured only when asked for, and
// bad options are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"

namespace kvserve {
namespace {

KvCache SeededKv(uint64_t seed, const KvShape& shape) {
  SynthOptions o;
  o.shape = shape;
  o.seed = seed;
  return std::move(SynthesizeKv(o)).value();
}

TEST(ProfileCost, SizesAndOutputsAreThoseOfTheCodec) {
  for (uint64_t seed : {3u, 4u}) {
    const KvCache kv = SeededKv(seed, KvShape{2, 2, 200 + static_cast<int>(seed) * 17, 64});
    for (const char* spec : {"none", "kivi-2", "cachegen"}) {
      SCOPED_TRACE(spec);
      const Profile profile = *Profile::Parse(spec);
      std::vector<std::string> phases;
      auto m = MeasureProfileCost(
          profile, kv.view(),
          {.threads = 1, .repeats = 2, .keep_output = true, .progress = [&](const std::string& p) {
             phases.push_back(p);
           }});
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      std::vector<uint8_t> frame;
      VectorSink sink(&frame);
      ASSERT_TRUE((*EncoderContext::Create(profile, {.threads = 1}))->Encode(kv.view(), sink).ok());
      EXPECT_EQ(m->frame, frame);
      EXPECT_EQ(m->frame_bytes, frame.size());
      EXPECT_EQ(m->stats.total_bytes, frame.size());
      EXPECT_EQ(m->input_bytes, static_cast<uint64_t>(kv.view().LogicalBytes()));
      EXPECT_DOUBLE_EQ(m->codec.compression_ratio,
                       static_cast<double>(m->input_bytes) / static_cast<double>(frame.size()));
      KvCache decoded(kv.dtype(), kv.shape());
      ASSERT_TRUE(
          (*DecoderContext::Create({.threads = 1}))->Decode(frame, decoded.mutable_view()).ok());
      EXPECT_EQ(0, std::memcmp(m->decoded.bytes(), decoded.bytes(), decoded.size_bytes()));
      EXPECT_GT(m->encode_seconds, 0);
      EXPECT_DOUBLE_EQ(m->codec.encode_bytes_per_second,
                       static_cast<double>(m->input_bytes) / m->encode_seconds);
      EXPECT_EQ(m->codec.overhead_seconds, 0.0);  // not asked for
      EXPECT_EQ(phases,
                (std::vector<std::string>{"encode 1/2", "encode 2/2", "decode 1/2", "decode 2/2"}));
    }
  }
}

TEST(ProfileCost, OverheadOnlyWhenAskedAndOutputsOnlyWhenKept) {
  const KvCache kv = SeededKv(5, KvShape{2, 2, 300, 64});
  auto m = MeasureProfileCost(*Profile::Parse("kivi-2"), kv.view(),
                              {.threads = 1, .repeats = 1, .measure_overhead = true});
  ASSERT_TRUE(m.ok());
  EXPECT_GE(m->codec.overhead_seconds, 0.0);
  EXPECT_TRUE(m->frame.empty());
  EXPECT_EQ(m->decoded.size_bytes(), 0u);
  EXPECT_GT(m->frame_bytes, 0u);
}

TEST(ProfileCost, BadArgumentsAreRefused) {
  const KvCache kv = SeededKv(6, KvShape{1, 1, 64, 64});
  EXPECT_EQ(MeasureProfileCost(*Profile::Parse("none"), kv.view(), {.repeats = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureProfileCost(*Profile::Parse("none"), KvView{}).status().code(),
            StatusCode::kInvalidArgument);
  // mixhq needs head scores.
  EXPECT_EQ(MeasureProfileCost(*Profile::Parse("mixhq"), kv.view()).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
