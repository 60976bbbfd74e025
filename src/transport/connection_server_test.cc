// Admission control of the shared ConnectionServer (docs/transport.md §3):
// unauthenticated peers wait in their own budget on one thread, under a
// deadline and a per-source cap; authenticated ones take the connection
// slots. Every test checks that a client with the secret is still served.
#include "transport/connection_server.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "silent_flood.h"
#include "transport/poll_wait.h"
#include "transport/transport_test_util.h"
#include "transport/wire.h"

namespace kvserve::transport {
namespace {

ConnectionOptions Options() {
  ConnectionOptions o;
  o.secret = "admission-secret";
  o.local_id = "admission-test";
  o.io_timeout_seconds = 5;
  o.connect_timeout_seconds = 5;
  o.handshake_timeout_seconds = 5;
  return o;
}

// Echoes every message back until the peer leaves.
void Echo(Connection& c) {
  Message m;
  while (c.Receive(&m, 10).ok())
    if (!c.Send(m.type, m.flags, m.payload).ok()) return;
}

// Dials, authenticates, and checks one echoed message.
Status EchoOnce(Transport& transport, const std::string& address, std::mt19937& rng) {
  KVSERVE_ASSIGN_OR_RETURN(auto c, Connection::Dial(transport, address, Options()));
  std::vector<uint8_t> payload(1 + rng() % 2000);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  KVSERVE_RETURN_IF_ERROR(c->Send(0x42, 0, payload));
  Message m;
  KVSERVE_RETURN_IF_ERROR(c->Receive(&m, 10));
  if (m.type != 0x42 || m.payload != payload) return Status::Corruption("echo differs");
  return Status::Ok();
}

std::unique_ptr<ConnectionServer> StartEcho(Transport& transport, AdmissionOptions admission,
                                            const std::string& address = "127.0.0.1:0") {
  auto server = ConnectionServer::Start(&transport, address, Options(), admission, Echo);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(*server) : nullptr;
}

// True when the peer closes `fd` within `seconds` (what it sent before is
// read and discarded).
bool ClosedWithin(int fd, double seconds) {
  const double deadline = MonotonicSeconds() + seconds;
  for (;;) {
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) return true;
  }
}

int ConnectRaw(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Starts an echo server with these unauthenticated budgets and a flood of
// `silent` connections against it, then checks 40 clients with the secret,
// each dialling afresh, are served. Returns the server's counters.
AdmissionCounters ServeUnderFlood(int max_unauthenticated, int per_source, int silent,
                                  testing::SilentFloodOptions flood_options, uint32_t seed) {
  EXPECT_GE(testing::RaiseFileLimit(4096), 4096u);
  auto tcp = NewTcpTransport();
  auto server = StartEcho(*tcp, {.max_unauthenticated = max_unauthenticated,
                                 .max_unauthenticated_per_source = per_source});
  if (!server) return {};
  testing::SilentFlood flood(server->address(), silent, flood_options);
  std::mt19937 rng(seed);
  for (int i = 0; i < 40; ++i) {
    Status s = EchoOnce(*tcp, server->address(), rng);
    EXPECT_TRUE(s.ok()) << i << ": " << s.ToString();
    if (!s.ok()) break;
  }
  return server->counters();
}

// Per-source cap: five sources (127.0.0.2-6) keep 600 silent connections
// coming (reopened as they are dropped) against a cap of 16 each; a client
// from another source (127.0.0.1) is served every time, and the flood only
// ever evicts its own.
TEST(AdmissionTest, PerSourceCapKeepsAFloodedSourceToItself) {
  const AdmissionCounters c = ServeUnderFlood(128, 16, 600, {.sources = 5, .first_source = 2}, 1);
  EXPECT_GE(c.budget_drops, 600 - 5 * 16);
  EXPECT_EQ(c.authenticated, 40);
}

// Global budget: 600 silent connections held from four sources against a
// budget of 64 (and no per-source cap below it): the server keeps the 64
// newest, and a client arriving after them is served.
TEST(AdmissionTest, GlobalBudgetDropsTheLongestWaiting) {
  const AdmissionCounters c =
      ServeUnderFlood(64, 64, 600, {.sources = 4, .first_source = 2, .reopen = false}, 2);
  EXPECT_GE(c.budget_drops, 600 - 64);
  EXPECT_EQ(c.authenticated, 40);
}

TEST(AdmissionTest, SilentPeerIsDroppedAtItsDeadline) {
  auto tcp = NewTcpTransport();
  auto server = StartEcho(*tcp, {.unauthenticated_deadline_seconds = 0.3});
  ASSERT_TRUE(server);
  const int fd = ConnectRaw(server->address());
  EXPECT_TRUE(ClosedWithin(fd, 5.0));
  ::close(fd);
  EXPECT_EQ(server->counters().deadline_drops, 1);
  std::mt19937 rng(6);
  EXPECT_TRUE(EchoOnce(*tcp, server->address(), rng).ok());
}

// A peer that sends a valid HELLO and then stops answering holds no thread:
// other clients authenticate meanwhile, and the staller is dropped at its
// deadline.
TEST(AdmissionTest, PeerStallingAfterHelloDoesNotBlockOthers) {
  auto tcp = NewTcpTransport();
  auto server = StartEcho(*tcp, {.unauthenticated_deadline_seconds = 1.0});
  ASSERT_TRUE(server);
  std::vector<int> stallers;
  for (int i = 0; i < 32; ++i) {
    const int fd = ConnectRaw(server->address());
    std::vector<uint8_t> hello = {'K', 'V', 'S', 'A', 1};
    hello.insert(hello.end(), 32, static_cast<uint8_t>(i));
    hello.push_back(0);
    MessageHeader h{kMsgHello, 0, hello.size(), Checksum32(hello.data(), hello.size())};
    uint8_t header[kMessageHeaderBytes];
    EncodeMessageHeader(h, header);
    ASSERT_EQ(::send(fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
    ASSERT_EQ(::send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
    stallers.push_back(fd);
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(EchoOnce(*tcp, server->address(), rng).ok()) << i;
  for (int fd : stallers) {
    EXPECT_TRUE(ClosedWithin(fd, 5.0));
    ::close(fd);
  }
  EXPECT_EQ(server->counters().authenticated, 10);
  EXPECT_EQ(server->counters().deadline_drops, 32);
}

// Threads of this process (/proc/self/task).
int ThreadCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// UCX peers are admitted like TCP ones: 24 UCX streams (bootstrapped, so
// past the transport's own handshake) that never send a byte wait on the
// gate thread through their PollHandle(), not on a thread each; a client
// with the secret is served meanwhile; the silent ones are dropped at
// their deadline.
class UcxAdmissionTest : public ::testing::TestWithParam<transporttest::Kind> {};

TEST_P(UcxAdmissionTest, SilentUcxPeersHoldNoThreadAndAreDroppedAtTheDeadline) {
  auto transport = transporttest::MakeTransport(GetParam());
  ASSERT_TRUE(transport);
  auto server = StartEcho(*transport, {.unauthenticated_deadline_seconds = 2.0});
  ASSERT_TRUE(server);
  std::mt19937 rng(8);
  ASSERT_TRUE(EchoOnce(*transport, server->address(), rng).ok());  // warm: engine threads exist
  const int threads_before = ThreadCount();
  constexpr int kSilent = 24;
  std::vector<std::unique_ptr<Stream>> silent;
  for (int i = 0; i < kSilent; ++i) {
    auto s = transport->Connect(server->address(), 5);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    silent.push_back(std::move(*s));
  }
  for (int i = 0; i < 100 && server->counters().accepted < kSilent + 1; ++i) SleepSeconds(0.02);
  ASSERT_EQ(server->counters().accepted, kSilent + 1);
  EXPECT_LT(ThreadCount(), threads_before + kSilent / 2)
      << "silent UCX peers each hold a handshake thread";
  ASSERT_TRUE(EchoOnce(*transport, server->address(), rng).ok());
  for (int i = 0; i < 250 && server->counters().deadline_drops < kSilent; ++i) SleepSeconds(0.02);
  EXPECT_EQ(server->counters().deadline_drops, kSilent);
  EXPECT_EQ(server->counters().authenticated, 2);
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxAdmissionTest,
                         ::testing::Values(transporttest::Kind::kUcxTcp,
                                           transporttest::Kind::kUcxSm),
                         transporttest::KindName);

TEST(AdmissionTest, AuthenticatedPeerBeyondMaxConnectionsIsToldTheServerIsBusy) {
  auto tcp = NewTcpTransport();
  auto server = StartEcho(*tcp, {.max_connections = 2});
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Connection>> held;
  for (int i = 0; i < 2; ++i) {
    auto c = Connection::Dial(*tcp, server->address(), Options());
    ASSERT_TRUE(c.ok());
    held.push_back(std::move(*c));
  }
  auto extra = Connection::Dial(*tcp, server->address(), Options());
  ASSERT_TRUE(extra.ok());  // the handshake completes; then the server says why it hangs up
  Message m;
  Status s = (*extra)->Receive(&m, 10);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  held.clear();  // slots free again once those peers leave
  std::mt19937 rng(4);
  Status served = Status::Unavailable("not tried");
  for (int i = 0; i < 100 && !served.ok(); ++i) {
    served = EchoOnce(*tcp, server->address(), rng);
    if (!served.ok()) SleepSeconds(0.02);  // the handler threads notice the close
  }
  EXPECT_TRUE(served.ok()) << served.ToString();
  EXPECT_GE(server->counters().busy_refusals, 1);
}

// Streams without a PollHandle (loopback) run their handshake on a thread of
// their own; the budgets still apply.
TEST(AdmissionTest, LoopbackPeersAreAdmittedThroughHandshakeThreads) {
  auto loop = NewLoopbackTransport();
  AdmissionOptions a;
  a.max_unauthenticated = 4;
  a.unauthenticated_deadline_seconds = 5;
  auto server = StartEcho(*loop, a, "admission");
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Stream>> silent;
  for (int i = 0; i < 10; ++i) {
    auto s = loop->Connect("admission", 1);
    ASSERT_TRUE(s.ok());
    silent.push_back(std::move(*s));
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 5; ++i) {
    Status s = EchoOnce(*loop, "admission", rng);
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  EXPECT_GE(server->counters().budget_drops, 6);
}

TEST(AdmissionTest, SourceOfStripsThePort) {
  EXPECT_EQ(SourceOf("127.0.0.1:5000"), "127.0.0.1");
  EXPECT_EQ(SourceOf("[::1]:7400"), "[::1]");
  EXPECT_EQ(SourceOf("loopback:name"), "loopback:name");
  EXPECT_EQ(SourceOf("admission"), "admission");
}

}  // namespace
}  // namespace kvserve::transport
