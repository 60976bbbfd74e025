// Copyright kvserve authors. Ground truth files and the measurements they
// are made of.
#include <gtest/gtest.h>

#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"

namespace kvserve {
namespace {

struct SmallKv {
  KvCache kv;
  HeadScores scores;
};

SmallKv MakeSmallKv(uint64_t seed) {
  SynthOptions o;
  o.shape = KvShape{2, 2, 256, 64};
  o.seed = seed;
  auto kv = SynthesizeKv(o);
  EXPECT_TRUE(kv.ok());
  return {std::move(*kv), SynthesizeHeadScores(2, 2, seed)};
}

TEST(KvMeasure, LosslessIsExactAndFewerBitsCostFidelity) {
  for (uint64_t seed : {1u, 2u}) {
    SmallKv s = MakeSmallKv(seed);
    auto none = MeasureOnKv(*Profile::Parse("none"), s.kv.view(), &s.scores);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->proxy_quality, 1.0);
    EXPECT_LE(none->codec.compression_ratio, 1.0);  // headers only add bytes
    double previous_quality = 2.0, previous_cr = 0.0;
    for (int bits : {8, 4, 3, 2, 1}) {
      const std::string spec = "identity+kivi(k=" + std::to_string(bits) +
                               ",v=" + std::to_string(bits) + ")+pack";
      auto m = MeasureOnKv(*Profile::Parse(spec), s.kv.view(), &s.scores);
      ASSERT_TRUE(m.ok()) << spec;
      EXPECT_LE(m->proxy_quality, previous_quality) << spec;
      EXPECT_GT(m->codec.compression_ratio, previous_cr) << spec;
      EXPECT_GT(m->codec.encode_bytes_per_second, 0.0);
      previous_quality = m->proxy_quality;
      previous_cr = m->codec.compression_ratio;
    }
  }
}

TEST(GroundTruth, GenerateSaveLoadAndEvaluate) {
  SmallKv s = MakeSmallKv(3);
  auto space = StrategySpace::FromJson(R"({"transforms":{"identity":{},"hadamard":{}},
      "codecs":{"pack":{},"rans":{}},"quantizers":{"kivi":{"k":[2,4],"v":[2,4]},"raw":{}},
      "include":["mixhq"]})");
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  int calls = 0;
  auto truth = GenerateGroundTruth(*space, s.kv.view(), &s.scores, "unit", "test",
                                   [&](int done, int total) {
                                     ++calls;
                                     EXPECT_LE(done, total);
                                   });
  ASSERT_TRUE(truth.ok()) << truth.status().ToString();
  EXPECT_EQ(calls, space->size());
  EXPECT_EQ(truth->quality_kind, kReconstructionProxyLabel);
  auto loaded = GroundTruth::FromJson(truth->ToJson());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->rows.size(), truth->rows.size());
  for (size_t i = 0; i < truth->rows.size(); ++i) {
    EXPECT_EQ(loaded->rows[i].spec, truth->rows[i].spec);
    EXPECT_DOUBLE_EQ(loaded->rows[i].quality, truth->rows[i].quality);
    EXPECT_DOUBLE_EQ(loaded->rows[i].codec.compression_ratio,
                     truth->rows[i].codec.compression_ratio);
  }
  auto evaluator = loaded->MakeEvaluator();
  EXPECT_TRUE(evaluator->is_proxy());
  auto candidates = loaded->Candidates();
  ASSERT_TRUE(candidates.ok());
  for (size_t i = 0; i < candidates->size(); ++i) {
    auto q = evaluator->Evaluate((*candidates)[i].profile);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->quality, loaded->rows[i].quality);
  }
  EXPECT_FALSE(evaluator->Evaluate(*Profile::Parse("kivi-4")).ok());
  const int best = loaded->BestFeasible(0.9);
  ASSERT_GE(best, 0);
  for (const GroundTruthRow& r : loaded->rows) {
    if (r.quality >= 0.9) EXPECT_LE(r.codec.compression_ratio, loaded->rows[best].codec.compression_ratio);
  }
}

TEST(GroundTruth, RejectsForeignFiles) {
  EXPECT_FALSE(GroundTruth::FromJson("{}").ok());
  EXPECT_FALSE(GroundTruth::FromJson("not json").ok());
}

}  // namespace
}  // namespace kvserve
