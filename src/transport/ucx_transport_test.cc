// Properties of the UCX transport beyond the Stream contract the shared
// connection and frame-stream tests check: the bootstrap admits only peers
// that prove the transport secret and survives garbage; an endpoint that
// does not know a stream's random id cannot inject into it; a sender that
// ignores the credit window is cut off with bounded memory; a closed stream
// delivers every byte before its end; a killed peer process is detected
// (over UCX's tcp and its shared-memory transports); large writes cross
// between two workers intact.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/transport.h"
#include "transport/transport_test_util.h"
#include "transport/ucx_engine.h"
#include "transport/ucx_stream.h"

namespace kvserve {
namespace {

using transporttest::Kind;

std::vector<uint8_t> RandomBytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Reads exactly `n` bytes (or fails the test).
std::vector<uint8_t> ReadN(Stream& s, size_t n, double timeout = 10) {
  std::vector<uint8_t> out(n);
  size_t have = 0;
  while (have < n) {
    auto r = s.Read(std::span<uint8_t>(out).subspan(have), timeout);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) break;
    have += *r;
  }
  out.resize(have);
  return out;
}

struct StreamPair {
  std::unique_ptr<Stream> client, server;
};

StreamPair Pair(Transport& client_transport, Transport& server_transport) {
  StreamPair p;
  auto listener = server_transport.Listen("127.0.0.1:0");
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  if (!listener.ok()) return p;
  std::thread accept([&] {
    auto s = (*listener)->Accept(10);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) p.server = std::move(*s);
  });
  auto c = client_transport.Connect((*listener)->Address(), 10);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) p.client = std::move(*c);
  accept.join();
  return p;
}

