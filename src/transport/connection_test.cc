// Properties of Connections over every Transport: messages round-trip,
// only peers holding the secret get in, declared lengths beyond the limit
// and malformed bytes are refused with bounded memory, injected faults turn
// into clear errors, and a slow reader bounds what a writer buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/transport.h"
#include "transport/transport_test_util.h"
#include "transport/wire.h"

namespace kvserve {
namespace {

using transporttest::Kind;
using transporttest::ListenAddress;
using transporttest::MakeTransport;

ConnectionOptions Options(std::string secret, std::string id) {
  ConnectionOptions o;
  o.secret = std::move(secret);
  o.local_id = std::move(id);
  o.io_timeout_seconds = 5;
  o.handshake_timeout_seconds = 5;
  o.max_message_bytes = 8 << 20;
  return o;
}

struct Pair {
  Result<std::unique_ptr<Connection>> client = Status::Internal("unset");
  Result<std::unique_ptr<Connection>> server = Status::Internal("unset");
};

// Connects a client and a server through `transport` (server accepted on a
// helper thread).
Pair Connect(Transport& transport, Kind kind, const ConnectionOptions& client_options,
             const ConnectionOptions& server_options) {
  Pair p;
  auto listener = transport.Listen(ListenAddress(kind));
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  if (!listener.ok()) return p;
  std::thread server([&] { p.server = Connection::Accept(**listener, server_options, 5); });
  p.client = Connection::Dial(transport, (*listener)->Address(), client_options);
  server.join();
  return p;
}

class ConnectionTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ConnectionTest, MessagesRoundTripBothWays) {
  auto transport = MakeTransport(GetParam());
  Pair p = Connect(*transport, GetParam(), Options("s3cret", "alice"), Options("s3cret", "bob"));
  ASSERT_TRUE(p.client.ok()) << p.client.status().ToString();
  ASSERT_TRUE(p.server.ok()) << p.server.status().ToString();
  EXPECT_EQ((*p.client)->peer_id(), "bob");
  EXPECT_EQ((*p.server)->peer_id(), "alice");
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 24; ++i) {
    size_t n = (i % 4 == 0) ? 0 : std::uniform_int_distribution<size_t>(1, 300000)(rng);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    sent.push_back(std::move(v));
  }
  // Sender thread so large messages do not deadlock on bounded buffers.
  std::thread sender([&] {
    for (size_t i = 0; i < sent.size(); ++i)
      ASSERT_TRUE((*p.client)->Send(static_cast<uint8_t>(i), 3, sent[i]).ok());
  });
  Message m;
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_TRUE((*p.server)->Receive(&m).ok());
    EXPECT_EQ(m.type, i);
    EXPECT_EQ(m.flags, 3);
    EXPECT_EQ(m.payload, sent[i]);
  }
  sender.join();
  ASSERT_TRUE((*p.server)->Send(9, 0, sent[1]).ok());
  ASSERT_TRUE((*p.client)->Receive(&m).ok());
  EXPECT_EQ(m.payload, sent[1]);
  // Stats count the two handshake messages each way too.
  EXPECT_EQ((*p.client)->stats().messages_sent, sent.size() + 2);
  EXPECT_EQ((*p.server)->stats().messages_received, sent.size() + 2);
}

// Two connections whose clients write through one shared link of 4e9 bytes/s.
struct LinkedPairs {
  std::shared_ptr<SharedLink> link = *SharedLink::Create(4e9);
  Pair one, two;
  LinkedPairs(Transport& transport, Kind kind) {
    ConnectionOptions shaped = Options("s", "a");
    shaped.shared_link = link;
    one = Connect(transport, kind, shaped, Options("s", "b"));
    two = Connect(transport, kind, shaped, Options("s", "c"));
  }
};

