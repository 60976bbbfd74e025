// Copyright kvserve authors. The trace replayer: parsing (errors name the
// line; the shared Mooncake trace parses whole), requests from a window
// (shared block ids are shared prefixes, arrivals shifted and scaled, caps),
// and a short replay on a small random model through a router to two
// prefill workers sharing a pool and one decode worker: every request is
// answered.
#include "experiments/trace_replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/temp_dir.h"
#include "kvserve/pool.h"
#include "kvserve/runtime.h"
#include "kvserve/transport.h"

namespace kvserve::lab {
namespace {

std::string TraceText(std::mt19937_64& rng, int n, int blocks) {
  // Requests alternate between two conversations (their blocks grow by
  // one per turn) and one-off prompts.
  std::string text;
  double ms = 0;
  for (int i = 0; i < n; ++i) {
    ms += std::uniform_real_distribution<double>(0, 40)(rng);
    std::vector<int> ids;
    const int kind = i % 3;
    const int turn = i / 3 + 1;
    for (int b = 0; b < std::min(turn, blocks); ++b) ids.push_back(kind == 2 ? 1000 + i * 10 + b : kind * 100 + b);
    std::string list;
    for (size_t k = 0; k < ids.size(); ++k) list += (k ? "," : "") + std::to_string(ids[k]);
    const int input = static_cast<int>(ids.size()) * 16 - static_cast<int>(rng() % 5);
    text += "{\"timestamp\": " + std::to_string(static_cast<int>(ms)) + ", \"input_length\": " +
            std::to_string(input) + ", \"output_length\": " + std::to_string(3 + rng() % 20) +
            ", \"hash_ids\": [" + list + "]}\n";
    if (i == n / 2) text += "\n";  // blank lines are skipped
  }
  return text;
}

TEST(TraceReplayTest, ParseNamesTheBadLineAndReadsTheSharedTrace) {
  auto good = ParseTrace("{\"timestamp\": 1500, \"input_length\": 3, \"output_length\": 2, \"hash_ids\": [7]}\n");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_EQ(good->size(), 1u);
  EXPECT_DOUBLE_EQ((*good)[0].arrival_seconds, 1.5);
  EXPECT_EQ((*good)[0].block_ids, std::vector<int64_t>{7});
  for (const char* bad : {"not json", "{\"timestamp\": 1, \"input_length\": 3, \"output_length\": 2}",
                          "{\"timestamp\": -1, \"input_length\": 3, \"output_length\": 2, \"hash_ids\": []}",
                          "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 2, \"hash_ids\": []}",
                          "{\"timestamp\": 1, \"input_length\": 3, \"output_length\": 2, \"hash_ids\": [\"x\"]}"}) {
    auto r = ParseTrace(std::string("\n") + bad + "\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(ReadTrace("/nonexistent/trace.jsonl").status().code(), StatusCode::kNotFound);
  const std::string shared =
      std::string(KVSERVE_TEST_SOURCE_DIR) + "/../shared/data/traces/mooncake-conversation.jsonl";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << "no " << shared;
  auto trace = ReadTrace(shared);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), 12031u);  // its README's count
}

TEST(TraceReplayTest, WindowBecomesRequestsWithSharedPrefixes) {
  for (uint64_t seed : {5u, 23u, 101u}) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    auto trace = ParseTrace(TraceText(rng, 30, 6));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    ReplayOptions o;
    o.vocab = 97;
    o.block_tokens = 16;
    o.max_output_tokens = 8;
    o.window_start_seconds = (*trace)[4].arrival_seconds;
    o.window_seconds = 0;  // to the end
    o.time_scale = 0.5;
    o.seed = rng();
    auto requests = TraceRequests(*trace, o);
    ASSERT_TRUE(requests.ok()) << requests.status().ToString();
    std::vector<const TraceRecord*> window;
    for (const TraceRecord& t : *trace)
      if (t.arrival_seconds >= o.window_start_seconds) window.push_back(&t);
    ASSERT_EQ(requests->size(), window.size());
    for (size_t i = 0; i < requests->size(); ++i) {
      const TimedRequest& r = (*requests)[i];
      const TraceRecord& t = *window[i];
      EXPECT_EQ(r.request.id, i);
      EXPECT_EQ(static_cast<int>(r.request.prompt.size()), t.input_tokens);
      EXPECT_EQ(r.request.max_new_tokens, std::min(t.output_tokens, 8));
      EXPECT_NEAR(r.at_seconds, (t.arrival_seconds - window[0]->arrival_seconds) * 0.5, 1e-9);
      EXPECT_NEAR(r.ttft_slo_seconds, 1.0 + 0.1 * t.input_tokens / 1000.0, 1e-12);
      for (int32_t id : r.request.prompt) EXPECT_TRUE(id >= 0 && id < 97);
      // Against every earlier request: the tokens agree exactly as far as
      // their block ids do (whole blocks), and differ in the first block
      // whose ids differ.
      for (size_t j = 0; j < i; ++j) {
        const TraceRecord& u = *window[j];
        size_t same = 0;
        while (same < t.block_ids.size() && same < u.block_ids.size() && t.block_ids[same] == u.block_ids[same])
          ++same;
        const auto& a = r.request.prompt;
        const auto& b = (*requests)[j].request.prompt;
        const size_t common = std::min({same * 16, a.size(), b.size()});
        EXPECT_TRUE(std::equal(a.begin(), a.begin() + common, b.begin())) << i << " vs " << j;
        if (same < t.block_ids.size() && same < u.block_ids.size() && a.size() >= (same + 1) * 16 &&
            b.size() >= (same + 1) * 16) {
          EXPECT_FALSE(std::equal(a.begin() + same * 16, a.begin() + (same + 1) * 16, b.begin() + same * 16));
        }
      }
    }
    // The same options give the same requests; caps and bad options.
    auto again = TraceRequests(*trace, o);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((*again)[3].request.prompt, (*requests)[3].request.prompt);
    o.max_prompt_tokens = 20;
    o.max_requests = 4;
    auto capped = TraceRequests(*trace, o);
    ASSERT_TRUE(capped.ok());
    ASSERT_EQ(capped->size(), 4u);
    for (const TimedRequest& r : *capped) EXPECT_LE(r.request.prompt.size(), 20u);
    auto refused = [&](auto change) {
      ReplayOptions bad;
      bad.vocab = 9;
      change(bad);
      return TraceRequests(*trace, bad).status().code() == StatusCode::kInvalidArgument;
    };
    EXPECT_TRUE(refused([](ReplayOptions& b) { b.vocab = 0; }));
    EXPECT_TRUE(refused([](ReplayOptions& b) { b.time_scale = 0; }));
    EXPECT_TRUE(refused([](ReplayOptions& b) { b.block_tokens = 0; }));
    EXPECT_TRUE(refused([](ReplayOptions& b) { b.window_start_seconds = 1e6; }));  // no request there
    EXPECT_FALSE(refused([](ReplayOptions&) {}));
  }
}

// A tick's requests (one stamp) arrive evenly over the tick, in file order,
// counted over the whole trace even where the window cuts a tick's requests
// off; the window takes requests by their stamps.
TEST(TraceReplayTest, ATicksRequestsSpreadEvenlyOverTheTick) {
  std::mt19937_64 rng(4711);
  const std::vector<int> stamps_ms = {0, 0, 0, 0, 3000, 3000, 6000};
  std::string text;
  std::vector<int> lengths;
  for (size_t i = 0; i < stamps_ms.size(); ++i) {
    lengths.push_back(20 + static_cast<int>(rng() % 40));
    text += fmt::format("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 4, \"hash_ids\": [{}]}}\n",
                        stamps_ms[i], lengths.back(), 100 + i);
  }
  auto trace = ParseTrace(text);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ReplayOptions o;
  o.vocab = 50;
  o.block_tokens = 64;
  o.window_seconds = 0;
  o.spread_seconds = 3;
  o.time_scale = 2;
  auto all = TraceRequests(*trace, o);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const std::vector<double> spread = {0, 0.75, 1.5, 2.25, 3, 4.5, 6};
  ASSERT_EQ(all->size(), spread.size());
  for (size_t i = 0; i < spread.size(); ++i) {
    EXPECT_NEAR((*all)[i].at_seconds, spread[i] * 2, 1e-9) << i;
    EXPECT_EQ(static_cast<int>((*all)[i].request.prompt.size()), lengths[i]) << i;  // file order kept
  }
  o.window_start_seconds = 0.5;  // from the second tick: its two requests, then the third tick's
  auto later = TraceRequests(*trace, o);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 3u);
  EXPECT_NEAR((*later)[1].at_seconds, 1.5 * 2, 1e-9);
  EXPECT_NEAR((*later)[2].at_seconds, 3 * 2, 1e-9);
  o.window_start_seconds = 0;
  o.max_requests = 2;  // the tick cut: still a quarter of its 3 s apart
  auto cut = TraceRequests(*trace, o);
  ASSERT_TRUE(cut.ok());
  ASSERT_EQ(cut->size(), 2u);
  EXPECT_NEAR((*cut)[1].at_seconds, 0.75 * 2, 1e-9);
  o.spread_seconds = 0;  // at the stamps: a tick at once
  auto stamped = TraceRequests(*trace, o);
  ASSERT_TRUE(stamped.ok());
  EXPECT_EQ((*stamped)[1].at_seconds, 0);
  o.spread_seconds = -1;
  EXPECT_EQ(TraceRequests(*trace, o).status().code(), StatusCode::kInvalidArgument);
}