std::unique_ptr<Transport> Ucx(Kind kind, std::string secret = transporttest::kUcxTestSecret) {
  UcxTransportOptions o = transporttest::UcxOptions(kind);
  o.secret = std::move(secret);
  o.bootstrap_timeout_seconds = 2;
  auto t = NewUcxTransport(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

class UcxTransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  // A UCX server of the test's kind listening on loopback, and a plain TCP
  // connection to its bootstrap port (a peer speaking the bootstrap
  // protocol by hand, or not at all). False when either is missing.
  bool ListenAndConnectRaw() {
    server_ = Ucx(GetParam());
    if (server_ == nullptr) return false;
    auto listener = server_->Listen("127.0.0.1:0");
    EXPECT_TRUE(listener.ok()) << listener.status().ToString();
    if (!listener.ok()) return false;
    listener_ = std::move(*listener);
    return ConnectRaw();
  }
  // Replaces raw_ with a new TCP connection to the listener.
  bool ConnectRaw() {
    auto raw = tcp_->Connect(listener_->Address(), 5);
    EXPECT_TRUE(raw.ok()) << raw.status().ToString();
    raw_ = raw.ok() ? std::move(*raw) : nullptr;
    return raw_ != nullptr;
  }
  // Two UCX transports of the test's kind and a stream pair between them
  // (client on the first), owned by the fixture, which destroys the streams
  // before their transports. Null streams when the set-up failed.
  StreamPair& Connected() {
    a_ = Ucx(GetParam());
    b_ = Ucx(GetParam());
    if (a_ && b_) pair_ = Pair(*a_, *b_);
    return pair_;
  }

  std::unique_ptr<Transport> tcp_ = NewTcpTransport();
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Stream> raw_;
  std::unique_ptr<Transport> a_, b_;
  StreamPair pair_;  // after a_ and b_: destroyed first
};

TEST_P(UcxTransportTest, BootstrapAdmitsOnlyPeersWithTheSecret) {
  auto server = Ucx(GetParam(), "right");
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  const std::string address = (*listener)->Address();
  for (const std::string wrong : {"", "wrong", "righ"}) {
    auto client = Ucx(GetParam(), wrong);
    auto s = client->Connect(address, 5);
    ASSERT_FALSE(s.ok()) << "a client with secret '" << wrong << "' got in";
    EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().ToString();
  }
  // Nothing of theirs reached Accept.
  EXPECT_EQ((*listener)->Accept(0.2).status().code(), StatusCode::kTimeout);
  // A server without the secret cannot pose as one.
  auto impostor = Ucx(GetParam(), "guess");
  auto impostor_listener = impostor->Listen("127.0.0.1:0");
  ASSERT_TRUE(impostor_listener.ok());
  auto client = Ucx(GetParam(), "right");
  auto s = client->Connect((*impostor_listener)->Address(), 5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().ToString();
  EXPECT_NE(s.status().message().find("did not prove"), std::string::npos);
  // The right secret still gets in, and bytes flow.
  StreamPair p = Pair(*client, *server);
  ASSERT_TRUE(p.client && p.server);
  std::vector<uint8_t> hello = {1, 2, 3, 4};
  ASSERT_TRUE(p.client->Write(hello, 5).ok());
  EXPECT_EQ(ReadN(*p.server, 4), hello);
}

// A client that ignores the server's proof and offers stream parameters
// with a forged MAC (it does not know the secret) is refused by the server
// before any endpoint exists: it gets the PermissionDenied byte, Accept gets
// nothing.
TEST_P(UcxTransportTest, OfferWithoutAValidProofIsRefused) {
  ASSERT_TRUE(ListenAndConnectRaw());
  std::mt19937_64 rng(22);
  std::vector<uint8_t> hello = RandomBytes(rng, 40);
  std::memcpy(hello.data(), "KVSU\x01\0\0\0", 8);
  ASSERT_TRUE(raw_->Write(hello, 5).ok());
  const auto challenge = ReadN(*raw_, 72);
  ASSERT_EQ(challenge.size(), 72u);
  EXPECT_EQ(challenge[5], 0);  // the server proved itself; we cannot check it
  // OFFER: a forged proof, a stream id, a window, a plausible address.
  std::vector<uint8_t> offer = RandomBytes(rng, 32 + 16);
  std::vector<uint8_t> fixed(12, 0);
  fixed[0] = 0x10;  // window 16 bytes... any value
  fixed[8] = 64;    // address length 64
  offer.insert(offer.end(), fixed.begin(), fixed.end());
  const auto address = RandomBytes(rng, 64);
  offer.insert(offer.end(), address.begin(), address.end());
  ASSERT_TRUE(raw_->Write(offer, 5).ok());
  const auto verdict = ReadN(*raw_, 1);
  ASSERT_EQ(verdict.size(), 1u);
  EXPECT_EQ(verdict[0], static_cast<uint8_t>(StatusCode::kPermissionDenied));
  EXPECT_EQ(listener_->Accept(0.3).status().code(), StatusCode::kTimeout);
}

TEST_P(UcxTransportTest, GarbageOnTheBootstrapPortIsDropped) {
  ASSERT_TRUE(ListenAndConnectRaw());
  std::mt19937_64 rng(21);
  for (int i = 0; i < 5; ++i) {
    if (i > 0) {
      ASSERT_TRUE(ConnectRaw());
    }
    std::vector<uint8_t> junk = RandomBytes(rng, 1 + rng() % 3000);
    if (i % 2 == 1) std::memcpy(junk.data(), "KVSU\x01", std::min<size_t>(5, junk.size()));
    (void)raw_->Write(junk, 5);
    if (i == 4) continue;  // left open: must time out, not block the others
    raw_->Close();
  }
  auto client = Ucx(GetParam());
  auto c = client->Connect(listener_->Address(), 5);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto accepted = listener_->Accept(5);
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  std::vector<uint8_t> bytes = RandomBytes(rng, 1000);
  ASSERT_TRUE((*c)->Write(bytes, 5).ok());
  EXPECT_EQ(ReadN(**accepted, bytes.size()), bytes);
}

TEST_P(UcxTransportTest, ClosedStreamDeliversEveryByteBeforeItsEnd) {
  StreamPair& p = Connected();
  ASSERT_TRUE(p.client && p.server);
  std::mt19937_64 rng(31);
  std::vector<uint8_t> all;
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) {
      std::vector<uint8_t> chunk = RandomBytes(rng, 1 + rng() % 300000);
      ASSERT_TRUE(p.client->Write(chunk, 10).ok());
      all.insert(all.end(), chunk.begin(), chunk.end());
    }
    p.client->Close();  // right after the last write
  });
  std::vector<uint8_t> got;
  uint8_t buffer[65536];
  Status end;
  for (;;) {
    auto n = p.server->Read(buffer, 10);
    if (!n.ok()) {
      end = n.status();
      break;
    }
    got.insert(got.end(), buffer, buffer + *n);
  }
  writer.join();
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end.ToString();
  EXPECT_NE(end.message().find("closed by peer"), std::string::npos) << end.ToString();
  EXPECT_EQ(got.size(), all.size());
  EXPECT_TRUE(got == all);
  // Writing to a stream the peer closed fails clearly.
  std::vector<uint8_t> more(10);
  EXPECT_EQ(p.server->Write(more, 5).code(), StatusCode::kUnavailable);
}

