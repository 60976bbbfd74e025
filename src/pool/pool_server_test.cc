// The pool served over TCP and UCX on loopback: a client with the secret gets the
// same answers as the embedded pool; one without is refused; a dropped
// connection fails the request clearly and the next request reconnects; a
// restarted server is redialled; large Gets report goodput.
#include <gtest/gtest.h>

#include <random>

#include "kvserve/pool.h"
#include "kvserve/transport.h"
#include "silent_flood.h"
#include "transport/transport_test_util.h"

namespace kvserve {
namespace {

class PoolServerTest : public ::testing::TestWithParam<transporttest::Kind> {};

ConnectionOptions Conn(std::string secret) {
  ConnectionOptions o;
  o.secret = std::move(secret);
  o.io_timeout_seconds = 5;
  o.connect_timeout_seconds = 2;
  return o;
}

std::vector<uint8_t> RandomBytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_P(PoolServerTest, RemotePoolBehavesLikeTheEmbeddedOne) {
  auto tcp = transporttest::MakeTransport(GetParam());
  auto backing = NewMemoryPool({.budget_bytes = 64 << 20});
  auto server = PoolServer::Start(tcp.get(), backing.get(),
                                  {.listen_address = "127.0.0.1:0", .connection = Conn("pool-key")});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::pair<double, double>> goodput;
  std::mutex mu;
  RemotePoolOptions ro;
  ro.address = (*server)->address();
  ro.connection = Conn("pool-key");
  ro.connection.goodput = [&](std::string_view, double bytes, double seconds) {
    std::lock_guard<std::mutex> lock(mu);
    goodput.emplace_back(bytes, seconds);
  };
  auto remote = NewRemotePool(tcp.get(), ro);
  std::mt19937 rng(4);
  std::map<std::pair<uint64_t, std::string>, std::vector<uint8_t>> stored;
  for (int i = 0; i < 40; ++i) {
    uint64_t hash = rng() % 5;
    std::string profile = (rng() % 2) ? "kivi-2" : "none";
    auto value = RandomBytes(rng, (i == 39) ? (1 << 20) : rng() % 5000);
    ASSERT_TRUE(remote->Put({"model:1", hash, profile}, value).ok());
    stored[{hash, profile}] = value;
  }
  for (auto& [k, v] : stored) {
    std::vector<uint8_t> got;
    ASSERT_TRUE(remote->Get({"model:1", k.first, k.second}, &got).ok());
    EXPECT_EQ(got, v);
  }
  std::vector<uint8_t> got;
  EXPECT_EQ(remote->Get({"model:1", 99, "none"}, &got).code(), StatusCode::kNotFound);
  auto entries = remote->Lookup("model:1", stored.begin()->first.first);
  ASSERT_TRUE(entries.ok());
  auto expected = backing->Lookup("model:1", stored.begin()->first.first);
  ASSERT_EQ(entries->size(), expected->size());
  for (size_t i = 0; i < entries->size(); ++i) {
    EXPECT_EQ((*entries)[i].profile, (*expected)[i].profile);
    EXPECT_EQ((*entries)[i].bytes, (*expected)[i].bytes);
  }
  ASSERT_TRUE(remote->Delete({"model:1", stored.begin()->first.first, stored.begin()->first.second}).ok());
  EXPECT_EQ(remote->Stats()->entries, stored.size() - 1);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GE(goodput.size(), 1u);  // the 1 MiB value
}

TEST_P(PoolServerTest, ClientWithoutTheSecretIsRefused) {
  auto tcp = transporttest::MakeTransport(GetParam());
  auto backing = NewMemoryPool();
  auto server = PoolServer::Start(tcp.get(), backing.get(),
                                  {.listen_address = "127.0.0.1:0", .connection = Conn("right")});
  ASSERT_TRUE(server.ok());
  RemotePoolOptions ro;
  ro.address = (*server)->address();
  ro.connection = Conn("wrong");
  auto remote = NewRemotePool(tcp.get(), ro);
  Status s = remote->Put({"m", 1, "none"}, std::vector<uint8_t>{1, 2});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_EQ(backing->Stats()->entries, 0u);
}

TEST_P(PoolServerTest, DroppedConnectionsFailClearlyAndRecover) {
  auto tcp = transporttest::MakeTransport(GetParam());
  FaultInjectingTransport faulty(tcp.get());
  auto backing = NewMemoryPool();
  auto server = PoolServer::Start(tcp.get(), backing.get(),
                                  {.listen_address = "127.0.0.1:0", .connection = Conn("k")});
  ASSERT_TRUE(server.ok());
  RemotePoolOptions ro;
  ro.address = (*server)->address();
  ro.connection = Conn("k");
  ro.reconnect_attempts = 1;
  auto remote = NewRemotePool(&faulty, ro);
  std::mt19937 rng(8);
  FaultPlan drop;
  drop.drop_after_bytes = 3000;  // every connection dies within ~3 KB
  faulty.SetConnectPlan(drop);
  ASSERT_TRUE(remote->Put({"m", 1, "none"}, RandomBytes(rng, 500)).ok());
  Status s = remote->Put({"m", 2, "none"}, RandomBytes(rng, 8000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("pool at"), std::string::npos);
  faulty.SetConnectPlan({});
  auto value = RandomBytes(rng, 8000);
  ASSERT_TRUE(remote->Put({"m", 2, "none"}, value).ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE(remote->Get({"m", 2, "none"}, &got).ok());
  EXPECT_EQ(got, value);

  // Server restarted on the same address: the client redials.
  std::string address = (*server)->address();
  (*server)->Stop();
  server->reset();
  EXPECT_EQ(remote->Get({"m", 2, "none"}, &got).code(), StatusCode::kUnavailable);
  auto again = PoolServer::Start(tcp.get(), backing.get(),
                                 {.listen_address = address, .connection = Conn("k")});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(remote->Get({"m", 2, "none"}, &got).ok());
  EXPECT_EQ(got, value);
}

INSTANTIATE_TEST_SUITE_P(Transports, PoolServerTest,
                         ::testing::ValuesIn(transporttest::NetworkKinds()),
                         transporttest::KindName);

// Admission (docs/transport.md §3): 2,000 connections that never send a
// byte, held open and reopened as the server drops them, do not keep an
// authenticated client out. A client that dials afresh for every request
// (a restarting prefill worker) with no reconnect attempts gets every
// request served, for longer than the unauthenticated deadline.
TEST(PoolServerFloodTest, SilentConnectionFloodDoesNotKeepClientsOut) {
  ASSERT_GE(testing::RaiseFileLimit(8192), 8192u) << "RLIMIT_NOFILE";
  auto tcp = NewTcpTransport();
  auto backing = NewMemoryPool();
  PoolServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.connection = Conn("flood-key");
  auto server = PoolServer::Start(tcp.get(), backing.get(), so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  testing::SilentFlood flood((*server)->address(), 2000);
  std::mt19937 rng(41);
  int served = 0;
  const double start = MonotonicSeconds();
  // Past the 2 s unauthenticated deadline, so the flood is dropped and
  // reopened while clients keep coming.
  while (served < 30 || MonotonicSeconds() - start < 3.0) {
    RemotePoolOptions ro;
    ro.address = (*server)->address();
    ro.connection = Conn("flood-key");
    ro.reconnect_attempts = 0;
    auto remote = NewRemotePool(tcp.get(), ro);
    const PoolKey key{"m", rng(), "none"};
    auto value = RandomBytes(rng, 1 + rng() % 4096);
    Status put = remote->Put(key, value);
    ASSERT_TRUE(put.ok()) << "request " << served << ": " << put.ToString();
    std::vector<uint8_t> got;
    ASSERT_TRUE(remote->Get(key, &got).ok()) << "request " << served;
    EXPECT_EQ(got, value);
    ++served;
  }
  EXPECT_EQ(flood.failed_opens(), 0);
  EXPECT_GT(flood.dropped(), 0) << "the server never dropped a silent peer";
}

}  // namespace
}  // namespace kvserve