// The pool as the history before the window left it: for each window
// request the longest run of leading blocks an earlier prompt stored (whole
// blocks of its prefix only), one request per run not covered by a longer
// one, whose stored chunks are the window request's own; history outside
// pool_history_seconds does not count.
TEST(TraceReplayTest, PoolHistoryStoresTheRunsTheWindowSharesWithEarlierPrompts) {
  std::mt19937_64 rng(2027);
  const int block = 8 + static_cast<int>(rng() % 9);
  const int64_t base = static_cast<int64_t>(rng() % 1000);
  auto id = [&](int k) { return base + k; };
  struct Line {
    int ms;
    int input;
    std::vector<int64_t> ids;
  };
  const std::vector<Line> lines = {
      {0, 2 * block + 3, {id(50), id(51)}},                    // long before the window
      {8000, 3 * block + 5, {id(1), id(2), id(3)}},            // stores [1 2 3]
      {9000, 2 * block, {id(1), id(9)}},                       // its prefix holds [1] only
      {10000, 4 * block + 1, {id(1), id(2), id(3), id(4)}},    // window: runs [1 2 3]
      {10000, 2 * block + 3, {id(1), id(2)}},                  // [1 2]: covered by the one above
      {10000, 3 * block, {id(1), id(9), id(8)}},               // [1]: covered
      {11000, 2 * block + 2, {id(7), id(7)}},                  // nothing stored
      {11000, 3 * block + 2, {id(50), id(51), id(52)}},        // [50 51], in a long history only
  };
  std::string text;
  for (const Line& l : lines) {
    std::string list;
    for (size_t k = 0; k < l.ids.size(); ++k) list += (k ? "," : "") + std::to_string(l.ids[k]);
    text += fmt::format("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 9, \"hash_ids\": [{}]}}\n",
                        l.ms, l.input, list);
  }
  auto trace = ParseTrace(text);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ReplayOptions o;
  o.vocab = 40 + static_cast<int>(rng() % 50);
  o.block_tokens = block;
  o.seed = rng();
  o.window_start_seconds = 10;
  o.window_seconds = 0;
  o.pool_history_seconds = 5;
  o.method = "kivi-2";
  auto window = TraceRequests(*trace, o);
  ASSERT_TRUE(window.ok()) << window.status().ToString();
  ASSERT_EQ(window->size(), 5u);
  auto history = PoolHistoryRequests(*trace, o, *window);
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->size(), 1u);
  const TimedRequest& h = history->front();
  EXPECT_EQ(h.request.id, window->size());
  EXPECT_EQ(h.at_seconds, 0);
  EXPECT_EQ(h.request.max_new_tokens, 1);
  EXPECT_EQ(h.request.method, "kivi-2");
  EXPECT_TRUE(h.request.use_pool);
  EXPECT_TRUE(h.request.store_before_reply);
  const std::vector<int32_t>& w0 = (*window)[0].request.prompt;
  ASSERT_EQ(h.request.prompt.size(), static_cast<size_t>(3 * block + 1));
  EXPECT_TRUE(std::equal(h.request.prompt.begin(), h.request.prompt.end(), w0.begin()));
  // What it stores is what the window requests look up: their first chunks.
  auto chunks = [&](const std::vector<int32_t>& p) {
    return PrefixChunkHashes(std::span<const int32_t>(p).first(p.size() - 1), block);
  };
  const std::vector<uint64_t> stored = chunks(h.request.prompt);
  ASSERT_EQ(stored.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    auto wanted = chunks((*window)[i].request.prompt);
    const size_t shared = i == 0 ? 3 : i == 1 ? 2 : 1;
    for (size_t c = 0; c < shared; ++c) EXPECT_EQ(wanted[c], stored[c]) << "window request " << i << " chunk " << c;
  }
  // A history long enough for the first line adds [50 51], longest first.
  o.pool_history_seconds = 11;
  auto longer = PoolHistoryRequests(*trace, o, *window);
  ASSERT_TRUE(longer.ok());
  ASSERT_EQ(longer->size(), 2u);
  EXPECT_EQ((*longer)[1].request.prompt.size(), static_cast<size_t>(2 * block + 1));
  EXPECT_EQ((*longer)[1].request.id, window->size() + 1);
  o.pool_history_seconds = 0;
  EXPECT_TRUE(PoolHistoryRequests(*trace, o, *window)->empty());
  o.pool_history_seconds = 5;
  o.use_pool = false;
  EXPECT_TRUE(PoolHistoryRequests(*trace, o, *window)->empty());
  o.use_pool = true;
  o.pool_history_seconds = -1;
  EXPECT_EQ(PoolHistoryRequests(*trace, o, *window).status().code(), StatusCode::kInvalidArgument);
}