// Readiness for admission (docs/transport.md §3): a UCX stream's
// PollHandle() is readable exactly while Read would return at once: not
// before data arrives, after it does, not once it was all read, again at
// the peer's close. A server can therefore wait on many unauthenticated
// UCX peers on one thread, as on TCP sockets.
bool PollReadable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN) != 0;
}

TEST_P(UcxTransportTest, PollHandleIsReadableExactlyWhileReadWouldNotWait) {
  StreamPair& p = Connected();
  ASSERT_TRUE(p.client && p.server);
  const int fd = p.server->PollHandle();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(p.server->PollHandle(), fd) << "one handle per stream";
  EXPECT_FALSE(PollReadable(fd, 0)) << "readable before anything was sent";
  std::mt19937_64 rng(37);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::vector<uint8_t> sent = RandomBytes(rng, 1 + rng() % 5000);
    ASSERT_TRUE(p.client->Write(sent, 10).ok());
    ASSERT_TRUE(PollReadable(fd, 10000)) << "data arrived but the handle stayed quiet";
    // Read in small pieces: the handle stays readable while bytes are left.
    std::vector<uint8_t> got;
    while (got.size() < sent.size()) {
      EXPECT_TRUE(PollReadable(fd, 0)) << got.size() << " of " << sent.size() << " bytes read";
      uint8_t piece[100];
      auto n = p.server->Read(piece, 0);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      got.insert(got.end(), piece, piece + *n);
    }
    EXPECT_EQ(got, sent);
    EXPECT_FALSE(PollReadable(fd, 0)) << "readable with nothing left to read";
  }
  p.client->Close();
  EXPECT_TRUE(PollReadable(fd, 10000)) << "the peer's close did not make the handle readable";
  uint8_t byte;
  EXPECT_EQ(p.server->Read(std::span<uint8_t>(&byte, 1), 0).status().code(),
            StatusCode::kUnavailable);
}

TEST_P(UcxTransportTest, LargeWritesCrossBetweenWorkersIntact) {
  StreamPair& p = Connected();
  ASSERT_TRUE(p.client && p.server);
  std::mt19937_64 rng(41);
  const std::vector<uint8_t> big = RandomBytes(rng, size_t{24} << 20);
  const std::vector<uint8_t> back = RandomBytes(rng, size_t{9} << 20);
  // Both directions at once: each side writes while the other reads.
  std::thread forward([&] { ASSERT_TRUE(p.client->Write(big, 20).ok()); });
  std::thread backward([&] { ASSERT_TRUE(p.server->Write(back, 20).ok()); });
  const auto got = ReadN(*p.server, big.size(), 20);
  const auto got_back = ReadN(*p.client, back.size(), 20);
  forward.join();
  backward.join();
  EXPECT_TRUE(got == big);
  EXPECT_TRUE(got_back == back);
}

// A buffered Write returns before its sends complete: it must send from a
// copy. The writer scribbles over its one buffer as soon as each Write
// returns; the reader must still see every byte that was written, with
// frame-sized, header-sized and over-the-limit (zero-copy) writes mixed.
TEST_P(UcxTransportTest, WriteBehindCopiesTheCallersBytes) {
  StreamPair& p = Connected();
  ASSERT_TRUE(p.client && p.server);
  std::mt19937_64 rng(0x57b1);
  std::vector<size_t> sizes;
  for (int i = 0; i < 48; ++i) {
    const int pick = static_cast<int>(rng() % 4);
    sizes.push_back(pick == 0   ? 16
                    : pick == 1 ? 1 + rng() % 4096
                    : pick == 2 ? (size_t{1} << 20) - rng() % 1000
                                : (size_t{1} << 20) + 1 + rng() % (size_t{3} << 20));
  }
  std::vector<uint8_t> expected;
  std::thread writer([&] {
    std::mt19937_64 fill(7);
    std::vector<uint8_t> buffer;
    for (size_t n : sizes) {
      buffer.resize(n);
      for (auto& x : buffer) x = static_cast<uint8_t>(fill());
      expected.insert(expected.end(), buffer.begin(), buffer.end());
      ASSERT_TRUE(p.client->Write(buffer, 20).ok());
      std::memset(buffer.data(), 0xA5, buffer.size());  // the caller reuses its memory
    }
  });
  size_t total = 0;
  for (size_t n : sizes) total += n;
  const auto got = ReadN(*p.server, total, 20);
  writer.join();
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
}

