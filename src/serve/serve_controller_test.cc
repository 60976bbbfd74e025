// The controller on the serving path (PrefillWorker::Choose and its bandit
// feedback): the first request to a decode worker that has not been measured
// yet goes raw on a link of unknown rate, and is decided on the rate of a
// link the worker shapes itself; the bandit is not locked out of the best profile by that
// first, predictably mispredicted transfer; profiles the worker cannot
// encode (no head scores) are never chosen; and a decision uses the frame
// size of the request's own shape, so a profile whose table CR is high but
// whose frame for a short prompt is all raw residual is never chosen over
// raw.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kvserve/codec.h"
#include "kvserve/serve.h"
#include "kvserve/frame_size_model.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

using servetest::SmallModel;

// One fast 2-bit profile whose table CR (10) wins at any bandwidth below
// ~40 Gbps, the estimator's 10 Gbps prior included.
ProfileTable FastKiviTable(const char* spec, double cr) {
  ProfileCost p;
  p.spec = spec;
  p.compression_ratio = cr;
  p.encode_bytes_per_second = 5e10;
  p.decode_bytes_per_second = 5e10;
  p.quality = {{"chat", 0.99}};
  return ProfileTable::FromRows({p}).value();
}

// A cluster on a 4 MB/s link whose table holds the one profile `spec`.
servetest::ClusterOptions SlowLinkWith(const char* spec, double cr) {
  servetest::ClusterOptions o;
  o.table = FastKiviTable(spec, cr);
  o.shape_bytes_per_second = 4e6;
  return o;
}

ServeRequest Adaptive(std::mt19937_64& rng, uint64_t id, int min_tokens, int max_tokens) {
  ServeRequest r;
  r.id = id;
  r.prompt = servetest::RandomPrompt(rng, min_tokens, max_tokens);
  r.max_new_tokens = 2;
  r.workload = "chat";
  return r;
}

// A 4 MB/s link, far below the 10 Gbps prior, whose rate the worker is not
// to use (shaped_rate_log_sigma 0: as for a link it does not shape). The
// first request has no measurement of the peer: raw. Its slow transfer is
// the link, not the profile: every later request uses the profile the table
// says wins there.
TEST(ServeControllerTest, UnmeasuredPeerGoesRawAndTheBanditIsNotLockedOut) {
  servetest::ClusterOptions o = SlowLinkWith("identity+kivi(k=2,v=2,residual=16)+pack", 10.0);
  o.shaped_rate_log_sigma = 0;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(71);
  int compressed = 0;
  const int requests = 10;
  for (int i = 0; i < requests; ++i) {
    auto response = cluster->client->Submit(Adaptive(rng, 700 + i, 200, 260));
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    const RequestTimings& t = response->timings;
    if (i == 0) {
      EXPECT_EQ(t.profile, "none") << "decided on the estimator's prior, not a measurement";
      continue;
    }
    if (t.profile != "none") ++compressed;
  }
  // Exploration may send one or two raw; the bandit must not shut kivi out.
  EXPECT_GE(compressed, requests - 3);
}

// The same link, its rate known to the worker that shapes it: the first
// request, not yet measured, is decided on that rate (the profile the table
// says wins at 4 MB/s), and so is every later one.
TEST(ServeControllerTest, AShapedLinksRateDecidesBeforeTheFirstMeasurement) {
  servetest::ClusterOptions o = SlowLinkWith("identity+kivi(k=2,v=2,residual=16)+pack", 10.0);
  o.bandit = false;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(73);
  for (int i = 0; i < 3; ++i) {
    auto response = cluster->client->Submit(Adaptive(rng, 720 + i, 200, 260));
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    EXPECT_EQ(response->timings.profile, "identity+kivi(k=2,v=2,residual=16)+pack") << i;
    if (i == 0) {
      EXPECT_NEAR(response->timings.bandwidth_estimate, 4e6, 1.0);
    }
  }
}

