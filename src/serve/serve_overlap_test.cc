// Requests of one prefill worker generate at once: a request lets go of the
// worker while it awaits its decode result (on a decode connection of its
// own), so the next request's prefill and transfer run meanwhile and the
// decode worker sees several requests at once; never more than
// PrefillWorkerOptions::max_decode_connections; the next prefill runs even
// while every decode connection is out; and every request still generates
// what one process does.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "kvserve/serve.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

using servetest::Reference;
using servetest::RuntimeEngineWrapper;
using servetest::SmallModel;

// The small model's runtime as a decode engine whose Generate calls wait
// for each other: a call waits until `meet` calls are inside (or `patience`
// has passed: only a worker that never lets them meet waits that long) and
// the most calls inside at once is recorded.
class MeetingEngine : public RuntimeEngineWrapper {
 public:
  MeetingEngine(int meet, std::chrono::milliseconds patience) : meet_(meet), patience_(patience) {}

  Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                const std::vector<std::vector<uint8_t>>& keep_masks,
                                const EngineGenerate& request) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++inside_;
      most_ = std::max(most_, inside_);
      if (inside_ >= meet_) met_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, patience_, [&] { return met_; });
    }
    auto tokens = RuntimeEngineWrapper::Generate(std::move(parts), keep_masks, request);
    std::lock_guard<std::mutex> lock(mu_);
    --inside_;
    return tokens;
  }

  int most() const {
    std::lock_guard<std::mutex> lock(mu_);
    return most_;
  }

 private:
  const int meet_;
  const std::chrono::milliseconds patience_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0, most_ = 0;
  bool met_ = false;
};

// `n` requests of fresh random prompts (greedy, raw), served at once by
// cluster's prefill worker from `n` threads; each response checked against
// the single-process reference.
void ServeAtOnce(servetest::Cluster& cluster, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ServeRequest> requests(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ServeRequest& r = requests[static_cast<size_t>(i)];
    r.id = 500 + static_cast<uint64_t>(i);
    r.prompt = servetest::RandomPrompt(rng, 8, 96);
    r.max_new_tokens = 6;
    r.method = "none";
  }
  std::vector<ServeResponse> responses(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] { responses[i] = cluster.prefill->Serve(requests[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(requests[i].id));
    ASSERT_TRUE(responses[i].status.ok()) << responses[i].status.ToString();
    EXPECT_EQ(responses[i].tokens, Reference(SmallModel(), requests[i]));
  }
}

TEST(ServeOverlap, RequestsOfOnePrefillWorkerGenerateAtOnce) {
  // Three requests meet inside the decode engine only if none of them holds
  // the prefill worker while it awaits its result.
  MeetingEngine engine(/*meet=*/3, std::chrono::seconds(20));
  servetest::ClusterOptions o;
  o.decode_engine = &engine;
  o.max_decode_connections = 3;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  ServeAtOnce(*cluster, 3, 7);
  EXPECT_EQ(engine.most(), 3);
  EXPECT_EQ(cluster->decode->completed(), 3);
}

TEST(ServeOverlap, AtMostMaxDecodeConnectionsGenerateAtOnce) {
  // Each call would wait for a second one; with one decode connection per
  // worker the second never comes while the first is inside.
  MeetingEngine engine(/*meet=*/2, std::chrono::milliseconds(300));
  servetest::ClusterOptions o;
  o.decode_engine = &engine;
  o.max_decode_connections = 1;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  ServeAtOnce(*cluster, 3, 8);
  EXPECT_EQ(engine.most(), 1);
}

// Prefills counted on the prefill side; the decode side's Generate waits
// until `want` prefills have run (or `patience` has passed); whether they
// had for the first generation is recorded.
struct PrefillGate {
  std::mutex mu;
  std::condition_variable cv;
  int prefills = 0;
  int generations = 0;
  bool met = false;  // by the first generation
};

class CountingPrefillEngine : public RuntimeEngineWrapper {
 public:
  explicit CountingPrefillEngine(PrefillGate* gate) : gate_(gate) {}
  Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) override {
    auto result = RuntimeEngineWrapper::Prefill(prompt, on_layer);
    std::lock_guard<std::mutex> lock(gate_->mu);
    ++gate_->prefills;
    gate_->cv.notify_all();
    return result;
  }

 private:
  PrefillGate* gate_;
};

class WaitForPrefillsEngine : public RuntimeEngineWrapper {
 public:
  WaitForPrefillsEngine(PrefillGate* gate, int want, std::chrono::milliseconds patience)
      : gate_(gate), want_(want), patience_(patience) {}
  Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                const std::vector<std::vector<uint8_t>>& keep_masks,
                                const EngineGenerate& request) override {
    {
      std::unique_lock<std::mutex> lock(gate_->mu);
      const bool first = gate_->generations++ == 0;
      const bool met = gate_->cv.wait_for(lock, patience_, [&] { return gate_->prefills >= want_; });
      if (first) gate_->met = met;
    }
    return RuntimeEngineWrapper::Generate(std::move(parts), keep_masks, request);
  }

 private:
  PrefillGate* gate_;
  const int want_;
  const std::chrono::milliseconds patience_;
};

TEST(ServeOverlap, ThePrefillGoesOnWhileEveryDecodeConnectionIsOut) {
  // One decode connection: the first request's generation waits until a
  // second prefill has run, which happens only if the second request does
  // not wait for that connection before its prefill.
  PrefillGate gate;
  CountingPrefillEngine prefill(&gate);
  WaitForPrefillsEngine decode(&gate, /*want=*/2, std::chrono::seconds(20));
  servetest::ClusterOptions o;
  o.prefill_engine = &prefill;
  o.decode_engine = &decode;
  o.max_decode_connections = 1;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  ServeAtOnce(*cluster, 2, 9);
  EXPECT_TRUE(gate.met);
  EXPECT_EQ(gate.prefills, 2);
}

}  // namespace
}  // namespace kvserve
