// The KV pool per prefix chunk: a prompt sharing only its first chunks with
// a stored one gets a partial hit on exactly those chunks and generates what
// recomputing does; a full repeat hits every full chunk of the prefix; a
// prompt without a full prefix chunk is never stored; the decode worker
// generates only from exactly the frames a GENERATE names, in order, within
// its memory bound; the GENERATE's transfer list is bounded, and so is a
// POOL_FETCH's key list, whose keys survive any model id bytes; a hit's
// chunks move while another request prefills.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "kvserve/codec.h"
#include "kvserve/pool.h"
#include "kvserve/profile.h"
#include "kvserve/serve.h"
#include "pool/forwarding_pool_test_util.h"
#include "serve/serve_protocol.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

class ServePrefixChunkTest : public servetest::OverTransports {};

using servetest::PoolRequest;
using servetest::Reference;
using servetest::SmallModel;

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A cluster over `o` whose prefill worker stores a miss's prefix chunks in
// `pool` under `profiles`.
std::unique_ptr<servetest::Cluster> PoolCluster(servetest::ClusterOptions o, KvPool* pool,
                                                std::vector<std::string> profiles) {
  o.pool = pool;
  o.pool_store_profiles = std::move(profiles);
  return servetest::StartCluster(o);
}

TEST_P(ServePrefixChunkTest, SharedFirstChunksGiveAPartialHitThatGeneratesWhatRecomputingDoes) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  auto cluster = PoolCluster(o, pool.get(), {"none"});
  ASSERT_TRUE(cluster);
  const int c = o.pool_chunk_tokens;
  std::mt19937_64 rng(505);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    // A shared "document" of two chunks, then different questions.
    const std::vector<int32_t> shared = servetest::RandomPrompt(rng, 2 * c, 2 * c);
    std::vector<int32_t> tail_a = servetest::RandomPrompt(rng, 5, 3 * c);
    std::vector<int32_t> tail_b = servetest::RandomPrompt(rng, 1, 3 * c);
    tail_b[0] = (tail_a[0] + 1) % servetest::SmallSpec().vocab;  // chunk 2 differs
    auto first = cluster->client->Submit(PoolRequest(100 + 2 * i, Concat(shared, tail_a), rng));
    ASSERT_TRUE(first.ok() && first->status.ok()) << first->status.ToString();
    EXPECT_FALSE(first->timings.prefix_hit);

    ServeRequest b = PoolRequest(101 + 2 * i, Concat(shared, tail_b), rng);
    auto hit = cluster->client->Submit(b);
    ASSERT_TRUE(hit.ok() && hit->status.ok()) << hit->status.ToString();
    EXPECT_TRUE(hit->timings.prefix_hit);
    EXPECT_EQ(hit->timings.prefix_chunks, 2);
    EXPECT_EQ(hit->timings.profile, "none");
    EXPECT_EQ(hit->timings.prefill_seconds, 0);
    EXPECT_EQ(hit->tokens, Reference(SmallModel(), b));
    b.use_pool = false;
    auto without = cluster->client->Submit(b);
    ASSERT_TRUE(without.ok() && without->status.ok()) << without->status.ToString();
    EXPECT_FALSE(without->timings.prefix_hit);
    EXPECT_EQ(hit->tokens, without->tokens);
  }
}

TEST_P(ServePrefixChunkTest, FullRepeatHitsEveryFullChunk) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  auto cluster = PoolCluster(o, pool.get(), {"none", "kivi-4"});
  ASSERT_TRUE(cluster);
  const int c = o.pool_chunk_tokens;
  std::mt19937_64 rng(606);
  uint64_t chunks = 0;
  for (int i = 0; i < 4; ++i) {
    // Round 0: the prefix is a whole number of chunks (the suffix is the
    // last token only).
    const int n = i == 0 ? 3 * c + 1 : std::uniform_int_distribution<int>(c + 1, 8 * c)(rng);
    ServeRequest r = PoolRequest(200 + i, servetest::RandomPrompt(rng, n, n), rng);
    SCOPED_TRACE(std::to_string(n) + " tokens");
    auto answers = servetest::SubmitMissThenHit(*cluster->client, r);
    ASSERT_TRUE(answers);
    EXPECT_EQ(answers->hit.timings.prefix_chunks, (n - 1) / c);
    EXPECT_EQ(answers->hit.tokens, answers->miss.tokens);
    EXPECT_EQ(answers->hit.tokens, Reference(SmallModel(), r));
    chunks += (n - 1) / c;
  }
  // Each chunk was stored once per profile (the hits stored nothing).
  auto stats = pool->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->entries, 2 * chunks);
}