// The receiving engine fetches rendezvous segments as they arrive, so a
// write within the peer's window completes whether or not the peer reads
// meanwhile: two peers that each write several MiB (zero-copy writes,
// beyond the write-behind limit) and only then read both finish.
TEST_P(UcxTransportTest, WritersThatReadOnlyAfterwardsDoNotDeadlock) {
  StreamPair& p = Connected();
  ASSERT_TRUE(p.client && p.server);
  std::mt19937_64 rng(0xdead);
  const std::vector<uint8_t> one = RandomBytes(rng, size_t{6} << 20);
  const std::vector<uint8_t> two = RandomBytes(rng, size_t{6} << 20);
  std::vector<uint8_t> got_one, got_two;
  std::thread side([&] {
    const bool wrote = p.server->Write(two, 5).ok();
    EXPECT_TRUE(wrote);
    if (wrote) got_one = ReadN(*p.server, one.size(), 5);
  });
  const bool wrote = p.client->Write(one, 5).ok();
  EXPECT_TRUE(wrote);
  if (wrote) got_two = ReadN(*p.client, two.size(), 5);
  side.join();
  EXPECT_TRUE(got_one == one);
  EXPECT_TRUE(got_two == two);
}

// --- The engine, below the bootstrap ------------------------------------

using transport::ucx::Engine;
using transport::ucx::StreamState;
using transport::ucx::UcxStream;
using transport::ucx::WriteOp;

struct EnginePair {
  std::shared_ptr<Engine> a, b;
  std::shared_ptr<StreamState> on_a, on_b;
  std::unique_ptr<Transport> loopback = NewLoopbackTransport();
};

// States on two engines joined as the bootstrap would join them, except
// that B's view of A's stream id is `id_on_b` (the real one unless a test
// forges it). Control connections are in-process pipes (not watched).
EnginePair Engines(Kind kind, uint64_t window, bool forge_id) {
  EnginePair e;
  Engine::Options options;
  options.tls = transporttest::UcxOptions(kind).tls;
  auto a = Engine::Create(options);
  auto b = Engine::Create(options);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return e;
  e.a = *a;
  e.b = *b;
  auto listener = e.loopback->Listen("control");
  auto control_b = e.loopback->Connect("control", 1);
  auto control_a = (*listener)->Accept(1);
  e.on_a = std::make_shared<StreamState>();
  e.on_b = std::make_shared<StreamState>();
  for (auto* s : {e.on_a.get(), e.on_b.get()}) {
    EXPECT_TRUE(transport::ucx::RandomStreamId(&s->local_id).ok());
    s->window = window;
    s->segment_bytes = 16 * 1024;
    s->remote = "test";
  }
  e.on_a->control = std::move(*control_a);
  e.on_b->control = std::move(*control_b);
  e.on_a->peer_id = e.on_b->local_id;
  e.on_a->peer_window = window;
  e.on_b->peer_id = e.on_a->local_id;
  if (forge_id) {
    EXPECT_TRUE(transport::ucx::RandomStreamId(&e.on_b->peer_id).ok());
  }
  e.on_b->peer_window = window;
  EXPECT_TRUE(e.a->Register(e.on_a).ok());
  EXPECT_TRUE(e.b->Register(e.on_b).ok());
  EXPECT_TRUE(e.a->Open(e.on_a, e.b->worker_address()).ok());
  EXPECT_TRUE(e.b->Open(e.on_b, e.a->worker_address()).ok());
  return e;
}

// Sends bytes from B's state straight through the engine, bypassing the
// credit check a UcxStream makes.
void RawSend(EnginePair& e, const std::vector<uint8_t>& bytes, uint64_t offset) {
  auto op = std::make_shared<WriteOp>();
  op->outstanding = 1;
  e.b->Send(e.on_b, bytes.data(), bytes.size(), offset, op);
  std::unique_lock<std::mutex> lock(e.on_b->mu);
  e.on_b->cv.wait_for(lock, std::chrono::seconds(10), [&] { return op->outstanding == 0; });
}

