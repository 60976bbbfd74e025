// The pool served over TCP and UCX on loopback: a client with the secret gets the
// same answers as the embedded pool; one without is refused; a dropped
// connection fails the request clearly and the next request reconnects; a
// restarted server is redialled; large Gets report goodput.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kvserve/codec.h"
#include "kvserve/pool.h"
#include "kvserve/profile.h"
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

// A "none" frame of a seeded random cache: 2 layers, 2 heads of 64 dims,
// 256 tokens, f32 (records of tens of KiB).
std::vector<uint8_t> RandomFrame(std::mt19937& rng) {
  const KvShape shape{2, 2, 256, 64};
  KvCache cache(DType::kF32, shape);
  std::normal_distribution<float> normal(0.f, 1.f);
  float* p = reinterpret_cast<float*>(cache.bytes());
  for (int64_t i = 0; i < shape.NumElements(); ++i) p[i] = normal(rng);
  auto enc = EncoderContext::Create(*Profile::Parse("none"), {.threads = 1});
  EXPECT_TRUE(enc.ok());
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  EXPECT_TRUE(enc.ok() && (*enc)->Encode(cache.view(), sink).ok());
  return frame;
}

// What GetRecords delivered.
struct Delivered {
  int headers = 0;
  std::vector<uint8_t> header;
  std::vector<std::vector<uint8_t>> records;
  FrameHandler Handler(int fail_at_record = -1) {
    FrameHandler h;
    h.on_header = [this](uint64_t, std::span<const uint8_t> bytes) {
      ++headers;
      header.assign(bytes.begin(), bytes.end());
      return Status::Ok();
    };
    h.on_record = [this, fail_at_record](std::span<const uint8_t> record) {
      if (static_cast<int>(records.size()) == fail_at_record) return Status::OutOfRange("enough");
      records.emplace_back(record.begin(), record.end());
      return Status::Ok();
    };
    return h;
  }
};

// An embedded pool, served over `kind` and a client of it.
struct Served {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<KvPool> backing;
  Result<std::unique_ptr<PoolServer>> server = Status::Internal("unset");
  std::unique_ptr<KvPool> remote;
  explicit Served(transporttest::Kind kind)
      : transport(transporttest::MakeTransport(kind)), backing(NewMemoryPool({.budget_bytes = 64 << 20})) {
    server = PoolServer::Start(transport.get(), backing.get(),
                               {.listen_address = "127.0.0.1:0", .connection = Conn("k")});
    if (server.ok())
      remote = NewRemotePool(transport.get(), {.address = (*server)->address(), .connection = Conn("k")});
  }
};

// GetRecords gives the stored frame as its header and records, in frame
// order, whether the pool is embedded or served; a missing key, a value
// that is not a frame and a handler that stops each end it with their
// status, and the client stays usable.
TEST_P(PoolServerTest, GetRecordsDeliversTheStoredFrameRecordByRecord) {
  Served served(GetParam());
  ASSERT_TRUE(served.server.ok()) << served.server.status().ToString();
  KvPool* const remote = served.remote.get();
  KvPool* const backing = served.backing.get();
  std::mt19937 rng(12);
  for (KvPool* pool : {remote, backing}) {
    SCOPED_TRACE(pool == remote ? "remote" : "embedded");
    for (int round = 0; round < 2; ++round) {
      const std::vector<uint8_t> frame = RandomFrame(rng);
      auto info = InspectFrame(frame);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      const PoolKey key{"m", rng(), "none"};
      ASSERT_TRUE(pool->Put(key, frame).ok());
      Delivered got;
      ASSERT_TRUE(pool->GetRecords(key, got.Handler()).ok());
      EXPECT_EQ(got.headers, 1);
      ASSERT_EQ(got.records.size(), info->chunks.size());
      EXPECT_TRUE(std::ranges::equal(got.header, std::span(frame).first(info->chunks[0].offset)));
      for (size_t i = 0; i < got.records.size(); ++i)
        EXPECT_TRUE(std::ranges::equal(
            got.records[i], std::span(frame).subspan(info->chunks[i].offset, info->chunks[i].size)))
            << "record " << i;

      Delivered stopped;
      const Status s = pool->GetRecords(key, stopped.Handler(/*fail_at_record=*/1));
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
      EXPECT_EQ(stopped.records.size(), 1u);

      Delivered none;
      EXPECT_EQ(pool->GetRecords({"m", rng(), "none"}, none.Handler()).code(), StatusCode::kNotFound);
      const PoolKey junk{"m", rng(), "none"};
      ASSERT_TRUE(pool->Put(junk, RandomBytes(rng, 5000)).ok());
      EXPECT_EQ(pool->GetRecords(junk, none.Handler()).code(), StatusCode::kCorruption);
      EXPECT_EQ(none.headers, 0);
      std::vector<uint8_t> again;
      ASSERT_TRUE(pool->Get(key, &again).ok());
      EXPECT_EQ(again, frame);
    }
  }
}

