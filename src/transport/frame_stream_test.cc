// Layer-wise streaming over a Connection: a frame encoded layer by layer
// through FrameSender::sink arrives record by record and decodes to exactly
// what one-shot decoding of the same frame gives; goodput is reported; a
// corrupted record is refused by the receiver, reported to the sender, and a
// retry on the same connection succeeds; a transport fault mid-transfer
// fails both sides clearly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/transport.h"
#include "transport/transport_test_util.h"

namespace kvserve {
namespace {

using transporttest::Kind;

KvCache RandomCache(std::mt19937& rng, KvShape shape) {
  KvCache cache(DType::kF32, shape);
  std::normal_distribution<float> normal(0.f, 1.f);
  float* p = reinterpret_cast<float*>(cache.bytes());
  for (int64_t i = 0; i < shape.NumElements(); ++i) p[i] = normal(rng);
  return cache;
}

// The one-shot kivi-2 frame of `cache`.
std::vector<uint8_t> Kivi2Frame(const KvCache& cache) {
  auto enc = EncoderContext::Create(*Profile::Parse("kivi-2"), {.threads = 1});
  EXPECT_TRUE(enc.ok());
  std::vector<uint8_t> frame;
  VectorSink vs(&frame);
  EXPECT_TRUE(enc.ok() && (*enc)->Encode(cache.view(), vs).ok());
  return frame;
}

// The one-shot kivi-2 frame of a seeded random cache, with its index and
// the bytes before its first record (its header).
struct TestFrame {
  std::vector<uint8_t> bytes;
  FrameInfo info;
  size_t header = 0;
};

TestFrame MakeTestFrame(uint32_t seed, KvShape shape) {
  std::mt19937 rng(seed);
  TestFrame f;
  f.bytes = Kivi2Frame(RandomCache(rng, shape));
  auto info = InspectFrame(f.bytes);
  EXPECT_TRUE(info.ok() && !info->chunks.empty());
  if (info.ok() && !info->chunks.empty()) {
    f.info = *info;
    f.header = info->chunks.front().offset;
  }
  return f;
}

struct Goodput {
  std::mutex mu;
  std::vector<std::tuple<std::string, double, double>> samples;
};

struct Link {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<FaultInjectingTransport> faulty;
  std::unique_ptr<Connection> sender, receiver;
};

// A sender and a receiver connection over `kind` (256 KiB of buffering:
// loopback pipe capacity, UCX window), through a fault-injecting wrapper.
Link MakeLink(Kind kind, Goodput* goodput, FaultPlan plan = {}) {
  Link link;
  link.transport = transporttest::MakeTransport(kind, 256 * 1024);
  link.faulty = std::make_unique<FaultInjectingTransport>(link.transport.get());
  link.faulty->SetConnectPlan(plan);
  ConnectionOptions o;
  o.secret = "pd-secret";
  o.io_timeout_seconds = 5;
  auto listener = link.faulty->Listen(kind == Kind::kLoopback ? "decode" : "127.0.0.1:0");
  EXPECT_TRUE(listener.ok());
  ConnectionOptions server_options = o;
  server_options.local_id = "decode-0";
  std::thread t([&] {
    auto c = Connection::Accept(**listener, server_options, 5);
    EXPECT_TRUE(c.ok());
    if (c.ok()) link.receiver = std::move(*c);
  });
  o.local_id = "prefill-0";
  o.goodput = [goodput](std::string_view peer, double bytes, double seconds) {
    std::lock_guard<std::mutex> lock(goodput->mu);
    goodput->samples.emplace_back(std::string(peer), bytes, seconds);
  };
  auto c = Connection::Dial(*link.faulty, (*listener)->Address(), o);
  t.join();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) link.sender = std::move(*c);
  return link;
}

// Receives one frame, decoding records as they arrive.
struct StreamingDecoder {
  std::unique_ptr<DecoderContext> decoder = std::move(DecoderContext::Create({.threads = 1})).value();
  KvCache out;
  int records = 0;
  FrameHandler Handler() {
    FrameHandler h;
    h.on_header = [this](uint64_t, std::span<const uint8_t> header) -> Status {
      KVSERVE_ASSIGN_OR_RETURN(size_t used, decoder->Start(header));
      if (used != header.size()) return Status::Corruption("header length mismatch");
      out = KvCache(decoder->info().dtype, decoder->info().shape);
      records = 0;
      return Status::Ok();
    };
    h.on_record = [this](std::span<const uint8_t> record) -> Status {
      KVSERVE_ASSIGN_OR_RETURN(size_t used, decoder->DecodeRecord(record, out.mutable_view()));
      if (used != record.size()) return Status::Corruption("record length mismatch");
      ++records;
      return Status::Ok();
    };
    return h;
  }
};

class FrameStreamTest : public ::testing::TestWithParam<Kind> {};

TEST_P(FrameStreamTest, LayerwiseStreamDecodesLikeOneShot) {
  std::mt19937 rng(5);
  const KvShape shape{4, 2, 96, 64};
  KvCache cache = RandomCache(rng, shape);
  for (const char* preset : {"kivi-2", "cachegen"}) {
    auto profile = Profile::Parse(preset);
    ASSERT_TRUE(profile.ok()) << profile.status().ToString();
    // One-shot reference.
    auto enc = EncoderContext::Create(*profile, {.threads = 1});
    ASSERT_TRUE(enc.ok());
    std::vector<uint8_t> frame;
    VectorSink vs(&frame);
    ASSERT_TRUE((*enc)->Encode(cache.view(), vs).ok());
    auto dec = DecoderContext::Create({.threads = 1});
    KvCache expected(DType::kF32, shape);
    ASSERT_TRUE((*dec)->Decode(frame, expected.mutable_view()).ok());

    Goodput goodput;
    Link link = MakeLink(GetParam(), &goodput);
    ASSERT_TRUE(link.sender && link.receiver);
    StreamingDecoder sd;
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] { received = ReceiveFrame(*link.receiver, sd.Handler(), 5); });
    FrameSender sender(link.sender.get());
    ByteSink& sink = sender.sink(42);
    ASSERT_TRUE((*enc)->Begin(shape, DType::kF32, sink).ok());
    for (int l = shape.layers - 1; l >= 0; --l)  // any layer order
      ASSERT_TRUE((*enc)->EncodeLayer(l, cache.view()).ok());
    ASSERT_TRUE((*enc)->Finish().ok());
    auto stats = sender.Finish();
    receiver.join();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_TRUE(received.ok()) << received.status().ToString();
    EXPECT_EQ(stats->transfer_id, 42u);
    EXPECT_EQ(received->transfer_id, 42u);
    EXPECT_EQ(stats->frame_bytes, frame.size());
    EXPECT_EQ(received->frame_bytes, frame.size());
    EXPECT_EQ(static_cast<uint64_t>(sd.records), sd.decoder->info().chunk_count);
    EXPECT_EQ(std::memcmp(sd.out.bytes(), expected.bytes(), expected.size_bytes()), 0) << preset;
    std::lock_guard<std::mutex> lock(goodput.mu);
    ASSERT_EQ(goodput.samples.size(), 1u);
    EXPECT_EQ(std::get<0>(goodput.samples[0]), "decode-0");
    EXPECT_EQ(std::get<1>(goodput.samples[0]), static_cast<double>(stats->wire_bytes));
    EXPECT_GT(std::get<2>(goodput.samples[0]), 0.0);
  }
}

