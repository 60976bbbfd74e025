// N x M serving in one process over TCP and UCX: a router over N prefill
// workers, each over the same M decode workers. Concurrent clients' requests
// spread over every prefill and every decode worker and each generates
// exactly what one process generates; repeated prompts follow their prefix
// to the worker whose pool holds it; a prefill worker lost mid-load has its
// requests re-routed, none lost; a prefill worker sends to the decode worker
// its link serves fastest.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "kvserve/pool.h"
#include "kvserve/router.h"
#include "kvserve/serve.h"
#include "serve/serve_test_util.h"

namespace kvserve {
namespace {

using servetest::Reference;
using servetest::SmallModel;
using transporttest::Kind;

// Streams to `slow_address` go through `slow`, the others through `base`.
class RouteByAddress final : public Transport {
 public:
  RouteByAddress(Transport* base, Transport* slow, std::string slow_address)
      : base_(base), slow_(slow), slow_address_(std::move(slow_address)) {}
  Result<std::unique_ptr<Stream>> Connect(const std::string& address, double timeout) override {
    return (address == slow_address_ ? slow_ : base_)->Connect(address, timeout);
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    return base_->Listen(address);
  }

 private:
  Transport* base_;
  Transport* slow_;
  std::string slow_address_;
};

struct Grid {
  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<DecodeWorker>> decode;
  std::vector<std::unique_ptr<KvPool>> pools;
  std::vector<std::unique_ptr<PrefillWorker>> prefill;
  std::unique_ptr<Router> router;
};

// N prefill workers (each with its own memory pool when `pools`), each over
// the M decode workers, and a router over the prefill workers.
std::unique_ptr<Grid> StartGrid(Kind kind, int n, int m, bool pools,
                                Transport* prefill_transport = nullptr) {
  auto g = std::make_unique<Grid>();
  g->transport = transporttest::MakeTransport(kind);
  std::vector<std::string> decode_addresses;
  for (int j = 0; j < m; ++j) {
    DecodeWorkerOptions d;
    d.connection = servetest::Options("pd-secret", "decode-" + std::to_string(j));
    auto w = DecodeWorker::Start(g->transport.get(), &SmallModel(), d);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return nullptr;
    decode_addresses.push_back((*w)->address());
    g->decode.push_back(std::move(*w));
  }
  RouterOptions ro;
  for (int i = 0; i < n; ++i) {
    PrefillWorkerOptions p;
    p.decode_addresses = decode_addresses;
    p.client_connection = servetest::Options("client-secret", "prefill-" + std::to_string(i));
    p.decode_connection = servetest::Options("pd-secret", "prefill-" + std::to_string(i));
    p.controller.model = {LatencyModelKind::kStreamed, 0};
    p.pool_chunk_tokens = 16;
    if (pools) {
      g->pools.push_back(NewMemoryPool());
      p.pool = g->pools.back().get();
      p.pool_store_profiles = {"none"};
    }
    auto w = PrefillWorker::Start(prefill_transport ? prefill_transport : g->transport.get(),
                                  &SmallModel(), servetest::TestTable(), p);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return nullptr;
    ro.prefill_addresses.push_back((*w)->address());
    g->prefill.push_back(std::move(*w));
  }
  ro.connection = servetest::Options("client-secret", "router");
  ro.pool_chunk_tokens = 16;
  ro.down_seconds = 30;
  g->router = std::make_unique<Router>(g->transport.get(), ro);
  return g;
}

ServeRequest Lossless(std::mt19937_64& rng, uint64_t id) {
  ServeRequest r;
  r.id = id;
  r.prompt = servetest::RandomPrompt(rng, 20, 120);
  r.max_new_tokens = 4;
  r.method = "none";
  r.sampling.seed = rng();
  return r;
}

class ServeRouterTest : public servetest::OverTransports {};

TEST_P(ServeRouterTest, ConcurrentClientsSpreadOverEveryWorkerAndGetTheRightTokens) {
  auto grid = StartGrid(GetParam(), 2, 2, /*pools=*/false);
  ASSERT_TRUE(grid);
  constexpr int kClients = 4, kPerClient = 6;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(500 + c);
      for (int i = 0; i < kPerClient; ++i) {
        ServeRequest r = Lossless(rng, c * 100 + i);
        auto routed = grid->router->Submit(r);
        if (!routed.ok() || !routed->response.status.ok()) {
          ++failed;
          continue;
        }
        if (routed->response.tokens != Reference(SmallModel(), r)) ++wrong;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const RouterStats stats = grid->router->stats();
  ASSERT_EQ(stats.served.size(), 2u);
  EXPECT_GT(stats.served[0], 0);
  EXPECT_GT(stats.served[1], 0);
  EXPECT_EQ(stats.served[0] + stats.served[1], kClients * kPerClient);
  EXPECT_GT(grid->decode[0]->completed(), 0);
  EXPECT_GT(grid->decode[1]->completed(), 0);
}

TEST_P(ServeRouterTest, RepeatedPromptsFollowTheirPrefixToTheWorkerThatHoldsIt) {
  auto grid = StartGrid(GetParam(), 2, 1, /*pools=*/true);
  ASSERT_TRUE(grid);
  std::mt19937_64 rng(601);
  std::vector<ServeRequest> firsts;
  for (int i = 0; i < 6; ++i) {
    firsts.push_back(Lossless(rng, i));
    firsts.back().prompt = servetest::RandomPrompt(rng, 60, 100);
    firsts.back().use_pool = true;
  }
  std::vector<int> worker_of(firsts.size());
  for (size_t i = 0; i < firsts.size(); ++i) {
    auto routed = grid->router->Submit(firsts[i]);
    ASSERT_TRUE(routed.ok() && routed->response.status.ok());
    worker_of[i] = routed->worker;
  }
  EXPECT_NE(std::count(worker_of.begin(), worker_of.end(), 0), 0);  // both used
  EXPECT_NE(std::count(worker_of.begin(), worker_of.end(), 1), 0);
  for (size_t i = 0; i < firsts.size(); ++i) {
    ServeRequest again = firsts[i];
    again.id += 100;
    auto routed = grid->router->Submit(again);
    ASSERT_TRUE(routed.ok() && routed->response.status.ok()) << routed->response.status.ToString();
    EXPECT_EQ(routed->worker, worker_of[i]);
    EXPECT_TRUE(routed->response.timings.prefix_hit) << "request " << again.id;
    EXPECT_EQ(routed->response.tokens, Reference(SmallModel(), again));
  }
  EXPECT_GE(grid->router->stats().affinity, static_cast<int64_t>(firsts.size()));
}

TEST_P(ServeRouterTest, LostPrefillWorkerHasItsRequestsRerouted) {
  auto grid = StartGrid(GetParam(), 2, 2, /*pools=*/false);
  ASSERT_TRUE(grid);
  std::atomic<int> done{0}, failed{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c)
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(700 + c);
      for (int i = 0; i < 8; ++i) {
        ServeRequest r = Lossless(rng, c * 100 + i);
        auto routed = grid->router->Submit(r);
        if (!routed.ok() || !routed->response.status.ok()) {
          ++failed;
        } else if (routed->response.tokens != Reference(SmallModel(), r)) {
          ++wrong;
        }
        ++done;
      }
    });
  while (done.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  grid->prefill[0]->Stop();  // its connections close; queued requests must move
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const RouterStats stats = grid->router->stats();
  EXPECT_EQ(stats.served[0] + stats.served[1], 24);
  RecordProperty("rerouted", stats.rerouted);
}

TEST_P(ServeRouterTest, PrefillWorkerSendsToTheDecodeWorkerItsLinkServesFastest) {
  // Decode worker 1 sits behind a slow link (every write of the prefill
  // worker's streams to it is delayed); worker 0 does not.
  auto base = transporttest::MakeTransport(GetParam());
  FaultInjectingTransport slow(base.get());
  // 20 ms a write: slower than the other link even when a loaded machine
  // slows both (at 4 ms the choice flipped at load 5).
  slow.SetConnectPlan({.write_delay_seconds = 0.02});
  std::vector<std::unique_ptr<DecodeWorker>> decode;
  for (int j = 0; j < 2; ++j) {
    DecodeWorkerOptions d;
    d.connection = servetest::Options("pd-secret", "decode");  // the same id: keyed by address
    auto w = DecodeWorker::Start(base.get(), &SmallModel(), d);
    ASSERT_TRUE(w.ok());
    decode.push_back(std::move(*w));
  }
  RouteByAddress links(base.get(), &slow, decode[1]->address());
  PrefillWorkerOptions p;
  p.decode_addresses = {decode[1]->address(), decode[0]->address()};  // the slow one first
  p.client_connection = servetest::Options("client-secret", "prefill");
  p.decode_connection = servetest::Options("pd-secret", "prefill");
  p.controller.model = {LatencyModelKind::kStreamed, 0};
  auto prefill = PrefillWorker::Start(&links, &SmallModel(), servetest::TestTable(), p);
  ASSERT_TRUE(prefill.ok());
  std::mt19937_64 rng(801);
  for (int i = 0; i < 12; ++i) {
    ServeRequest r = Lossless(rng, i);
    r.prompt = servetest::RandomPrompt(rng, 150, 200);
    ServeResponse response = (*prefill)->Serve(r);
    ASSERT_TRUE(response.status.ok()) << response.status.ToString();
    EXPECT_EQ(response.tokens, Reference(SmallModel(), r));
  }
  // Each was tried; then the fast link carried the rest.
  EXPECT_GE(decode[1]->completed(), 1);
  EXPECT_GE(decode[0]->completed(), 9);
}

KVSERVE_SERVE_OVER_TRANSPORTS(ServeRouterTest);

}  // namespace
}  // namespace kvserve