// The window's router counts are its own: a pool history's are taken off.
TEST(TraceReplayTest, TheWindowsRouterCountsLeaveThePoolHistorysOut) {
  std::mt19937_64 rng(77);
  RouterStats before, after;
  for (int w = 0; w < 3; ++w) {
    before.served.push_back(static_cast<int64_t>(rng() % 50));
    after.served.push_back(before.served.back() + static_cast<int64_t>(rng() % 50));
  }
  before.rerouted = static_cast<int64_t>(rng() % 5);
  after.rerouted = before.rerouted + static_cast<int64_t>(rng() % 5);
  before.affinity = static_cast<int64_t>(rng() % 9);
  after.affinity = before.affinity + static_cast<int64_t>(rng() % 9);
  ReplaySummary window;
  window.router = after;
  SubtractRouterCounts(before, &window);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(window.router.served[w], after.served[w] - before.served[w]);
  EXPECT_EQ(window.router.rerouted, after.rerouted - before.rerouted);
  EXPECT_EQ(window.router.affinity, after.affinity - before.affinity);
}

TEST(TraceReplayTest, ShortReplayThroughTwoPrefillWorkersAnswersEveryRequest) {
  const std::string dir = kvserve::testing::TempDir("trace_replay_model");
  RandomModelSpec spec;
  spec.family = "qwen2";
  spec.vocab = 97;
  spec.hidden = 32;
  spec.intermediate = 48;
  spec.layers = 2;
  spec.heads = 2;
  spec.kv_heads = 2;
  spec.seed = 3;
  ASSERT_TRUE(WriteRandomModel(dir, spec).ok());
  auto model = Model::Load(dir, {.threads = 1});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto transport = NewTcpTransport();
  ConnectionOptions c;
  c.secret = "replay-secret";
  c.io_timeout_seconds = 20;
  DecodeWorkerOptions d;
  d.connection = c;
  auto decode = DecodeWorker::Start(transport.get(), model->get(), d);
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  std::unique_ptr<KvPool> pool = NewMemoryPool();
  std::vector<ProfileCost> rows(1);
  rows[0].spec = "kivi-4";
  rows[0].compression_ratio = 4;
  rows[0].encode_bytes_per_second = rows[0].decode_bytes_per_second = 1e9;
  rows[0].quality = {{"chat", 1.0}};
  auto table = ProfileTable::FromRows(rows);
  ASSERT_TRUE(table.ok());
  std::vector<std::unique_ptr<PrefillWorker>> prefill;
  RouterOptions ro;
  for (int w = 0; w < 2; ++w) {
    PrefillWorkerOptions p;
    p.decode_addresses = {(*decode)->address()};
    p.client_connection = c;
    p.decode_connection = c;
    p.pool = pool.get();
    p.pool_chunk_tokens = 16;
    auto worker = PrefillWorker::Start(transport.get(), model->get(), *table, p);
    ASSERT_TRUE(worker.ok()) << worker.status().ToString();
    ro.prefill_addresses.push_back((*worker)->address());
    prefill.push_back(std::move(*worker));
  }
  ro.connection = c;
  ro.pool_chunk_tokens = 16;
  Router router(transport.get(), ro);

  std::mt19937_64 rng(17);
  auto trace = ParseTrace(TraceText(rng, 15, 4));
  ASSERT_TRUE(trace.ok());
  ReplayOptions o;
  o.vocab = 97;
  o.block_tokens = 16;
  o.max_output_tokens = 4;
  o.window_seconds = 0;
  o.seed = rng();
  o.method = "kivi-4";  // forced: a hit takes every stored chunk (adaptive may recompute a tiny model)
  auto requests = TraceRequests(*trace, o);
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  std::set<uint64_t> replied;
  const ReplaySummary sum = RunReplay(router, *requests, 4, [&](const ReplayRecord& r) {
    EXPECT_TRUE(replied.insert(r.id).second) << "request " << r.id << " answered twice";
  });
  ASSERT_EQ(sum.records.size(), requests->size());
  EXPECT_EQ(replied.size(), requests->size());  // none lost
  EXPECT_EQ(sum.answered(), static_cast<int>(requests->size()));
  EXPECT_EQ(sum.failed(), 0);
  int hits = 0;
  for (size_t i = 0; i < sum.records.size(); ++i) {
    const ReplayRecord& r = sum.records[i];
    EXPECT_EQ(r.id, i);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_GE(r.jct_seconds, r.ttft_seconds - 1e-9);
    EXPECT_GE(r.ttft_seconds, r.timings.ttft_seconds - 1e-3);  // the worker's, from its arrival
    EXPECT_GE(r.timings.ttft_seconds, r.timings.queue_seconds);
    EXPECT_EQ(r.prompt_tokens, static_cast<int>((*requests)[i].request.prompt.size()));
    hits += r.timings.prefix_hit;
  }
  // The conversations' later turns share their earlier turns' blocks.
  EXPECT_GT(hits, 0);
  EXPECT_NE(sum.SummaryJson().find("\"answered\":15"), std::string::npos) << sum.SummaryJson();
}

