// Security of the serve workers: peers without the secret are refused (in
// both hops); a 2^40-byte declared length, a truncated chunk record, a
// record with a flipped byte and random bytes are rejected with bounded
// memory, the decode worker never generates from such a frame, and it keeps
// serving good requests afterwards. (Connection-level limits are tested in
// src/transport/connection_test.cc; these tests aim at the serve ports.)
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <fstream>
#include <random>
#include <thread>

#include "hostile_frame.h"
#include "silent_flood.h"

#include "kvserve/codec.h"
#include "kvserve/profile.h"
#include "kvserve/serve.h"
#include "serve/serve_protocol.h"
#include "serve/serve_test_util.h"
#include "transport/wire.h"

namespace kvserve {
namespace {

class ServeSecurityTest : public servetest::OverTransports {};

using servetest::Reference;
using servetest::SmallModel;

// Resident set size of this process in bytes.
uint64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Peak resident set size of this process so far, in bytes.
uint64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

struct RawPeer {
  std::shared_ptr<Stream> stream;
  std::unique_ptr<Connection> connection;
};

RawPeer DialRaw(Transport& tcp, const std::string& address, const std::string& secret) {
  RawPeer p;
  auto s = tcp.Connect(address, 5);
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return p;
  p.stream = std::shared_ptr<Stream>(std::move(*s));
  auto c = Connection::Establish(std::make_unique<SharedStream>(p.stream), Connection::Role::kClient,
                                 servetest::Options(secret, "raw-peer"));
  if (c.ok()) p.connection = std::move(*c);
  return p;
}

// True when the peer closed the stream (or sent an error) within 5 s.
bool PeerHangsUp(Stream& stream) {
  uint8_t buf[4096];
  for (int i = 0; i < 100; ++i) {
    auto n = stream.Read(buf, 5);
    if (!n.ok()) return n.status().code() != StatusCode::kTimeout;
  }
  return false;
}

// One lossless request straight through the cluster, checked against the
// single-process tokens: the worker still serves correctly.
void ExpectStillServes(servetest::Cluster& cluster, std::mt19937_64& rng) {
  ServeRequest r;
  r.id = rng() % 1000;
  r.prompt = servetest::RandomPrompt(rng, 10, 80);
  r.max_new_tokens = 6;
  r.method = "none";
  auto response = cluster.client->Submit(r);
  ASSERT_TRUE(response.ok());
  ASSERT_TRUE(response->status.ok()) << response->status.ToString();
  EXPECT_EQ(response->tokens, Reference(SmallModel(), r));
}

TEST_P(ServeSecurityTest, PeersWithoutTheSecretAreRefused) {
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.prefill_secret = "not-the-decode-secret";
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(21);
  ServeRequest r;
  r.prompt = servetest::RandomPrompt(rng, 10, 50);
  r.method = "none";
  auto response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status.code(), StatusCode::kPermissionDenied) << response->status.ToString();
  EXPECT_TRUE(response->tokens.empty());
  EXPECT_GE(cluster->decode->auth_failures(), 1);
  EXPECT_EQ(cluster->decode->completed(), 0);

  // A client without the prefill worker's secret.
  auto good = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(good);
  ServeClientOptions co;
  co.prefill_addresses = {good->prefill->address()};
  co.connection = servetest::Options("wrong-client-secret", "intruder");
  ServeClient intruder(good->transport.get(), co);
  response = intruder.Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status.code(), StatusCode::kPermissionDenied) << response->status.ToString();
  ExpectStillServes(*good, rng);
}

TEST_P(ServeSecurityTest, HugeDeclaredLengthAndRandomBytesAreRejectedWithBoundedMemory) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(22);
  const uint64_t rss_before = RssBytes();
  for (const std::string& address : {cluster->decode->address(), cluster->prefill->address()}) {
    const std::string secret = address == cluster->decode->address() ? "pd-secret" : "client-secret";
    // An authenticated peer declaring a 2^40-byte message.
    RawPeer peer = DialRaw(*cluster->transport, address, secret);
    ASSERT_TRUE(peer.connection);
    transport::MessageHeader h;
    h.type = kMsgFrameBegin;
    h.length = uint64_t{1} << 40;
    uint8_t header[transport::kMessageHeaderBytes];
    transport::EncodeMessageHeader(h, header);
    ASSERT_TRUE(peer.stream->Write(header, 5).ok());
    EXPECT_TRUE(PeerHangsUp(*peer.stream));
    // Random bytes, before and after authentication.
    for (bool authenticated : {false, true}) {
      std::vector<uint8_t> junk(64 * 1024);
      for (auto& b : junk) b = static_cast<uint8_t>(rng());
      std::shared_ptr<Stream> stream;
      RawPeer p2;
      if (authenticated) {
        p2 = DialRaw(*cluster->transport, address, secret);
        ASSERT_TRUE(p2.connection);
        stream = p2.stream;
      } else {
        auto s = cluster->transport->Connect(address, 5);
        ASSERT_TRUE(s.ok());
        stream = std::shared_ptr<Stream>(std::move(*s));
      }
      (void)stream->Write(junk, 5);  // the worker may hang up mid-write
      EXPECT_TRUE(PeerHangsUp(*stream));
    }
  }
  // Nothing near 2^40 (or even 256 MiB) was allocated for these peers.
  EXPECT_LT(RssBytes(), rss_before + (uint64_t{256} << 20));
  ExpectStillServes(*cluster, rng);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif
#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUnderTsan = true;
#else
constexpr bool kUnderTsan = false;
#endif
#else
constexpr bool kUnderTsan = false;
#endif

// Memory from real bytes (docs/format.md §7): an authenticated peer sends
// the decode worker a valid ~90-byte frame header declaring 512 MiB of KV
// for the worker's own model (within its 4 GiB limit), alone and then with
// one 1 KiB record: the worker's peak RSS grows by far less than what was
// declared; it refuses the incomplete frames and keeps serving.
TEST_P(ServeSecurityTest, HostileFrameHeaderCostsOnlyWhatArrives) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(24);
  ExpectStillServes(*cluster, rng);  // everything a request needs is loaded
  const ModelConfig& c = SmallModel().config();
  const uint64_t per_token = uint64_t{4} * c.layers * 2 * c.kv_heads * c.head_dim;
  const KvShape shape{c.layers, c.kv_heads, static_cast<int>((uint64_t{512} << 20) / per_token),
                      c.head_dim};
  const std::vector<uint8_t> header = testing::HostileHeader(shape);
  ASSERT_LE(header.size(), 100u);
  RawPeer peer = DialRaw(*cluster->transport, cluster->decode->address(), "pd-secret");
  ASSERT_TRUE(peer.connection);
  const uint64_t peak_before = PeakRssBytes();
  for (int records = 0; records <= 1; ++records) {
    FrameSender sender(peer.connection.get());
    ASSERT_TRUE(sender.Begin(50 + records, header).ok());
    if (records == 1) {
      ASSERT_TRUE(sender.SendRecord(testing::RawRecord(shape, DType::kF32, 0, 0, 0, 16, 7)).ok());
    }
    (void)sender.Finish();  // the worker acknowledges; the frame is incomplete
  }
  // A request over the same connection proves the worker handled both.
  serve::GenerateMessage g;
  g.transfer_ids = {51};
  g.prompt = {1};
  g.last_logits.assign(c.vocab_size, 0.0f);
  ASSERT_TRUE(peer.connection->Send(kMsgServeGenerate, 0, serve::EncodeGenerate(g)).ok());
  Message m;
  ASSERT_TRUE(peer.connection->Receive(&m, 30).ok());
  auto result = serve::DecodeResult(m.payload);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->status.code(), StatusCode::kCorruption) << result->status.ToString();
  // Under ASan the untouched zero pages of the frame's KV stay virtual, but
  // their shadow (one byte per eight) is written when the block is handed
  // out: allow that, still far below the 512 MiB declared.
  const uint64_t declared = per_token * static_cast<uint64_t>(shape.tokens);
  const uint64_t shadow = kUnderAsan ? declared / 8 : 0;
  // ThreadSanitizer's calloc writes the zeros: resident memory is no
  // measure there (the release and ASan runs check it).
  if (!kUnderTsan) {
    EXPECT_LT(PeakRssBytes(), peak_before + (uint64_t{32} << 20) + shadow)
        << "declared " << (declared >> 20) << " MiB";
  }
  EXPECT_GE(cluster->decode->refused_frames(), 2);
  ExpectStillServes(*cluster, rng);
}

// Admission at the decode worker (docs/transport.md §3): with 2,000
// connections that never send a byte held open against it (reopened as it
// drops them), a prefill worker that redials for every request (as after a
// restart; SetLinkRate closes its decode connection) has every request
// served on its first attempt, with the right tokens, for longer than the
// unauthenticated deadline.
TEST(ServeFloodTest, SilentConnectionFloodDoesNotKeepPrefillWorkersOut) {
  ASSERT_GE(testing::RaiseFileLimit(8192), 8192u) << "RLIMIT_NOFILE";
  auto cluster = servetest::StartCluster();
  ASSERT_TRUE(cluster);
  testing::SilentFlood flood(cluster->decode->address(), 2000);
  std::mt19937_64 rng(25);
  int served = 0;
  const double start = MonotonicSeconds();
  while (served < 8 || MonotonicSeconds() - start < 3.0) {
    cluster->prefill->SetLinkRate(0);  // the next request dials the decode worker again
    ServeRequest r;
    r.id = 1000 + served;
    r.prompt = servetest::RandomPrompt(rng, 10, 60);
    r.max_new_tokens = 4;
    r.method = "none";
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << "request " << served << ": " << response->status.ToString();
    EXPECT_EQ(response->timings.attempts, 1) << "request " << served;
    EXPECT_EQ(response->tokens, Reference(SmallModel(), r));
    ++served;
  }
  EXPECT_EQ(flood.failed_opens(), 0);
  EXPECT_GT(flood.dropped(), 0) << "the decode worker never dropped a silent peer";
}