// Two connections on one SharedLink: every byte either sends goes through
// the link's one bucket (and arrives intact).
TEST_P(ConnectionTest, ConnectionsOnASharedLinkPaceThroughItsOneBucket) {
  auto transport = MakeTransport(GetParam());
  LinkedPairs pairs(*transport, GetParam());
  const std::shared_ptr<SharedLink>& link = pairs.link;
  Pair& one = pairs.one;
  Pair& two = pairs.two;
  ASSERT_TRUE(one.client.ok() && one.server.ok() && two.client.ok() && two.server.ok());
  std::mt19937 rng(8);
  const double before = link->bytes();
  uint64_t payload = 0;
  std::vector<uint8_t> v(100000 + rng() % 100000);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  for (Pair* p : {&one, &two}) {
    std::thread sender([&] { ASSERT_TRUE((*p->client)->Send(5, 0, v).ok()); });
    Message m;
    ASSERT_TRUE((*p->server)->Receive(&m).ok());
    sender.join();
    EXPECT_EQ(m.payload, v);
    payload += v.size();
  }
  EXPECT_GE(link->bytes() - before, static_cast<double>(payload));
}

// A shared link counts the frame transfers on it: each from its Begin to
// its ack, its abort, or the end of its sender; connections without the
// link do not count.
TEST_P(ConnectionTest, ASharedLinkCountsTheTransfersOnIt) {
  auto transport = MakeTransport(GetParam());
  LinkedPairs pairs(*transport, GetParam());
  const std::shared_ptr<SharedLink>& link = pairs.link;
  Pair& one = pairs.one;
  Pair& two = pairs.two;
  Pair apart = Connect(*transport, GetParam(), Options("s", "d"), Options("s", "e"));
  ASSERT_TRUE(one.client.ok() && two.client.ok() && apart.client.ok());
  std::mt19937 rng(9);
  std::vector<uint8_t> header(64 + rng() % 64), record(1000 + rng() % 1000);
  for (auto& b : record) b = static_cast<uint8_t>(rng());
  FrameHandler drop;
  drop.on_header = [](uint64_t, std::span<const uint8_t>) { return Status::Ok(); };
  drop.on_record = [](std::span<const uint8_t>) { return Status::Ok(); };

  auto first = std::make_unique<FrameSender>(one.client->get());
  FrameSender second(two.client->get()), other(apart.client->get());
  ASSERT_TRUE(first->Begin(1, header).ok());
  ASSERT_TRUE(second.Begin(2, header).ok());
  ASSERT_TRUE(other.Begin(3, header).ok());
  EXPECT_EQ(link->transfers(), 2);
  // Acknowledged: off the link.
  std::thread rx([&] { EXPECT_TRUE(ReceiveFrame(**two.server, drop, 10).ok()); });
  ASSERT_TRUE(second.SendRecord(record).ok());
  ASSERT_TRUE(second.Finish().ok());
  rx.join();
  EXPECT_EQ(link->transfers(), 1);
  // Ended and not yet acknowledged: still on it; then a new transfer counts again.
  std::thread rx2([&] {
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(ReceiveFrame(**two.server, drop, 10).ok());
  });
  ASSERT_TRUE(second.Begin(4, header).ok());
  ASSERT_TRUE(second.End().ok());
  EXPECT_EQ(link->transfers(), 2);
  ASSERT_TRUE(second.AwaitAck().ok());
  ASSERT_TRUE(second.Begin(5, header).ok());
  EXPECT_EQ(link->transfers(), 2);
  ASSERT_TRUE(second.Finish().ok());
  rx2.join();
  // Aborted, or its sender gone: off the link.
  ASSERT_TRUE(first->Abort(Status::Internal("enough")).ok());
  EXPECT_EQ(link->transfers(), 0);
  ASSERT_TRUE(first->Begin(6, header).ok());
  EXPECT_EQ(link->transfers(), 1);
  first.reset();
  EXPECT_EQ(link->transfers(), 0);
}