// A forced method hits the chunks stored under it whether or not the
// controller's table holds it (the trace benchmark's fixed baselines).
TEST_P(ServePrefixChunkTest, AForcedMethodOutsideTheTableHitsItsOwnChunks) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.pool = pool.get();
  ProfileCost only = servetest::TestTable().profile(1);
  ASSERT_EQ(only.spec, "kivi-4");
  o.table = ProfileTable::FromRows({only}).value();
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  const int c = o.pool_chunk_tokens;
  std::mt19937_64 rng(707);
  ServeRequest r = PoolRequest(300, servetest::RandomPrompt(rng, 4 * c + 1, 6 * c), rng);
  r.method = "kivi-2";
  auto answers = servetest::SubmitMissThenHit(*cluster->client, r);
  ASSERT_TRUE(answers);
  EXPECT_EQ(answers->hit.timings.profile, "kivi-2");
  EXPECT_EQ(answers->hit.timings.prefix_chunks, static_cast<int>((r.prompt.size() - 1) / c));
  EXPECT_EQ(answers->hit.tokens.size(), static_cast<size_t>(r.max_new_tokens));  // lossy: not the miss's tokens
}

// A gate that callers pass while it is open and wait at while it is
// closed; it counts the callers that came to it and those waiting at it.
class Gate {
 public:
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    ++waiting_;
    opened_.wait(lock, [this] { return open_; });
    --waiting_;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    opened_.notify_all();
  }
  int entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable opened_;
  bool open_ = true;
  int entered_ = 0, waiting_ = 0;
};

// A prefill that takes 10 ms a token: prefill time that a hit's rest, run
// on the decode side, must beat. While `gate` is closed, a prefill waits at
// its start.
class SlowPrefillEngine : public servetest::RuntimeEngineWrapper {
 public:
  Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) override {
    gate.Pass();
    std::this_thread::sleep_for(std::chrono::milliseconds(10) * prompt.size());
    return RuntimeEngineWrapper::Prefill(prompt, on_layer);
  }
  Gate gate;
};

const int kChunkTokens = servetest::ClusterOptions{}.pool_chunk_tokens;

// A cluster whose prefill worker runs `slow` and stores a miss's prefix
// chunks in `pool` as cachegen frames (a compressed store: fetching chunks
// costs little).
std::unique_ptr<servetest::Cluster> SlowCluster(KvPool* pool, SlowPrefillEngine* slow) {
  servetest::ClusterOptions o;
  o.prefill_engine = slow;
  return PoolCluster(o, pool, {"cachegen"});
}

// The adaptive request of the cluster's tests that shares the first
// `chunks` chunks of `stored` and no more.
ServeRequest Sharing(uint64_t id, const std::vector<int32_t>& stored, int chunks, int chunk_tokens,
                     std::mt19937_64& rng) {
  ServeRequest r = PoolRequest(id, stored, rng);
  for (size_t i = static_cast<size_t>(chunks) * chunk_tokens; i < r.prompt.size(); ++i)
    r.prompt[i] = static_cast<int32_t>((stored[i] + 1 + rng() % 100) % servetest::SmallSpec().vocab);
  r.method = kMethodAdaptive;
  r.workload = "chat";
  r.quality_min = 0.9;
  return r;
}

// A prompt of `chunks` chunks served once through `cluster`, whose chunks
// but the last are in the pool when this returns.
std::vector<int32_t> StoreOne(servetest::Cluster& cluster, uint64_t id, int chunks, std::mt19937_64& rng) {
  std::vector<int32_t> stored = servetest::RandomPrompt(rng, chunks * kChunkTokens, chunks * kChunkTokens);
  ServeRequest r = PoolRequest(id, stored, rng);
  r.store_before_reply = true;
  auto first = cluster.client->Submit(r);
  EXPECT_TRUE(first.ok() && first->status.ok()) << (first.ok() ? first->status : first.status()).ToString();
  return stored;
}

