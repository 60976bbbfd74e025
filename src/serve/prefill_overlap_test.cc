// Copyright kvserve authors. The prefill worker's overlap of prefill and KV
// streaming (PrefillWorkerOptions::overlap_prefill, through the connector's
// StreamKvWhileProducing) changes when the KV moves, never what it is; a
// transfer slower than its prefill streams only when no request waits; a
// transfer sent after its prefill does not hold the engine.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

// A decode engine whose first KV allocation (the first frame's arrival)
// waits, once inside, until the test opens it: the first transfer cannot
// end, so the prefill worker stays on its request while others arrive.
class GatedDecodeEngine : public servetest::RuntimeEngineWrapper {
 public:
  ~GatedDecodeEngine() override { Open(); }
  Result<std::unique_ptr<EngineKv>> AllocateKv(const KvShape& shape, DType dtype) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!entered_) {
        entered_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
      }
    }
    return RuntimeEngineWrapper::AllocateKv(shape, dtype);
  }
  // Waits (at most a minute) for the first allocation to be inside.
  bool AwaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::minutes(1), [&] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

// A transfer predicted slower than its prefill streams while the prefill
// runs only when no request waits behind it (streaming would hold the
// engine while the link drains, and the waiting requests with it). On a
// link of 500 KB/s a transfer of these prompts takes about as long as tens
// of their prefills. The first request, alone, streams (its transfer held
// up at the decode worker until two more requests wait behind it); of those
// two, the one that runs while the other still waits prefills first, the
// last (no one behind it) streams.
TEST(PrefillOverlapTest, ASlowTransferStreamsOnlyWhenNoRequestWaitsBehindIt) {
  GatedDecodeEngine engine;
  servetest::ClusterOptions o;
  o.decode_engine = &engine;
  o.shape_bytes_per_second = 500e3;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(7007);
  std::vector<ServeRequest> requests(3);
  std::vector<ServeResponse> answers(3);
  for (int i = 0; i < 3; ++i) {
    requests[i].id = 600 + i;
    requests[i].prompt = servetest::RandomPrompt(rng, 60, 140);
    requests[i].max_new_tokens = 6;
    requests[i].method = "none";
  }
  auto serve = [&](int i) { return std::thread([&, i] { answers[i] = cluster->prefill->Serve(requests[i]); }); };
  std::vector<std::thread> threads;
  threads.push_back(serve(0));
  ASSERT_TRUE(engine.AwaitEntered());
  for (int i = 1; i < 3; ++i) {
    threads.push_back(serve(i));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (cluster->prefill->queued() < i && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(cluster->prefill->queued(), i);
  }
  engine.Open();
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(answers[i].status.ok()) << answers[i].status.ToString();
    EXPECT_EQ(answers[i].tokens, servetest::Reference(servetest::SmallModel(), requests[i]));
  }
  EXPECT_TRUE(answers[0].timings.streamed);
  EXPECT_EQ(answers[1].timings.streamed + answers[2].timings.streamed, 1);
  EXPECT_EQ(cluster->prefill->queued(), 0);
}

// A transfer sent after its prefill, and the wait for its decode result,
// leave the engine to the next request: with the first request's transfer
// held up at the decode worker, a second request is prefilled, sent and
// answered all the same (before, it waited until the first transfer timed
// out and was sent again).
TEST(PrefillOverlapTest, ATransferAfterThePrefillLeavesTheEngineToTheNextRequest) {
  GatedDecodeEngine engine;
  servetest::ClusterOptions o;
  o.decode_engine = &engine;
  o.overlap_prefill = false;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(7021);
  std::vector<ServeRequest> requests(2);
  for (int i = 0; i < 2; ++i) {
    requests[i].id = 620 + i;
    requests[i].prompt = servetest::RandomPrompt(rng, 60, 140);
    requests[i].max_new_tokens = 6;
    requests[i].method = "none";
  }
  ServeResponse first;
  std::thread held([&] { first = cluster->prefill->Serve(requests[0]); });
  ASSERT_TRUE(engine.AwaitEntered());
  std::future<ServeResponse> second =
      std::async(std::launch::async, [&] { return cluster->prefill->Serve(requests[1]); });
  const bool answered = second.wait_for(std::chrono::minutes(1)) == std::future_status::ready;
  EXPECT_TRUE(answered) << "the second request waited for the first one's transfer";
  engine.Open();
  held.join();
  const ServeResponse next = second.get();
  // Answered while the first transfer's one attempt was still held (not
  // after it gave up on the held decode worker and went again).
  EXPECT_EQ(first.timings.attempts, 1);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  ASSERT_TRUE(next.status.ok()) << next.status.ToString();
  EXPECT_EQ(first.tokens, servetest::Reference(servetest::SmallModel(), requests[0]));
  EXPECT_EQ(next.tokens, servetest::Reference(servetest::SmallModel(), requests[1]));
}

}  // namespace
}  // namespace kvserve