// residual=128 keeps the last 128 tokens raw: a 64-token prompt's frame is
// all raw region plus headers, more bytes than raw, whatever the table's CR.
// On a slow link, where the table's CR would win, the decision is raw (the
// analytical choice, bandit off, so no learning hides it).
TEST(ServeControllerTest, ShortPromptsAreDecidedWithTheirOwnFrameSize) {
  servetest::ClusterOptions o = SlowLinkWith("identity+kivi(k=2,v=2,residual=128)+pack", 9.0);
  o.bandit = false;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(72);
  // Measure the link first (a long prompt, where the profile does pay).
  for (int i = 0; i < 3; ++i) {
    auto warm = cluster->client->Submit(Adaptive(rng, 800 + i, 300, 400));
    ASSERT_TRUE(warm.ok() && warm->status.ok());
  }
  for (int i = 0; i < 5; ++i) {
    auto response = cluster->client->Submit(Adaptive(rng, 900 + i, 64, 64));
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    const RequestTimings& t = response->timings;
    EXPECT_EQ(t.profile, "none") << "frame of " << t.frame_bytes << " bytes for " << t.kv_bytes
                                 << " bytes of KV";
  }
  // A long prompt still gets the profile: the plan, not a blanket rule.
  auto long_prompt = cluster->client->Submit(Adaptive(rng, 999, 500, 600));
  ASSERT_TRUE(long_prompt.ok() && long_prompt->status.ok());
  EXPECT_NE(long_prompt->timings.profile, "none");
  EXPECT_LT(long_prompt->timings.frame_bytes, long_prompt->timings.kv_bytes);
}

// A table row that needs head scores (mixhq) and would win on this slow
// link: a worker started without scores never chooses it, so every request
// is served (with the kivi row once the link is measured).
TEST(ServeControllerTest, ProfilesNeedingHeadScoresAreLeftOutWithoutThem) {
  ProfileCost mix, kivi;
  mix.spec = "hadamard(seed=7)+mixhq(high=4,low=2,heads=25,group=32)+rans";
  mix.compression_ratio = 20;
  kivi.spec = "identity+kivi(k=2,v=2,residual=16)+pack";
  kivi.compression_ratio = 6;
  for (ProfileCost* p : {&mix, &kivi}) {
    p->encode_bytes_per_second = p->decode_bytes_per_second = 5e10;
    p->quality = {{"chat", 0.99}};
  }
  servetest::ClusterOptions o;
  o.table = ProfileTable::FromRows({mix, kivi}).value();
  o.shape_bytes_per_second = 4e6;
  o.bandit = false;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(74);
  int compressed = 0;
  for (int i = 0; i < 4; ++i) {
    auto response = cluster->client->Submit(Adaptive(rng, 950 + i, 200, 260));
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    EXPECT_NE(response->timings.profile, mix.spec);
    if (response->timings.profile != "none") ++compressed;
  }
  EXPECT_GE(compressed, 2);
}

// The frame-size model: exact for a pack profile at every length; for an
// entropy codec, after one observed frame it predicts that frame's size for
// that length exactly, and other lengths from the learned gain.
TEST(ServeControllerTest, FrameSizeModelIsExactForPackAndLearnsEntropyGains) {
  ProfileCost pack, rans;
  pack.spec = "identity+kivi(k=2,v=2,residual=32)+pack";
  pack.compression_ratio = 6;
  rans.spec = "hadamard+kivi(k=2,v=2,residual=32)+rans";
  rans.compression_ratio = 9;
  pack.quality = rans.quality = {{"chat", 0.99}};
  ProfileTable table = ProfileTable::FromRows({pack, rans}).value();
  const ModelConfig& c = SmallModel().config();
  const KvShape model_shape{c.layers, c.kv_heads, 1, c.head_dim};
  FrameSizeModel sizes(table, model_shape, DType::kF32, nullptr, 512);
  std::mt19937_64 rng(73);
  for (int tokens : {20, 64, 300, 777}) {
    auto prefill = SmallModel().Prefill(servetest::RandomPrompt(rng, tokens, tokens));
    ASSERT_TRUE(prefill.ok());
    for (int p = 1; p <= 2; ++p) {
      auto encoder = EncoderContext::Create(Profile::Parse(table.profile(p).spec).value(), {.threads = 1});
      ASSERT_TRUE(encoder.ok());
      CountingSink sink;
      ASSERT_TRUE((*encoder)->Encode(prefill->kv.view(), sink).ok());
      if (p == 1) {
        EXPECT_EQ(sizes.For(tokens)[1], static_cast<double>(sink.count())) << tokens;
      } else {
        sizes.Observe(2, tokens, sink.count());
        const double predicted = sizes.For(tokens)[2];
        // The first observation sets the gain; later ones move it by 0.3.
        if (tokens == 20) {
          EXPECT_NEAR(predicted, static_cast<double>(sink.count()), 1.0);
        }
        EXPECT_NEAR(predicted / static_cast<double>(sink.count()), 1.0, 0.1) << tokens;
      }
    }
  }
  EXPECT_LT(sizes.gain(2), 1.0);
  EXPECT_EQ(sizes.gain(1), 1.0);
}

}  // namespace
}  // namespace kvserve