// Before the decode side's time for a prompt's rest has been measured, the
// adaptive choice prices that rest at three times the worker's prefill of
// it: a one-chunk hit that leaves three quarters of a slow prefill to the
// decode worker is recomputed; a hit on three chunks of four still pays.
TEST(ServePrefixChunkAdaptiveTest, AnUnmeasuredRestCountsThreeTimesItsPrefill) {
  auto pool = NewMemoryPool();
  SlowPrefillEngine slow;
  auto cluster = SlowCluster(pool.get(), &slow);
  ASSERT_TRUE(cluster);
  const int c = kChunkTokens;
  std::mt19937_64 rng(909);
  const std::vector<int32_t> stored = StoreOne(*cluster, 400, 4, rng);
  auto sharing = [&](uint64_t id, int chunks) { return Sharing(id, stored, chunks, c, rng); };
  // One chunk of four: a 48-token rest, 0.48 s at the prefill's pace and
  // priced at 1.44 s, against 0.64 s to recompute.
  auto one = cluster->client->Submit(sharing(401, 1));
  ASSERT_TRUE(one.ok() && one->status.ok()) << one->status.ToString();
  EXPECT_FALSE(one->timings.prefix_hit);
  EXPECT_GT(one->timings.prefill_seconds, 0);
  // Three of four: a 16-token rest, priced at 0.48 s.
  auto three = cluster->client->Submit(sharing(402, 3));
  ASSERT_TRUE(three.ok() && three->status.ok()) << three->status.ToString();
  EXPECT_TRUE(three->timings.prefix_hit);
  EXPECT_EQ(three->timings.prefix_chunks, 3);
  EXPECT_EQ(three->timings.profile, "cachegen");
}

// A hit spares the requests waiting for the worker's turn the prefill it
// saves: a hit on three chunks of five, recomputed when alone (its 32-token
// rest priced at 0.96 s against a 0.8 s prefill), is taken by the first of
// three such requests to get the turn after a prefill they all waited for.
TEST(ServePrefixChunkAdaptiveTest, RequestsWaitingForTheTurnCountThePrefillAHitSaves) {
  auto pool = NewMemoryPool();
  SlowPrefillEngine slow;
  auto cluster = SlowCluster(pool.get(), &slow);
  ASSERT_TRUE(cluster);
  const int c = kChunkTokens;
  std::mt19937_64 rng(1212);
  const std::vector<int32_t> stored = StoreOne(*cluster, 600, 5, rng);
  auto alone = cluster->client->Submit(Sharing(601, stored, 3, c, rng));
  ASSERT_TRUE(alone.ok() && alone->status.ok()) << alone->status.ToString();
  EXPECT_FALSE(alone->timings.prefix_hit);

  // A request holds the turn in its prefill while three sharing ones queue.
  slow.gate.Close();
  const int entered = slow.gate.entered();
  ServeRequest blocker = PoolRequest(602, servetest::RandomPrompt(rng, c, 2 * c), rng);
  std::vector<ServeRequest> requests;
  for (uint64_t id = 603; id < 606; ++id) requests.push_back(Sharing(id, stored, 3, c, rng));
  std::vector<ServeResponse> answers(requests.size() + 1);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { answers.back() = cluster->prefill->Serve(blocker); });
  while (slow.gate.entered() == entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] { answers[i] = cluster->prefill->Serve(requests[i]); });
  while (cluster->prefill->queued() < static_cast<int>(requests.size()))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  slow.gate.Open();
  for (std::thread& t : threads) t.join();
  int hits = 0;
  for (const ServeResponse& a : answers) {
    ASSERT_TRUE(a.status.ok()) << a.status.ToString();
    if (a.timings.prefix_hit) {
      ++hits;
      EXPECT_EQ(a.timings.prefix_chunks, 3);
    }
  }
  EXPECT_GE(hits, 1);
  EXPECT_FALSE(answers.back().timings.prefix_hit);
}