// With place_record, records are read into the handler's memory back to
// back; once one does not fit, it and the rest arrive in the connection's
// buffer. Either way the decoded cache equals one-shot decoding.
TEST_P(FrameStreamTest, PlacedRecordsLandInCallerMemory) {
  const KvShape shape{3, 2, 128, 64};
  const TestFrame test = MakeTestFrame(17, shape);
  ASSERT_GT(test.header, 0u);
  const std::vector<uint8_t>& frame = test.bytes;
  const FrameInfo* info = &test.info;
  const size_t header = test.header;
  const size_t records_bytes = frame.size() - header;
  for (size_t capacity : {records_bytes, records_bytes / 2}) {
    Goodput goodput;
    Link link = MakeLink(GetParam(), &goodput);
    ASSERT_TRUE(link.sender && link.receiver);
    StreamingDecoder sd;
    FrameHandler h = sd.Handler();
    std::vector<uint8_t> arena(capacity);
    size_t used = 0, placed = 0, inside = 0;
    h.place_record = [&](uint64_t length) -> std::span<uint8_t> {
      if (used + length > arena.size()) return {};
      ++placed;
      std::span<uint8_t> out(arena.data() + used, length);
      used += length;
      return out;
    };
    auto decode = h.on_record;
    h.on_record = [&](std::span<const uint8_t> record) {
      if (record.data() >= arena.data() && record.data() < arena.data() + arena.size()) ++inside;
      return decode(record);
    };
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] { received = ReceiveFrame(*link.receiver, h, 5); });
    FrameSender sender(link.sender.get());
    ASSERT_TRUE(sender.sink(3).Append(frame).ok());
    auto stats = sender.Finish();
    receiver.join();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_TRUE(received.ok()) << received.status().ToString();
    EXPECT_EQ(placed, inside);
    if (capacity == records_bytes) {
      EXPECT_EQ(placed, info->chunk_count);
      EXPECT_TRUE(std::equal(arena.begin(), arena.end(), frame.begin() + static_cast<long>(header)));
    } else {
      EXPECT_GT(placed, 0u);
      EXPECT_LT(placed, info->chunk_count);
    }
    KvCache expected(DType::kF32, shape);
    auto dec = DecoderContext::Create({.threads = 1});
    ASSERT_TRUE((*dec)->Decode(frame, expected.mutable_view()).ok());
    EXPECT_EQ(std::memcmp(sd.out.bytes(), expected.bytes(), expected.size_bytes()), 0);
  }
}