// ReceiveInto: payloads the placer accepts land in its memory (and nowhere
// else), the rest in Message::payload; a placer answering with the wrong
// length breaks the connection with InvalidArgument.
TEST_P(ConnectionTest, ReceiveIntoReadsPayloadsIntoCallerMemory) {
  auto transport = MakeTransport(GetParam());
  Pair p = Connect(*transport, GetParam(), Options("s3cret", "alice"), Options("s3cret", "bob"));
  ASSERT_TRUE(p.client.ok() && p.server.ok());
  std::mt19937 rng(21);
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 16; ++i) {
    std::vector<uint8_t> v(std::uniform_int_distribution<size_t>(1, 200000)(rng));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    sent.push_back(std::move(v));
  }
  std::thread sender([&] {
    for (size_t i = 0; i < sent.size(); ++i)
      ASSERT_TRUE((*p.client)->Send(static_cast<uint8_t>(i % 2), 0, sent[i]).ok());
  });
  std::vector<uint8_t> arena(4 << 20, 0xAB);
  size_t used = 0;
  // Type 1 goes into the arena, type 0 to the connection's buffer.
  PayloadPlacer place = [&](uint8_t type, uint64_t length) -> std::span<uint8_t> {
    if (type != 1) return {};
    std::span<uint8_t> out(arena.data() + used, length);
    used += length;
    return out;
  };
  Message m;
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_TRUE((*p.server)->ReceiveInto(&m, place).ok());
    EXPECT_EQ(m.type, i % 2);
    std::vector<uint8_t> got(m.bytes().begin(), m.bytes().end());
    EXPECT_EQ(got, sent[i]) << i;
    if (i % 2 == 1) {
      EXPECT_TRUE(m.payload.empty());
      EXPECT_EQ(m.placed.data() + m.placed.size(), arena.data() + used);
    } else {
      EXPECT_EQ(m.placed.data(), nullptr);
    }
  }
  sender.join();
  // The arena holds the placed payloads back to back.
  size_t at = 0;
  for (size_t i = 1; i < sent.size(); i += 2) {
    EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), arena.begin() + static_cast<long>(at)));
    at += sent[i].size();
  }
  EXPECT_EQ(at, used);

  ASSERT_TRUE((*p.client)->Send(1, 0, sent[0]).ok());
  PayloadPlacer wrong = [&](uint8_t, uint64_t length) {
    return std::span<uint8_t>(arena.data(), length + 1);
  };
  Status s = (*p.server)->ReceiveInto(&m, wrong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_FALSE((*p.server)->Receive(&m, 0.1).ok());  // broken
}

// Recycle, on seeded random payload sizes: a fresh Message receives a
// payload above 64 KiB into the buffer given back when that buffer is large
// enough (no new allocation), a small payload never takes it, the bytes are
// right, and the connection keeps the larger of what it holds and what it is
// given (a small buffer given back does not replace a large one).
TEST_P(ConnectionTest, RecycledBufferIsReusedByAFreshMessage) {
  auto transport = MakeTransport(GetParam());
  Pair p = Connect(*transport, GetParam(), Options("s3cret", "alice"), Options("s3cret", "bob"));
  ASSERT_TRUE(p.client.ok() && p.server.ok());
  std::mt19937 rng(33);
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 16; ++i) {
    const bool large = rng() % 3 != 0;
    std::vector<uint8_t> v(large ? std::uniform_int_distribution<size_t>(65537, 1 << 20)(rng)
                                 : std::uniform_int_distribution<size_t>(1, 65536)(rng));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    sent.push_back(std::move(v));
  }
  std::thread sender([&] {
    for (const auto& v : sent) ASSERT_TRUE((*p.client)->Send(1, 0, v).ok());
  });
  // The connection's recycled buffer as this test expects it.
  const uint8_t* spare = nullptr;
  size_t spare_capacity = 0;
  int reused = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    Message fresh;
    ASSERT_TRUE((*p.server)->Receive(&fresh).ok());
    EXPECT_EQ(fresh.payload, sent[i]) << i;
    const size_t n = sent[i].size();
    if (n > 65536 && spare_capacity > 0) {  // takes the spare
      if (spare_capacity >= n) {
        EXPECT_EQ(fresh.payload.data(), spare) << i;
        ++reused;
      }
      spare = nullptr;
      spare_capacity = 0;
    } else if (spare != nullptr) {
      EXPECT_NE(fresh.payload.data(), spare) << i;
    }
    if (fresh.payload.capacity() > spare_capacity) {
      spare = fresh.payload.data();
      spare_capacity = fresh.payload.capacity();
    }
    (*p.server)->Recycle(std::move(fresh));
    Message small;
    small.payload.reserve(16);
    (*p.server)->Recycle(std::move(small));
  }
  sender.join();
  EXPECT_GT(reused, 0);  // the seeded sizes reuse the buffer at least once
}