// The memory pool, except that while `gate` is closed a Get (every frame
// read: a relay's, a decode worker's fetch) waits.
class GatedPool final : public pooltest::ForwardingPool {
 public:
  using ForwardingPool::ForwardingPool;
  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    gate.Pass();
    return ForwardingPool::Get(key, frame);
  }
  Gate gate;
};

// A hit's chunks move outside the worker's turn: while they are held up
// in the pool, another request's prefill runs. (Were the move inside the
// turn, the second prefill would not start until the pool opened; the
// test then opens it after 60 s and fails rather than hanging.)
TEST(ServePrefixChunkPoolTest, AnotherRequestPrefillsWhileAHitsChunksMove) {
  auto base = NewMemoryPool();
  GatedPool pool(base.get());
  SlowPrefillEngine slow;
  auto cluster = SlowCluster(&pool, &slow);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(1313);
  const std::vector<int32_t> stored = StoreOne(*cluster, 700, 4, rng);
  ServeRequest hit = PoolRequest(701, stored, rng);
  hit.method = "cachegen";  // forced: the stored profile, its longest run
  ServeRequest other = PoolRequest(702, servetest::RandomPrompt(rng, 2, kChunkTokens / 2), rng);

  pool.gate.Close();
  ServeResponse hit_answer, other_answer;
  std::thread hit_thread([&] { hit_answer = cluster->prefill->Serve(hit); });
  while (pool.gate.waiting() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int entered = slow.gate.entered();
  std::thread other_thread([&] { other_answer = cluster->prefill->Serve(other); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slow.gate.entered() == entered && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool prefilled_meanwhile = slow.gate.entered() > entered && pool.gate.waiting() > 0;
  pool.gate.Open();
  other_thread.join();
  hit_thread.join();
  EXPECT_TRUE(prefilled_meanwhile);
  ASSERT_TRUE(hit_answer.status.ok()) << hit_answer.status.ToString();
  ASSERT_TRUE(other_answer.status.ok()) << other_answer.status.ToString();
  EXPECT_TRUE(hit_answer.timings.prefix_hit);
  EXPECT_EQ(hit_answer.timings.prefix_chunks, 3);
  EXPECT_FALSE(other_answer.timings.prefix_hit);
}

// A request that asks for it has its prefix chunks in the pool when Serve
// returns; one that does not leaves them for StorePending.
TEST(ServePrefixChunkStoreTest, StoreBeforeReplyStoresBeforeServeReturns) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o;
  auto cluster = PoolCluster(o, pool.get(), {"none"});
  ASSERT_TRUE(cluster);
  const int c = o.pool_chunk_tokens;
  std::mt19937_64 rng(1111);
  const int n = std::uniform_int_distribution<int>(2 * c + 1, 5 * c)(rng);
  ServeRequest later = PoolRequest(500, servetest::RandomPrompt(rng, n, n), rng);
  ServeResponse answer = cluster->prefill->Serve(later);
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  EXPECT_EQ(pool->Stats()->entries, 0u);  // waiting for StorePending
  cluster->prefill->StorePending();
  const uint64_t first = (n - 1) / c;
  EXPECT_EQ(pool->Stats()->entries, first);
  const int m = std::uniform_int_distribution<int>(2 * c + 1, 5 * c)(rng);
  ServeRequest now = PoolRequest(501, servetest::RandomPrompt(rng, m, m), rng);
  now.store_before_reply = true;
  answer = cluster->prefill->Serve(now);
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  EXPECT_EQ(pool->Stats()->entries, first + (m - 1) / c);
}

TEST_P(ServePrefixChunkTest, PromptsWithoutAFullPrefixChunkNeverHit) {
  auto pool = NewMemoryPool();
  servetest::ClusterOptions o = servetest::Over(GetParam());
  auto cluster = PoolCluster(o, pool.get(), {"none"});
  ASSERT_TRUE(cluster);
  const int c = o.pool_chunk_tokens;
  std::mt19937_64 rng(707);
  for (int i = 0; i < 4; ++i) {
    const int n = i == 0 ? c : std::uniform_int_distribution<int>(1, c)(rng);
    ServeRequest r = PoolRequest(300 + i, servetest::RandomPrompt(rng, n, n), rng);
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto response = cluster->client->Submit(r);
      ASSERT_TRUE(response.ok() && response->status.ok()) << response->status.ToString();
      EXPECT_FALSE(response->timings.prefix_hit) << n << " tokens";
      EXPECT_EQ(response->tokens, Reference(SmallModel(), r));
    }
  }
  auto stats = pool->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->entries, 0u);
  // One more token and the prefix is a full chunk: stored, then a hit.
  ServeRequest r = PoolRequest(400, servetest::RandomPrompt(rng, c + 1, c + 1), rng);
  ASSERT_TRUE(cluster->client->Submit(r).ok());
  auto hit = cluster->client->Submit(r);
  ASSERT_TRUE(hit.ok() && hit->status.ok());
  EXPECT_TRUE(hit->timings.prefix_hit);
  EXPECT_EQ(hit->timings.prefix_chunks, 1);
}