// Splits a frame at random points (the sink must not care how Append is
// chunked) and corrupts one record body before sending.
TEST_P(FrameStreamTest, CorruptedRecordIsRefusedAndRetrySucceeds) {
  std::mt19937 rng(9);
  const KvShape shape{3, 2, 64, 64};
  KvCache cache = RandomCache(rng, shape);
  auto profile = Profile::Parse("kivi-2");
  auto enc = EncoderContext::Create(*profile, {.threads = 1});
  std::vector<uint8_t> frame;
  VectorSink vs(&frame);
  ASSERT_TRUE((*enc)->Encode(cache.view(), vs).ok());
  auto info = InspectFrame(frame);
  ASSERT_TRUE(info.ok());

  Goodput goodput;
  Link link = MakeLink(GetParam(), &goodput);
  FrameSender sender(link.sender.get());
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<uint8_t> bytes = frame;
    if (attempt == 0) {
      const ChunkEntry& e = info->chunks[info->chunks.size() / 2];
      bytes[e.offset + e.size / 2] ^= 0x40;  // inside a record body
    }
    StreamingDecoder sd;
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] { received = ReceiveFrame(*link.receiver, sd.Handler(), 5); });
    ByteSink& sink = sender.sink(attempt);
    for (size_t pos = 0; pos < bytes.size();) {
      size_t n = std::min(bytes.size() - pos, std::uniform_int_distribution<size_t>(1, 5000)(rng));
      ASSERT_TRUE(sink.Append(std::span<const uint8_t>(bytes).subspan(pos, n)).ok());
      pos += n;
    }
    auto stats = sender.Finish();
    receiver.join();
    if (attempt == 0) {
      ASSERT_FALSE(stats.ok());
      EXPECT_EQ(stats.status().code(), StatusCode::kCorruption) << stats.status().ToString();
      EXPECT_EQ(received.status().code(), StatusCode::kCorruption);
    } else {
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      ASSERT_TRUE(received.ok());
      EXPECT_EQ(static_cast<uint64_t>(sd.records), info->chunk_count);
    }
  }
}

TEST_P(FrameStreamTest, DroppedConnectionFailsBothSides) {
  std::mt19937 rng(13);
  const KvShape shape{2, 2, 64, 64};
  KvCache cache = RandomCache(rng, shape);
  const std::vector<uint8_t> frame = Kivi2Frame(cache);
  for (int64_t cut : {int64_t{300}, static_cast<int64_t>(frame.size() / 2)}) {
    Goodput goodput;
    FaultPlan plan;
    plan.drop_after_bytes = 200 + cut;  // handshake bytes, then part of the frame
    Link link = MakeLink(GetParam(), &goodput, plan);
    StreamingDecoder sd;
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] { received = ReceiveFrame(*link.receiver, sd.Handler(), 5); });
    FrameSender sender(link.sender.get());
    Status s = sender.sink(1).Append(frame);
    Result<TransferStats> stats = s.ok() ? sender.Finish() : Result<TransferStats>(s);
    receiver.join();
    EXPECT_FALSE(stats.ok());
    EXPECT_FALSE(received.ok());
    EXPECT_EQ(received.status().code(), StatusCode::kUnavailable) << received.status().ToString();
    EXPECT_TRUE(goodput.samples.empty());
  }
}