TEST_P(ConnectionTest, PeerWithoutTheSecretIsRefused) {
  auto transport = MakeTransport(GetParam());
  for (const std::string& wrong : {std::string(""), std::string("s3cres"), std::string("x")}) {
    Pair p = Connect(*transport, GetParam(), Options(wrong, "mallory"), Options("s3cret", "bob"));
    ASSERT_FALSE(p.client.ok());
    ASSERT_FALSE(p.server.ok());
    EXPECT_EQ(p.client.status().code(), StatusCode::kPermissionDenied) << p.client.status().ToString();
    EXPECT_EQ(p.server.status().code(), StatusCode::kPermissionDenied) << p.server.status().ToString();
  }
  // A server without the secret cannot impersonate one either.
  Pair p = Connect(*transport, GetParam(), Options("s3cret", "alice"), Options("guess", "eve"));
  ASSERT_FALSE(p.client.ok());
  EXPECT_EQ(p.client.status().code(), StatusCode::kPermissionDenied);
}

TEST_P(ConnectionTest, ReservedTypesAndOversizedSendsAreRejected) {
  auto transport = MakeTransport(GetParam());
  auto options = Options("k", "a");
  options.max_message_bytes = 1000;
  Pair p = Connect(*transport, GetParam(), options, options);
  ASSERT_TRUE(p.client.ok());
  std::vector<uint8_t> big(1001);
  EXPECT_EQ((*p.client)->Send(1, 0, big).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*p.client)->Send(0xF1, 0, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*p.client)->Send(1, 0, std::span<const uint8_t>(big).first(1000)).ok());
}

TEST_P(ConnectionTest, IdleReceiveTimesOutAndStaysUsable) {
  auto transport = MakeTransport(GetParam());
  Pair p = Connect(*transport, GetParam(), Options("k", "a"), Options("k", "b"));
  ASSERT_TRUE(p.client.ok());
  Message m;
  EXPECT_EQ((*p.server)->Receive(&m, 0.02).code(), StatusCode::kTimeout);
  std::vector<uint8_t> v = {1, 2, 3};
  ASSERT_TRUE((*p.client)->Send(5, 0, v).ok());
  ASSERT_TRUE((*p.server)->Receive(&m, 5).ok());
  EXPECT_EQ(m.payload, v);
  (*p.client)->Close();
  Status s = (*p.server)->Receive(&m, 5);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ((*p.server)->Receive(&m, 5).code(), StatusCode::kUnavailable);  // sticky
}

// An authenticated server connection plus the raw client stream behind it,
// for writing hostile bytes after the handshake.
struct RawClient {
  std::unique_ptr<Connection> server;
  std::unique_ptr<Connection> client;
  Stream* raw = nullptr;
};

RawClient ConnectRaw(Transport& transport, Kind kind, const ConnectionOptions& options) {
  RawClient r;
  auto listener = transport.Listen(ListenAddress(kind));
  EXPECT_TRUE(listener.ok());
  Result<std::unique_ptr<Connection>> server = Status::Internal("unset");
  std::thread t([&] { server = Connection::Accept(**listener, options, 5); });
  auto stream = transport.Connect((*listener)->Address(), 5);
  EXPECT_TRUE(stream.ok());
  r.raw = stream->get();
  auto client = Connection::Establish(std::move(*stream), Connection::Role::kClient, options);
  t.join();
  EXPECT_TRUE(client.ok() && server.ok());
  if (client.ok()) r.client = std::move(*client);
  if (server.ok()) r.server = std::move(*server);
  return r;
}