// GetRecordsInOrder offers the frames of its keys in order, each whole,
// from the embedded pool and over one request from the served one; the
// sequence ends at a missing key (later keys not offered), at a frame the
// reader refuses, and when the reader stops; the client stays usable.
TEST_P(PoolServerTest, GetRecordsInOrderStreamsEveryKeyAndEndsCleanly) {
  Served served(GetParam());
  ASSERT_TRUE(served.server.ok()) << served.server.status().ToString();
  KvPool* const remote = served.remote.get();
  KvPool* const backing = served.backing.get();
  std::mt19937 rng(14);
  for (KvPool* pool : {remote, backing}) {
    SCOPED_TRACE(pool == remote ? "remote" : "embedded");
    std::vector<PoolKey> keys;
    std::vector<std::vector<uint8_t>> frames;
    for (int i = 0; i < 5; ++i) {
      keys.push_back({"m", rng(), "none"});
      frames.push_back(RandomFrame(rng));
      ASSERT_TRUE(pool->Put(keys.back(), frames.back()).ok());
    }
    // Reads keys in order; `refuse_at` refuses that frame's first record,
    // `stop_after` returns false after reading that frame.
    auto read_all = [&](std::span<const PoolKey> ks, int refuse_at, int stop_after,
                        std::vector<Status>* statuses) {
      std::vector<Delivered> got;
      pool->GetRecordsInOrder(ks, [&](size_t i, const PoolFrameReader& read) {
        EXPECT_EQ(i, got.size());
        got.emplace_back();
        const Status st = read(got.back().Handler(static_cast<int>(i) == refuse_at ? 0 : -1));
        statuses->push_back(st);
        EXPECT_EQ(read(got.back().Handler()).code(), StatusCode::kInvalidArgument) << "ran twice";
        return static_cast<int>(i) != stop_after;
      });
      return got;
    };
    auto expect_frame = [&](const Delivered& d, size_t k) {
      std::vector<uint8_t> whole = d.header;
      for (const auto& r : d.records) whole.insert(whole.end(), r.begin(), r.end());
      EXPECT_EQ(whole, frames[k]) << "frame " << k;
    };
    std::vector<Status> st;
    auto all = read_all(keys, -1, -1, &st);
    ASSERT_EQ(all.size(), keys.size());
    for (size_t k = 0; k < keys.size(); ++k) {
      EXPECT_TRUE(st[k].ok()) << st[k].ToString();
      expect_frame(all[k], k);
    }

    std::vector<PoolKey> gap = keys;
    gap[2] = {"m", rng(), "none"};  // never stored
    st.clear();
    auto cut = read_all(gap, -1, -1, &st);
    ASSERT_EQ(cut.size(), 3u);
    EXPECT_EQ(st[2].code(), StatusCode::kNotFound) << st[2].ToString();
    EXPECT_EQ(cut[2].headers, 0);
    expect_frame(cut[1], 1);

    st.clear();
    auto refused = read_all(keys, 1, -1, &st);
    ASSERT_EQ(refused.size(), 2u);
    EXPECT_EQ(st[1].code(), StatusCode::kOutOfRange) << st[1].ToString();

    st.clear();
    auto stopped = read_all(keys, -1, 1, &st);
    ASSERT_EQ(stopped.size(), 2u);
    expect_frame(stopped[1], 1);

    // Not run by the reader: the sequence ends there.
    int offered = 0;
    pool->GetRecordsInOrder(keys, [&](size_t, const PoolFrameReader&) { return ++offered < 3; });
    EXPECT_EQ(offered, 1);

    // The client answers the next requests as before.
    std::vector<uint8_t> again;
    ASSERT_TRUE(pool->Get(keys[3], &again).ok());
    EXPECT_EQ(again, frames[3]);
    st.clear();
    auto tail = read_all(std::span(keys).subspan(3), -1, -1, &st);
    ASSERT_EQ(tail.size(), 2u);
    expect_frame(tail[1], 4);
  }
}

// A connection found broken before anything was delivered is redialled
// and the frame delivered whole; one lost mid-frame is Unavailable, the
// frame's records cut short (what was delivered cannot be taken back).
TEST_P(PoolServerTest, GetRecordsRetriesBeforeDeliveryAndFailsClearlyAfter) {
  auto tcp = transporttest::MakeTransport(GetParam());
  FaultInjectingTransport faulty(tcp.get());
  auto backing = NewMemoryPool({.budget_bytes = 64 << 20});
  auto server = PoolServer::Start(&faulty, backing.get(),
                                  {.listen_address = "127.0.0.1:0", .connection = Conn("k")});
  ASSERT_TRUE(server.ok());
  RemotePoolOptions ro;
  ro.address = (*server)->address();
  ro.connection = Conn("k");
  ro.reconnect_attempts = 1;
  auto remote = NewRemotePool(tcp.get(), ro);
  std::mt19937 rng(13);
  const std::vector<uint8_t> frame = RandomFrame(rng);
  auto info = InspectFrame(frame);
  ASSERT_TRUE(info.ok());
  const PoolKey key{"m", 1, "none"};
  ASSERT_TRUE(remote->Put(key, frame).ok());

  // The server restarts on the same address: the client's connection is
  // dead before the request; it redials.
  const std::string address = (*server)->address();
  (*server)->Stop();
  server->reset();
  auto again = PoolServer::Start(&faulty, backing.get(),
                                 {.listen_address = address, .connection = Conn("k")});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Delivered whole;
  ASSERT_TRUE(remote->GetRecords(key, whole.Handler()).ok());
  EXPECT_EQ(whole.records.size(), info->chunks.size());

  // The server's streams accepted from now on die inside the first record;
  // a new client dials one.
  FaultPlan drop;
  drop.drop_after_bytes = static_cast<int64_t>(info->chunks[0].offset) + 4096;
  faulty.SetAcceptPlan(drop);
  auto fresh = NewRemotePool(tcp.get(), ro);
  Delivered cut;
  const Status s = fresh->GetRecords(key, cut.Handler());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(cut.headers, 1);
  EXPECT_LT(cut.records.size(), info->chunks.size());
  (*again)->Stop();  // joins the server's threads: the drop is counted
  EXPECT_EQ(faulty.counters().drops, 1) << s.ToString();
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
