// Memory from real bytes (docs/format.md §7): a decoder entry point given a
// header that declares a huge cache, with few or no records behind it, must
// not allocate in proportion to what the header declares. Each entry point
// (InspectFrame, DecoderContext::Start / Decode / DecodeRecord) is run on
// seeded hostile headers of at most 100 bytes, alone and followed by a few
// real records, with every heap allocation of this binary counted
// (tests/alloc_meter.h): the peak stays within kilobytes plus a small
// multiple of the bytes actually given.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "alloc_meter.h"
#include "hostile_frame.h"
#include "kvserve/codec.h"
#include "kvserve/kv.h"

namespace kvserve {
namespace {

using testing::AllocMeter;
using testing::HostileHeader;
using testing::RawRecord;

// What a header alone may cost any entry point.
constexpr int64_t kHeaderBudget = 16 << 10;

// Seeded shapes within the format's limits whose plan has between 2^20 and
// 2^31 records (the largest record count a u32 header field can state is
// below 2^32).
std::vector<KvShape> HostileShapes(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<KvShape> shapes;
  while (static_cast<int>(shapes.size()) < n) {
    KvShape s{static_cast<int>(1 + rng() % 1024), static_cast<int>(1 + rng() % 1024),
              static_cast<int>(1 + rng() % (1u << 24)), static_cast<int>(1 + rng() % 1024)};
    const int64_t records = pipeline::RecordsPerLayer(s, 16, 0) * s.layers;
    if (records < (int64_t{1} << 20) || records > (int64_t{1} << 31)) continue;
    shapes.push_back(s);
  }
  return shapes;
}

std::string Describe(const KvShape& s) {
  return std::to_string(s.layers) + "x" + std::to_string(s.kv_heads) + "x" +
         std::to_string(s.tokens) + "x" + std::to_string(s.head_dim);
}

TEST(DecoderMemory, HostileHeaderCostsKilobytesInEveryEntryPoint) {
  // The case first: ~2*10^8 records declared by an 86-byte header;
  // then the most a header can declare (2^31 records, 128 GiB of f32).
  std::vector<KvShape> shapes = {KvShape{100, 1, 1 << 24, 1}, KvShape{1024, 1, 1 << 24, 1}};
  for (const KvShape& s : HostileShapes(24, 17)) shapes.push_back(s);
  for (const KvShape& shape : shapes) {
    SCOPED_TRACE(Describe(shape));
    const std::vector<uint8_t> header = HostileHeader(shape);
    ASSERT_LE(header.size(), 100u);
    {
      AllocMeter meter;
      EXPECT_FALSE(InspectFrame(header).ok());
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget) << "InspectFrame";
    }
    {
      AllocMeter meter;
      auto decoded = DecodeFrame(header, uint64_t{1} << 62, {.threads = 1});
      EXPECT_EQ(decoded.status().code(), StatusCode::kCorruption);
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget) << "DecodeFrame";
    }
    auto decoder = DecoderContext::Create({.threads = 1});
    ASSERT_TRUE(decoder.ok());
    {
      AllocMeter meter;
      auto used = (*decoder)->Start(header);
      ASSERT_TRUE(used.ok()) << used.status().ToString();  // a valid header
      EXPECT_EQ(*used, header.size());
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget) << "Start";
    }
    {
      // Decode of the header alone: the caller has no output to offer.
      float dummy[1] = {0};
      MutableKvView none{reinterpret_cast<std::byte*>(dummy), DType::kF32, KvShape{1, 1, 1, 1},
                         KvStrides::Contiguous(KvShape{1, 1, 1, 1})};
      AllocMeter meter;
      EXPECT_FALSE((*decoder)->Decode(header, none).ok());
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget) << "Decode";
    }
  }
}

TEST(DecoderMemory, FewRecordsBehindAHugeHeaderCostWhatTheyWeigh) {
  for (const KvShape& shape : HostileShapes(12, 18)) {
    SCOPED_TRACE(Describe(shape));
    if (static_cast<int64_t>(shape.kv_heads) * 16 * shape.head_dim * 4 > (1 << 20)) continue;
    std::vector<uint8_t> frame = HostileHeader(shape);
    // The first three slots of the plan: layer 0, K, tokens 0, 16, 32.
    for (int i = 0; i < 3 && 16 * i < shape.tokens; ++i) {
      const int tokens = std::min(16, shape.tokens - 16 * i);
      auto record = RawRecord(shape, DType::kF32, 0, 0, 16 * i, tokens);
      frame.insert(frame.end(), record.begin(), record.end());
    }
    const int64_t given = static_cast<int64_t>(frame.size());
    {
      AllocMeter meter;
      EXPECT_FALSE(InspectFrame(frame).ok());
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget + 2 * given) << "InspectFrame";
    }
    {
      AllocMeter meter;
      EXPECT_FALSE(DecodeFrame(frame, uint64_t{1} << 62, {.threads = 1}).ok());
      EXPECT_LE(meter.peak_bytes(), kHeaderBudget + 2 * given) << "DecodeFrame";
    }
  }
}

// Streaming: the records a receiver has seen are remembered, not the ones a
// header declares. A cache of 1 layer x 1 head x 2^24 tokens x 1 dim (2^20
// records of 16 tokens; 64 MiB of f32 the caller provides): decoding its
// first records costs the decoder a few bytes per record.
TEST(DecoderMemory, StreamingDecoderRemembersOnlyTheRecordsItGot) {
  const KvShape shape{1, 1, 1 << 24, 1};
  const std::vector<uint8_t> header = HostileHeader(shape);
  KvCache out(DType::kF32, shape);
  auto decoder = DecoderContext::Create({.threads = 1});
  ASSERT_TRUE(decoder.ok());
  ASSERT_TRUE((*decoder)->Start(header).ok());
  std::mt19937 rng(5);
  AllocMeter meter;
  for (int i = 0; i < 64; ++i) {
    const int token = static_cast<int>(rng() % (shape.tokens / 16)) * 16;
    auto record = RawRecord(shape, DType::kF32, 0, static_cast<int>(rng() % 2), token, 16,
                            static_cast<uint8_t>(i));
    auto used = (*decoder)->DecodeRecord(record, out.mutable_view());
    if (!used.ok()) {
      EXPECT_EQ(used.status().message(), "duplicate chunk record");
      continue;
    }
    EXPECT_EQ(*used, record.size());
  }
  EXPECT_LE(meter.peak_bytes(), kHeaderBudget) << "64 records";
}

}  // namespace
}  // namespace kvserve