TEST_P(UcxTransportTest, EndpointWithoutTheStreamIdCannotInject) {
  EnginePair forged = Engines(GetParam(), 1 << 20, /*forge_id=*/true);
  ASSERT_TRUE(forged.on_a);
  UcxStream victim(forged.a, forged.on_a);
  std::mt19937_64 rng(51);
  const auto bytes = RandomBytes(rng, 100000);  // rendezvous-sized and eager-sized below
  RawSend(forged, bytes, 0);
  RawSend(forged, RandomBytes(rng, 100), 100000);
  uint8_t buffer[16];
  auto r = victim.Read(buffer, 0.3);
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout) << "forged bytes were delivered";
  // With the real id the same bytes arrive.
  EnginePair real = Engines(GetParam(), 1 << 20, /*forge_id=*/false);
  UcxStream stream(real.a, real.on_a);
  RawSend(real, bytes, 0);
  EXPECT_EQ(ReadN(stream, bytes.size()), bytes);
}

TEST_P(UcxTransportTest, SenderIgnoringTheWindowIsCutOffWithBoundedMemory) {
  constexpr uint64_t kWindow = 256 * 1024;
  EnginePair e = Engines(GetParam(), kWindow, /*forge_id=*/false);
  ASSERT_TRUE(e.on_a);
  UcxStream stream(e.a, e.on_a);
  std::mt19937_64 rng(61);
  const auto chunk = RandomBytes(rng, 64 * 1024);
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i, offset += chunk.size()) RawSend(e, chunk, offset);  // 2 windows
  {
    std::lock_guard<std::mutex> lock(e.on_a->mu);
    uint64_t held = 0;
    for (const auto& [at, seg] : e.on_a->segments) held += seg.length;
    EXPECT_LE(held, kWindow);
  }
  // What fit the window is readable; then the violation surfaces.
  Status end;
  uint64_t read = 0;
  std::vector<uint8_t> buffer(65536);
  for (;;) {
    auto n = stream.Read(buffer, 5);
    if (!n.ok()) {
      end = n.status();
      break;
    }
    read += *n;
  }
  EXPECT_LE(read, kWindow);
  EXPECT_EQ(end.code(), StatusCode::kCorruption) << end.ToString();
  EXPECT_NE(end.message().find("receive window"), std::string::npos) << end.ToString();
}

// --- A real peer process killed -----------------------------------------

// Child role: connects to $KVSERVE_UCX_CHILD_ADDRESS over the transport kind
// in $KVSERVE_UCX_CHILD_KIND, writes 1 MiB and waits to be killed.
TEST(UcxChildRole, ConnectWriteAndWait) {
  const char* address = std::getenv("KVSERVE_UCX_CHILD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "child role of UcxTransportTest.KilledPeerIsDetected";
  const Kind kind =
      std::string(std::getenv("KVSERVE_UCX_CHILD_KIND")) == "tcp" ? Kind::kUcxTcp : Kind::kUcxSm;
  auto t = Ucx(kind);
  auto s = t->Connect(address, 10);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> bytes(1 << 20, 0x42);
  ASSERT_TRUE((*s)->Write(bytes, 10).ok());
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

TEST_P(UcxTransportTest, KilledPeerIsDetected) {
  auto server = Ucx(GetParam());
  auto listener = server->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  const pid_t pid = transporttest::SpawnSelf(
      "UcxChildRole.ConnectWriteAndWait",
      {"KVSERVE_UCX_CHILD_ADDRESS=" + (*listener)->Address(),
       std::string("KVSERVE_UCX_CHILD_KIND=") + (GetParam() == Kind::kUcxTcp ? "tcp" : "sm")});
  ASSERT_GT(pid, 0);
  auto stream = (*listener)->Accept(20);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  EXPECT_EQ(ReadN(**stream, 1 << 20, 20), std::vector<uint8_t>(1 << 20, 0x42));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // Detected by the control connection: Unavailable, long before the idle
  // timeout would say Timeout.
  uint8_t buffer[16];
  auto r = (*stream)->Read(buffer, 30);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  std::vector<uint8_t> bytes(1000);
  EXPECT_EQ((*stream)->Write(bytes, 30).code(), StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxTransportTest, ::testing::Values(Kind::kUcxTcp, Kind::kUcxSm),
                         transporttest::KindName);

TEST(UcxTransportOptionsTest, BadOptionsAreRefused) {
  UcxTransportOptions o;
  o.window_bytes = 1000;
  EXPECT_EQ(NewUcxTransport(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.segment_bytes = o.window_bytes * 2;
  EXPECT_EQ(NewUcxTransport(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.tls = "no-such-transport";
  auto t = NewUcxTransport(o);
  EXPECT_FALSE(t.ok());
}

}  // namespace
}  // namespace kvserve