// An authenticated raw connection to the decode worker, speaking the serve
// protocol by hand.
struct Peer {
  std::unique_ptr<Connection> connection;

  Status SendFrame(uint64_t transfer_id, const std::vector<uint8_t>& frame) {
    FrameSender sender(connection.get());
    KVSERVE_RETURN_IF_ERROR(sender.sink(transfer_id).Append(frame));
    return sender.Finish().status();
  }
  Result<serve::ResultMessage> Generate(const serve::GenerateMessage& g) {
    KVSERVE_RETURN_IF_ERROR(connection->Send(kMsgServeGenerate, 0, serve::EncodeGenerate(g)));
    Message m;
    KVSERVE_RETURN_IF_ERROR(connection->Receive(&m, 30));
    return serve::DecodeResult(m.payload);
  }
};

Peer Dial(Transport& tcp, const std::string& address) {
  Peer p;
  auto c = Connection::Dial(tcp, address, servetest::Options("pd-secret", "raw-peer"));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) p.connection = std::move(*c);
  return p;
}

// The `profile` frames of tokens [i*chunk, (i+1)*chunk) of `kv`, i < count.
std::vector<std::vector<uint8_t>> ChunkFrames(const KvState& kv, int chunk, int count,
                                              const char* profile) {
  std::vector<std::vector<uint8_t>> frames;
  auto encoder = EncoderContext::Create(Profile::Parse(profile).value(), {.threads = 1});
  EXPECT_TRUE(encoder.ok());
  for (int i = 0; i < count; ++i) {
    KvView view = kv.view();
    view.data = view.At(0, 0, 0, i * chunk, 0);
    view.shape.tokens = chunk;
    auto copy = KvCache::CopyFrom(view);
    EXPECT_TRUE(copy.ok());
    frames.emplace_back();
    VectorSink sink(&frames.back());
    EXPECT_TRUE((*encoder)->Encode(copy->view(), sink).ok());
  }
  return frames;
}

TEST_P(ServePrefixChunkTest, GenerateMustNameExactlyTheFramesReceived) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(808);
  const int chunk = 16;
  for (int round = 0; round < 3; ++round) {
    ServeRequest r;
    r.prompt = servetest::RandomPrompt(rng, 2 * chunk + 1, 5 * chunk);
    r.max_new_tokens = 5;
    auto prefill = SmallModel().Prefill(r.prompt);
    ASSERT_TRUE(prefill.ok());
    const auto frames = ChunkFrames(prefill->kv, chunk, 2, "none");
    Peer peer = Dial(*cluster->transport, cluster->decode->address());
    ASSERT_TRUE(peer.connection);
    serve::GenerateMessage g;
    g.request_id = round;
    g.prompt.assign(r.prompt.begin(), r.prompt.begin() + 2 * chunk);
    g.suffix.assign(r.prompt.begin() + 2 * chunk, r.prompt.end());
    g.max_new_tokens = r.max_new_tokens;
    const uint64_t a = rng(), b = a + 1 + rng() % 100;
    // (frames sent, ids named): every mismatch is refused.
    const std::vector<std::pair<std::vector<int>, std::vector<uint64_t>>> refused = {
        {{0, 1}, {b, a}}, {{0, 1}, {a}}, {{0, 1}, {a, b, b + 1}}, {{}, {a}}, {{0}, {a, b}}};
    for (const auto& [sent, ids] : refused) {
      for (size_t i = 0; i < sent.size(); ++i)
        ASSERT_TRUE(peer.SendFrame(i == 0 ? a : b, frames[sent[i]]).ok());
      g.transfer_ids = ids;
      auto result = peer.Generate(g);
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_EQ(result->status.code(), StatusCode::kCorruption) << result->status.ToString();
      EXPECT_TRUE(result->tokens.empty());
    }
    // Exactly the frames, in order: the concatenated KV and the suffix
    // generate what one process does.
    ASSERT_TRUE(peer.SendFrame(a, frames[0]).ok());
    ASSERT_TRUE(peer.SendFrame(b, frames[1]).ok());
    g.transfer_ids = {a, b};
    auto result = peer.Generate(g);
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(result->status.ok()) << result->status.ToString();
    EXPECT_EQ(result->tokens, Reference(SmallModel(), r));
  }
}