// On a shared decode link the summary sets each decided request's estimate
// against the link's rate over the transfers on it; requests without a
// link, or failed, stay out; each record carries its fair share.
TEST(TraceReplayTest, SummaryComparesTheEstimateWithTheSharedLinksFairShare) {
  std::mt19937 rng(31);
  ReplaySummary sum;
  double transfers = 0, ratio = 0;
  int counted = 0;
  for (int i = 0; i < 40; ++i) {
    ReplayRecord r;
    r.id = i;
    r.ok = rng() % 5 != 0;
    RequestTimings& t = r.timings;
    t.bandwidth_estimate = 1e8 * (1 + rng() % 50);
    if (rng() % 3 != 0) {
      t.link_bytes_per_second = 1e9 * (1 + rng() % 4);
      t.link_transfers = 1 + static_cast<int>(rng() % 8);
      nlohmann::json line = nlohmann::json::parse(ReplayRecordJson(r));
      EXPECT_DOUBLE_EQ(line["fair_share_gbps"].get<double>(),
                       BytesPerSecondToGbps(t.link_bytes_per_second / t.link_transfers));
      if (r.ok) {
        transfers += t.link_transfers;
        ratio += t.bandwidth_estimate / (t.link_bytes_per_second / t.link_transfers);
        ++counted;
      }
    }
    sum.records.push_back(r);
  }
  ASSERT_GT(counted, 0);
  const nlohmann::json j = nlohmann::json::parse(sum.SummaryJson());
  EXPECT_NEAR(j["link_transfers_mean"].get<double>(), transfers / counted, 1e-9);
  EXPECT_NEAR(j["estimate_vs_fair_share_mean"].get<double>(), ratio / counted, 1e-9);
  EXPECT_NE(sum.Text().find("shared decode link"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::lab
