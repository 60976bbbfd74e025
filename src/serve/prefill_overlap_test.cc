// Copyright kvserve authors. The prefill worker's overlap of prefill and KV
// streaming (PrefillWorkerOptions::overlap_prefill, through the connector's
// StreamKvWhileProducing) changes when the KV moves, never what it is.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kvserve/serve.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

// Serving end to end: the overlap changes when the KV moves, never what it
// is, so the same requests generate the same tokens with it on and off (and,
// lossless, what one process generates).
TEST(PrefillOverlapTest, OverlapOnAndOffGenerateTheSameTokens) {
  servetest::ClusterOptions overlapped_options;
  overlapped_options.overlap_prefill = true;
  servetest::ClusterOptions sequential_options;
  sequential_options.overlap_prefill = false;
  auto overlapped = servetest::StartCluster(overlapped_options);
  auto sequential = servetest::StartCluster(sequential_options);
  ASSERT_TRUE(overlapped && sequential);
  std::mt19937_64 rng(7006);
  for (int i = 0; i < 4; ++i) {
    ServeRequest r;
    r.id = 500 + i;
    // kivi-2 keeps the last 128 tokens raw: its prompts are longer.
    r.prompt =
        i < 2 ? servetest::RandomPrompt(rng, 8, 120) : servetest::RandomPrompt(rng, 200, 240);
    r.max_new_tokens = 8;
    r.method = i < 2 ? "none" : "kivi-2";
    r.sampling.temperature = (i % 2 == 0) ? 0.0f : 0.8f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = rng();
    SCOPED_TRACE("request " + std::to_string(r.id) + " (" + r.method + "), " +
                 std::to_string(r.prompt.size()) + " tokens");
    auto on = overlapped->client->Submit(r);
    auto off = sequential->client->Submit(r);
    ASSERT_TRUE(on.ok() && off.ok());
    ASSERT_TRUE(on->status.ok()) << on->status.ToString();
    ASSERT_TRUE(off->status.ok()) << off->status.ToString();
    EXPECT_EQ(on->tokens.size(), static_cast<size_t>(r.max_new_tokens));
    EXPECT_EQ(on->tokens, off->tokens);
    EXPECT_EQ(on->timings.attempts, 1);
    EXPECT_EQ(off->timings.attempts, 1);
    EXPECT_EQ(on->timings.frame_bytes, off->timings.frame_bytes);
    if (r.method == "none") {
      EXPECT_EQ(on->tokens, servetest::Reference(servetest::SmallModel(), r));
    } else {
      EXPECT_LT(on->timings.frame_bytes, on->timings.kv_bytes);  // really quantized
    }
  }
}

// The KV streams while the prefill runs only when its transfer is predicted
// to take no longer than the prefill: a slower one would hold the engine for
// the transfer's length. Before any measurement the predictions are the
// priors (the bandwidth estimator's 10 Gbps, the prefill's seconds per
// token): a prefill predicted far faster than the transfer runs alone.
TEST(PrefillOverlapTest, ATransferSlowerThanThePrefillIsNotStreamed) {
  servetest::ClusterOptions slow_prefill;  // the default prior: the transfer is faster
  servetest::ClusterOptions fast_prefill;
  fast_prefill.prefill_seconds_per_token_prior = 1e-15;
  auto streams = servetest::StartCluster(slow_prefill);
  auto plain = servetest::StartCluster(fast_prefill);
  ASSERT_TRUE(streams && plain);
  std::mt19937_64 rng(7007);
  ServeRequest r;
  r.id = 600;
  r.prompt = servetest::RandomPrompt(rng, 100, 140);
  r.max_new_tokens = 6;
  r.method = "none";
  auto a = streams->client->Submit(r);
  auto b = plain->client->Submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->status.ok()) << a->status.ToString();
  ASSERT_TRUE(b->status.ok()) << b->status.ToString();
  EXPECT_TRUE(a->timings.streamed);
  EXPECT_FALSE(b->timings.streamed);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(b->tokens, servetest::Reference(servetest::SmallModel(), r));
}

}  // namespace
}  // namespace kvserve