TEST_P(ServePrefixChunkTest, HeldFramesAreBoundedByTheDecodeWorkersKvLimit) {
  auto tcp = transporttest::MakeTransport(GetParam());
  DecodeWorkerOptions d;
  d.connection = servetest::Options("pd-secret", "decode-0");
  const int chunk = 16;
  const uint64_t chunk_bytes = uint64_t{4} * 4 * 2 * 4 * 16 * chunk;  // f32, the small model
  d.max_kv_bytes = chunk_bytes * 3 / 2;
  auto decode = DecodeWorker::Start(tcp.get(), &SmallModel(), d);
  ASSERT_TRUE(decode.ok());
  std::mt19937_64 rng(909);
  const std::vector<int32_t> prompt = servetest::RandomPrompt(rng, 3 * chunk, 3 * chunk);
  auto prefill = SmallModel().Prefill(prompt);
  ASSERT_TRUE(prefill.ok());
  const auto frames = ChunkFrames(prefill->kv, chunk, 2, "none");
  Peer peer = Dial(*tcp, (*decode)->address());
  ASSERT_TRUE(peer.connection);
  ASSERT_TRUE(peer.SendFrame(1, frames[0]).ok());
  Status second = peer.SendFrame(2, frames[1]);
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted) << second.ToString();
  serve::GenerateMessage g;
  g.transfer_ids = {1, 2};
  g.prompt.assign(prompt.begin(), prompt.begin() + 2 * chunk);
  g.suffix.assign(prompt.begin() + 2 * chunk, prompt.end());
  auto result = peer.Generate(g);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->status.code(), StatusCode::kCorruption) << result->status.ToString();
  // One frame fits: served.
  ASSERT_TRUE(peer.SendFrame(3, frames[0]).ok());
  g.transfer_ids = {3};
  g.prompt.assign(prompt.begin(), prompt.begin() + chunk);
  g.suffix.assign(prompt.begin() + chunk, prompt.end());
  result = peer.Generate(g);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->status.ok()) << result->status.ToString();
  EXPECT_EQ((*decode)->refused_frames(), 1);
}

TEST(ServeProtocolTest, RequestKeepsItsPoolFlags) {
  std::mt19937_64 rng(1212);
  for (int i = 0; i < 8; ++i) {
    ServeRequest r = PoolRequest(rng(), servetest::RandomPrompt(rng, 1, 40), rng);
    r.use_pool = rng() % 2;
    r.store_before_reply = rng() % 2;
    auto back = serve::DecodeRequest(serve::EncodeRequest(r));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->id, r.id);
    EXPECT_EQ(back->prompt, r.prompt);
    EXPECT_EQ(back->use_pool, r.use_pool);
    EXPECT_EQ(back->store_before_reply, r.store_before_reply);
  }
}