// End then AwaitAck: a second transfer goes out before the first one's
// ack is read; both arrive whole, their acks come back in order, and the
// calls out of turn are refused.
TEST_P(FrameStreamTest, EndLetsTheNextTransferGoBeforeTheAck) {
  std::mt19937 rng(31);
  const KvShape shape{2, 2, 64, 64};
  const std::vector<uint8_t> first = Kivi2Frame(RandomCache(rng, shape));
  const std::vector<uint8_t> second = Kivi2Frame(RandomCache(rng, shape));
  Goodput goodput;
  Link link = MakeLink(GetParam(), &goodput);
  StreamingDecoder a, b;
  Result<TransferStats> got_a = Status::Internal("unset"), got_b = Status::Internal("unset");
  std::thread receiver([&] {
    got_a = ReceiveFrame(*link.receiver, a.Handler(), 5);
    got_b = ReceiveFrame(*link.receiver, b.Handler(), 5);
  });
  FrameSender one(link.sender.get()), two(link.sender.get());
  EXPECT_EQ(one.AwaitAck().status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(one.sink(1).Append(first).ok());
  ASSERT_TRUE(one.End().ok());
  EXPECT_EQ(one.Begin(3, first).code(), StatusCode::kInvalidArgument);  // its ack is pending
  ASSERT_TRUE(two.sink(2).Append(second).ok());
  ASSERT_TRUE(two.End().ok());
  auto ack_one = one.AwaitAck();
  auto ack_two = two.AwaitAck();
  receiver.join();
  ASSERT_TRUE(ack_one.ok()) << ack_one.status().ToString();
  ASSERT_TRUE(ack_two.ok()) << ack_two.status().ToString();
  EXPECT_EQ(ack_one->transfer_id, 1u);
  EXPECT_EQ(ack_two->transfer_id, 2u);
  EXPECT_EQ(ack_one->frame_bytes, first.size());
  EXPECT_EQ(ack_two->frame_bytes, second.size());
  ASSERT_TRUE(got_a.ok() && got_b.ok());
  EXPECT_EQ(got_a->transfer_id, 1u);
  EXPECT_EQ(got_b->transfer_id, 2u);
  EXPECT_EQ(static_cast<uint64_t>(a.records), InspectFrame(first)->chunk_count);
  EXPECT_EQ(static_cast<uint64_t>(b.records), InspectFrame(second)->chunk_count);
  EXPECT_EQ(goodput.samples.size(), 2u);
}

TEST_P(FrameStreamTest, SenderAbortReachesReceiver) {
  Goodput goodput;
  Link link = MakeLink(GetParam(), &goodput);
  Result<TransferStats> received = Status::Internal("unset");
  std::thread receiver([&] { received = ReceiveFrame(*link.receiver, {}, 5); });
  FrameSender sender(link.sender.get());
  std::vector<uint8_t> header = {1, 2, 3};
  ASSERT_TRUE(sender.Begin(7, header).ok());
  ASSERT_TRUE(sender.Abort(Status::Internal("encoder failed")).ok());
  receiver.join();
  ASSERT_FALSE(received.ok());
  EXPECT_NE(received.status().message().find("aborted by sender"), std::string::npos);
  EXPECT_NE(received.status().message().find("encoder failed"), std::string::npos);
}

// Lanes: the records of a frame striped over 3 connections arrive in order
// (placed back to back, decoded as one-shot decoding gives), the lanes
// carried about equal bytes, and one goodput sample covers them all; an abort
// reaches the receiver on every lane and the lanes stay usable; a lane
// that breaks fails both sides instead of leaving a reader blocked.
TEST_P(FrameStreamTest, LanesStripeRecordsInOrder) {
  const KvShape shape{4, 2, 160, 64};
  const TestFrame test = MakeTestFrame(23, shape);
  ASSERT_GT(test.header, 0u);
  std::mt19937 rng(24);  // the pieces the frame is appended in
  const std::vector<uint8_t>& frame = test.bytes;
  const FrameInfo* info = &test.info;
  const size_t header = test.header;
  KvCache expected(DType::kF32, shape);
  ASSERT_TRUE((*DecoderContext::Create({.threads = 1}))->Decode(frame, expected.mutable_view()).ok());

  Goodput goodput;
  std::vector<Link> links;
  for (int i = 0; i < 3; ++i) links.push_back(MakeLink(GetParam(), &goodput));
  for (const Link& l : links) ASSERT_TRUE(l.sender && l.receiver);
  std::vector<Connection*> send_lanes{links[1].sender.get(), links[2].sender.get()};
  std::vector<Connection*> receive_lanes{links[1].receiver.get(), links[2].receiver.get()};
  FrameSender sender(links[0].sender.get(), send_lanes);
  for (int attempt = 0; attempt < 3; ++attempt) {
    StreamingDecoder sd;
    FrameHandler h = sd.Handler();
    std::vector<uint8_t> arena(frame.size() - header);
    size_t used = 0;
    h.place_record = [&](uint64_t length) {
      std::span<uint8_t> out(arena.data() + used, length);
      used += length;
      return out;
    };
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] { received = ReceiveFrame(*links[0].receiver, h, 5, receive_lanes); });
    ByteSink& sink = sender.sink(attempt);
    const size_t stop_at = attempt == 1 ? frame.size() / 2 : frame.size();
    for (size_t pos = 0; pos < stop_at;) {
      size_t n = std::min(stop_at - pos, std::uniform_int_distribution<size_t>(1, 40000)(rng));
      ASSERT_TRUE(sink.Append(std::span<const uint8_t>(frame).subspan(pos, n)).ok());
      pos += n;
    }
    if (attempt == 1) {  // gives up half way
      ASSERT_TRUE(sender.Abort(Status::Internal("encoder failed")).ok());
      receiver.join();
      ASSERT_FALSE(received.ok());
      EXPECT_NE(received.status().message().find("aborted by sender"), std::string::npos)
          << received.status().ToString();
      continue;
    }
    auto stats = sender.Finish();
    receiver.join();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_TRUE(received.ok()) << received.status().ToString();
    EXPECT_EQ(received->records, info->chunk_count);
    EXPECT_EQ(received->frame_bytes, frame.size());
    EXPECT_EQ(static_cast<uint64_t>(sd.records), info->chunk_count);
    EXPECT_TRUE(std::equal(arena.begin(), arena.end(), frame.begin() + static_cast<long>(header)));
    EXPECT_EQ(std::memcmp(sd.out.bytes(), expected.bytes(), expected.size_bytes()), 0);
  }
  // The lanes shared the bytes: each carried at least 0.8 of an equal share.
  uint64_t total = 0;
  for (const Link& l : links) total += l.receiver->stats().bytes_received;
  for (const Link& l : links)
    EXPECT_GT(l.receiver->stats().bytes_received, total / 3 * 8 / 10) << "lanes out of balance";
  std::lock_guard<std::mutex> lock(goodput.mu);
  EXPECT_EQ(goodput.samples.size(), 2u);  // one per finished transfer, lanes together
}