// A frame with a truncated record, or a record with a flipped byte (the
// message checksum is valid: a buggy or malicious authenticated sender), is
// refused by the decode worker; a GENERATE for it is answered with
// Corruption, never with tokens; the same connection then serves a good
// frame correctly.
TEST_P(ServeSecurityTest, MalformedRecordsAreRefusedAndNeverGeneratedFrom) {
  auto cluster = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(23);
  for (const char* preset : {"none", "kivi-2"}) {
    SCOPED_TRACE(preset);
    ServeRequest r;
    r.prompt = servetest::RandomPrompt(rng, 150, 300);
    r.max_new_tokens = 5;
    auto prefill = SmallModel().Prefill(r.prompt);
    ASSERT_TRUE(prefill.ok());
    auto encoder = EncoderContext::Create(Profile::Parse(preset).value(), {.threads = 1});
    ASSERT_TRUE(encoder.ok());
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    ASSERT_TRUE((*encoder)->Encode(prefill->kv.view(), sink).ok());
    auto info = InspectFrame(frame);
    ASSERT_TRUE(info.ok());
    ASSERT_GT(info->chunks.size(), 2u);
    const uint64_t header_bytes = info->chunks[0].offset;
    RawPeer peer = DialRaw(*cluster->transport, cluster->decode->address(), "pd-secret");
    ASSERT_TRUE(peer.connection);

    serve::GenerateMessage g;
    g.prompt = r.prompt;
    g.max_new_tokens = r.max_new_tokens;
    g.last_logits = prefill->logits;
    auto generate = [&](uint64_t transfer_id) -> Result<serve::ResultMessage> {
      g.transfer_ids = {transfer_id};
      KVSERVE_RETURN_IF_ERROR(peer.connection->Send(kMsgServeGenerate, 0, serve::EncodeGenerate(g)));
      Message m;
      KVSERVE_RETURN_IF_ERROR(peer.connection->Receive(&m, 30));
      return serve::DecodeResult(m.payload);
    };
    const size_t victim = 1 + rng() % (info->chunks.size() - 1);
    for (int mode = 0; mode < 3; ++mode) {  // truncated, flipped byte, a record left out
      const uint64_t transfer_id = 100 + mode;
      FrameSender sender(peer.connection.get());
      ASSERT_TRUE(sender.Begin(transfer_id, std::span<const uint8_t>(frame).first(header_bytes)).ok());
      for (size_t i = 0; i < info->chunks.size(); ++i) {
        std::vector<uint8_t> record(frame.begin() + info->chunks[i].offset,
                                    frame.begin() + info->chunks[i].offset + info->chunks[i].size);
        if (i == victim) {
          if (mode == 0) record.resize(record.size() - 1 - rng() % (record.size() - 1));
          if (mode == 1) record[rng() % record.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
          if (mode == 2) continue;
        }
        ASSERT_TRUE(sender.SendRecord(record).ok());
      }
      auto finished = sender.Finish();
      if (mode < 2) {
        EXPECT_EQ(finished.status().code(), StatusCode::kCorruption) << finished.status().ToString();
      }
      auto result = generate(transfer_id);
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_EQ(result->status.code(), StatusCode::kCorruption) << "mode " << mode;
      EXPECT_TRUE(result->tokens.empty()) << "generated from a bad frame, mode " << mode;
    }
    // The same connection then serves a good frame.
    FrameSender sender(peer.connection.get());
    ASSERT_TRUE(sender.sink(7).Append(frame).ok());
    ASSERT_TRUE(sender.Finish().ok());
    auto result = generate(7);
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(result->status.ok()) << result->status.ToString();
    EXPECT_EQ(result->tokens.size(), 5u);
    if (std::string(preset) == "none") {
      EXPECT_EQ(result->tokens, Reference(SmallModel(), r));
    }
  }
  EXPECT_GE(cluster->decode->refused_frames(), 6);
}

KVSERVE_SERVE_OVER_TRANSPORTS(ServeSecurityTest);

}  // namespace
}  // namespace kvserve