TEST_P(ConnectionTest, HugeDeclaredLengthIsRefusedBeforeAllocation) {
  auto transport = MakeTransport(GetParam());
  RawClient r = ConnectRaw(*transport, GetParam(), Options("k", "a"));
  ASSERT_TRUE(r.server && r.client);
  uint8_t header[transport::kMessageHeaderBytes];
  transport::EncodeMessageHeader({1, 0, uint64_t{1} << 40, 0}, header);
  ASSERT_TRUE(r.raw->Write(header, 5).ok());
  Message m;
  Status s = r.server->Receive(&m, 5);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("1099511627776"), std::string::npos);
  EXPECT_LT(m.payload.capacity(), size_t{1} << 20);
}

TEST_P(ConnectionTest, TruncatedMessageCostsOnlyWhatArrived) {
  auto transport = MakeTransport(GetParam());
  auto options = Options("k", "a");
  options.max_message_bytes = uint64_t{1} << 30;
  RawClient r = ConnectRaw(*transport, GetParam(), options);
  ASSERT_TRUE(r.server && r.client);
  uint8_t header[transport::kMessageHeaderBytes];
  transport::EncodeMessageHeader({1, 0, uint64_t{1} << 29, 0}, header);  // declares 512 MiB
  ASSERT_TRUE(r.raw->Write(header, 5).ok());
  std::vector<uint8_t> some(5000, 7);
  ASSERT_TRUE(r.raw->Write(some, 5).ok());
  r.raw->Close();
  Message m;
  Status s = r.server->Receive(&m, 5);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  EXPECT_LE(m.payload.capacity(), size_t{256} << 10);
}

TEST_P(ConnectionTest, RandomBytesAreRejected) {
  auto transport = MakeTransport(GetParam());
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    auto listener = transport->Listen(ListenAddress(GetParam()));
    ASSERT_TRUE(listener.ok());
    Result<std::unique_ptr<Connection>> server = Status::Internal("unset");
    auto options = Options("k", "srv");
    options.handshake_timeout_seconds = 2;
    std::thread t([&] { server = Connection::Accept(**listener, options, 5); });
    auto stream = transport->Connect((*listener)->Address(), 5);
    ASSERT_TRUE(stream.ok());
    std::vector<uint8_t> junk(std::uniform_int_distribution<size_t>(1, 4096)(rng));
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (trial % 2 == 1) {  // a well-formed header declaring a huge HELLO
      transport::EncodeMessageHeader({transport::kMsgHello, 0, uint64_t{1} << 40, 0}, junk.data());
    }
    (void)(*stream)->Write(junk, 5);
    (*stream)->Close();
    t.join();
    ASSERT_FALSE(server.ok());
    const StatusCode c = server.status().code();
    EXPECT_TRUE(c == StatusCode::kCorruption || c == StatusCode::kResourceExhausted ||
                c == StatusCode::kUnavailable)
        << server.status().ToString();
  }
}