TEST_P(FrameStreamTest, ABrokenLaneFailsBothSides) {
  std::mt19937 rng(29);
  const KvShape shape{3, 2, 128, 64};
  KvCache cache = RandomCache(rng, shape);
  const std::vector<uint8_t> frame = Kivi2Frame(cache);
  Goodput goodput;
  std::vector<Link> links;
  for (int i = 0; i < 2; ++i) links.push_back(MakeLink(GetParam(), &goodput));
  std::vector<Connection*> receive_lanes{links[1].receiver.get()};
  StreamingDecoder sd;
  Result<TransferStats> received = Status::Internal("unset");
  std::thread receiver([&] { received = ReceiveFrame(*links[0].receiver, sd.Handler(), 5, receive_lanes); });
  FrameSender sender(links[0].sender.get(), {links[1].sender.get()});
  ASSERT_TRUE(sender.sink(1).Append(std::span<const uint8_t>(frame).first(frame.size() / 2)).ok());
  links[1].sender->Close();  // the second lane goes down mid-transfer
  Status s = sender.sink(1).Append(std::span<const uint8_t>(frame).subspan(frame.size() / 2));
  Result<TransferStats> stats = s.ok() ? sender.Finish() : Result<TransferStats>(s);
  receiver.join();
  EXPECT_FALSE(stats.ok());
  ASSERT_FALSE(received.ok());
  // The peer's end closed (Unavailable) or, where the close does not reach
  // it, the lane's io timeout.
  EXPECT_TRUE(received.status().code() == StatusCode::kUnavailable ||
              received.status().code() == StatusCode::kTimeout)
      << received.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Transports, FrameStreamTest,
                         ::testing::ValuesIn(transporttest::AllKinds()), transporttest::KindName);

}  // namespace
}  // namespace kvserve