TEST(ServeProtocolTest, GenerateTransferListIsBounded) {
  std::mt19937_64 rng(1010);
  serve::GenerateMessage g;
  g.request_id = rng();
  g.prompt = {1, 2, 3};
  g.suffix = {4};
  for (size_t count : {size_t{1}, size_t{2} + rng() % 100, serve::kMaxGenerateTransfers}) {
    g.transfer_ids.resize(count);
    for (auto& id : g.transfer_ids) id = rng();
    auto decoded = serve::DecodeGenerate(serve::EncodeGenerate(g));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->transfer_ids, g.transfer_ids);
    EXPECT_EQ(decoded->prompt, g.prompt);
    EXPECT_EQ(decoded->suffix, g.suffix);
  }
  for (size_t count :
       {size_t{0}, serve::kMaxGenerateTransfers + 1, serve::kMaxGenerateTransfers * 4}) {
    g.transfer_ids.assign(count, 7);
    auto decoded = serve::DecodeGenerate(serve::EncodeGenerate(g));
    EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption) << count;
  }
}

TEST(ServeProtocolTest, ResponseCarriesThePrefixChunkCountAndTheSharedLink) {
  std::mt19937_64 rng(1111);
  for (int i = 0; i < 4; ++i) {
    ServeResponse r;
    r.id = rng();
    r.timings.prefix_hit = true;
    r.timings.prefix_chunks = static_cast<int>(rng() % 5000);
    r.timings.pool_wait_seconds = static_cast<double>(rng() % 1000) / 64;
    r.timings.link_bytes_per_second = static_cast<double>(rng() % (uint64_t{1} << 40));
    r.timings.link_transfers = static_cast<int>(1 + rng() % 64);
    auto decoded = serve::DecodeResponse(serve::EncodeResponse(r));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->timings.prefix_chunks, r.timings.prefix_chunks);
    EXPECT_TRUE(decoded->timings.prefix_hit);
    EXPECT_EQ(decoded->timings.pool_wait_seconds, r.timings.pool_wait_seconds);
    EXPECT_EQ(decoded->timings.link_bytes_per_second, r.timings.link_bytes_per_second);
    EXPECT_EQ(decoded->timings.link_transfers, r.timings.link_transfers);
  }
}

TEST(ServeProtocolTest, PoolFetchCarriesAnyKeyBytesAndIsBounded) {
  std::mt19937_64 rng(1112);
  serve::PoolFetchMessage m;
  m.request_id = rng();
  m.first_transfer_id = rng() >> 1;
  for (int i = 0; i < 5; ++i) {
    PoolKey k;
    k.model_id.resize(1 + rng() % 255);
    for (char& c : k.model_id) c = static_cast<char>(rng());  // not UTF-8 in general
    k.prefix_hash = rng();
    k.profile = i % 2 ? "none" : "identity+kivi(k=2,v=2,residual=128)+pack";
    m.keys.push_back(k);
  }
  auto decoded = serve::DecodePoolFetch(serve::EncodePoolFetch(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->request_id, m.request_id);
  EXPECT_EQ(decoded->first_transfer_id, m.first_transfer_id);
  EXPECT_EQ(decoded->keys, m.keys);
  for (size_t count : {size_t{0}, serve::kMaxGenerateTransfers + 1}) {
    m.keys.assign(count, m.keys.empty() ? PoolKey{"m", 1, "none"} : m.keys.front());
    EXPECT_EQ(serve::DecodePoolFetch(serve::EncodePoolFetch(m)).status().code(), StatusCode::kCorruption) << count;
  }

  serve::PoolFetchedMessage f;
  f.request_id = rng();
  f.chunks = 1 + rng() % 4096;
  f.frame_bytes = rng();
  f.seconds = 0.25;
  f.decode_seconds = 0.125;
  f.wait_seconds = 0.0625;
  auto back = serve::DecodePoolFetched(serve::EncodePoolFetched(f));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->chunks, f.chunks);
  EXPECT_EQ(back->wait_seconds, f.wait_seconds);
  EXPECT_EQ(back->frame_bytes, f.frame_bytes);
  EXPECT_EQ(back->seconds, f.seconds);
  f.status = Status::NotSupported("no pool");
  EXPECT_EQ(serve::DecodePoolFetched(serve::EncodePoolFetched(f)).status().code(), StatusCode::kCorruption)
      << "chunks held after an error";
  f.chunks = 0;
  back = serve::DecodePoolFetched(serve::EncodePoolFetched(f));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->status.code(), StatusCode::kNotSupported);
}

KVSERVE_SERVE_OVER_TRANSPORTS(ServePrefixChunkTest);

}  // namespace
}  // namespace kvserve