TEST_P(ConnectionTest, InjectedFaultsBecomeClearErrors) {
  auto base = MakeTransport(GetParam());
  FaultInjectingTransport faulty(base.get());
  // Refused connect.
  FaultPlan refuse;
  refuse.refuse_connect = true;
  faulty.SetConnectPlan(refuse);
  auto refused = Connection::Dial(faulty, ListenAddress(GetParam()), Options("k", "a"));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(faulty.counters().refused_connects, 1);

  // A corrupted payload byte (after the handshake's bytes) is detected.
  FaultPlan corrupt;
  corrupt.corrupt_byte_at = 2000;
  faulty.SetConnectPlan(corrupt);
  {
    Pair p = Connect(faulty, GetParam(), Options("k", "a"), Options("k", "b"));
    ASSERT_TRUE(p.client.ok() && p.server.ok());
    std::vector<uint8_t> v(10000, 1);
    ASSERT_TRUE((*p.client)->Send(1, 0, v).ok());
    Message m;
    Status s = (*p.server)->Receive(&m, 5);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_EQ(faulty.counters().corruptions, 1);
  }
  // A connection dropped mid-message: both sides see Unavailable.
  FaultPlan drop;
  drop.drop_after_bytes = 3000;
  faulty.SetConnectPlan(drop);
  {
    Pair p = Connect(faulty, GetParam(), Options("k", "a"), Options("k", "b"));
    ASSERT_TRUE(p.client.ok() && p.server.ok());
    std::vector<uint8_t> v(10000, 1);
    Status sent = (*p.client)->Send(1, 0, v);
    EXPECT_EQ(sent.code(), StatusCode::kUnavailable) << sent.ToString();
    Message m;
    Status s = (*p.server)->Receive(&m, 5);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_EQ(faulty.counters().drops, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ConnectionTest, ::testing::ValuesIn(transporttest::AllKinds()),
                         transporttest::KindName);

// A slow consumer (reads delayed and capped through the fault wrapper)
// bounds how far the sender can run ahead: the loopback pipe and the UCX
// receive window hold at most their capacity, so the sender blocks instead
// of buffering. (TCP's bound is the kernel's socket buffers.)
class BackPressureTest : public ::testing::TestWithParam<Kind> {};

TEST_P(BackPressureTest, SlowConsumerBlocksTheSender) {
  constexpr size_t kCapacity = 64 * 1024;
  constexpr size_t kMessage = 16 * 1024;
  constexpr int kCount = 48;
  auto base = MakeTransport(GetParam(), kCapacity);
  FaultInjectingTransport faulty(base.get());
  FaultPlan slow;
  slow.read_delay_seconds = 0.0005;
  slow.max_read_bytes = 4096;
  faulty.SetAcceptPlan(slow);
  Pair p = Connect(faulty, GetParam(), Options("k", "a"), Options("k", "b"));
  ASSERT_TRUE(p.client.ok() && p.server.ok());
  std::atomic<int> sent{0};
  std::thread sender([&] {
    std::vector<uint8_t> v(kMessage, 9);
    for (int i = 0; i < kCount; ++i) {
      ASSERT_TRUE((*p.client)->Send(1, 0, v).ok());
      sent.fetch_add(1);
    }
  });
  Message m;
  int max_ahead = 0;
  for (int received = 0; received < kCount; ++received) {
    max_ahead = std::max(max_ahead, sent.load() - received);
    ASSERT_TRUE((*p.server)->Receive(&m, 5).ok());
  }
  sender.join();
  // Capacity plus the message being written and the one being read.
  EXPECT_LE(max_ahead, static_cast<int>(kCapacity / kMessage) + 2);
}

INSTANTIATE_TEST_SUITE_P(Buffered, BackPressureTest,
                         ::testing::Values(Kind::kLoopback, Kind::kUcxTcp, Kind::kUcxSm),
                         transporttest::KindName);

// TCP and UCX (whose addresses are its TCP bootstrap's) validate addresses
// alike and report a refused connection as Unavailable.
class AddressTest : public ::testing::TestWithParam<Kind> {};

TEST_P(AddressTest, AddressesAreValidated) {
  auto t = MakeTransport(GetParam());
  EXPECT_EQ(t->Connect("nonsense", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Listen("127.0.0.1:99999").status().code(), StatusCode::kInvalidArgument);
  auto l = t->Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok());
  std::string address = (*l)->Address();
  (*l)->Close();
  l->reset();
  EXPECT_EQ(t->Connect(address, 2).status().code(), StatusCode::kUnavailable);
  auto v6 = t->Listen("[::1]:0");
  if (v6.ok()) {
    EXPECT_EQ((*v6)->Address().rfind("[::1]:", 0), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Network, AddressTest,
                         ::testing::ValuesIn(transporttest::NetworkKinds()),
                         transporttest::KindName);

}  // namespace
}  // namespace kvserve
