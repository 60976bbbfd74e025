// The connector with paged caches and its receiving side: a request's KV
// streamed from an engine's pages (whole or while it is produced) arrives
// as the frame of the same contiguous KV; ReceiveKv decodes it into the
// receiver's own pages or view; a destination callback's refusal, a corrupt
// record or an incomplete frame is reported as refused with the connection
// still usable; a producer that breaks the layer order fails the transfer.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "connector/connector_test_util.h"
#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/paged.h"
#include "pipeline/paged_test_util.h"

namespace kvserve {
namespace {

using connectortest::Kind;
using connectortest::MakePair;

class KvReceiverTest : public ::testing::TestWithParam<Kind> {};
using testing::MakePagedCache;
using testing::PagedTestCache;
using testing::RandomKv;

std::unique_ptr<EncoderContext> NewEncoder(const std::string& spec) {
  auto encoder = EncoderContext::Create(*Profile::Parse(spec), {.threads = 1});
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  return std::move(*encoder);
}

std::vector<uint8_t> EncodeWhole(const std::string& spec, const KvView& kv) {
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  EXPECT_TRUE(NewEncoder(spec)->Encode(kv, sink).ok());
  return frame;
}

// Receives one frame with ReceiveKv into `pages` on a thread of its own.
struct PagedReceiver {
  explicit PagedReceiver(Connection* connection, const PagedTestCache* pages) {
    thread = std::thread([this, connection, pages] {
      auto decoder = DecoderContext::Create({.threads = 2});
      result = ReceiveKv(
          *connection, **decoder,
          [pages, this](uint64_t id, const FrameInfo& info) -> Result<KvDestination> {
            transfer_id = id;
            if (!(info.shape == pages->shape)) return Status::InvalidArgument("shape");
            return KvDestination(pages->mutable_view());
          },
          {.refused = &refused}, 5);
    });
  }
  ~PagedReceiver() { Join(); }
  void Join() {
    if (thread.joinable()) thread.join();
  }
  std::thread thread;
  Result<KvReceiveResult> result = Status::Internal("unset");
  uint64_t transfer_id = 0;
  bool refused = false;
};

TEST_P(KvReceiverTest, PagedStreamsArriveAsTheContiguousFrame) {
  std::mt19937 rng(8001);
  for (PagedLayout layout : {PagedLayout::kVllm, PagedLayout::kFlashInferHnd}) {
    for (const char* spec : {"none", "kivi-2"}) {
      SCOPED_TRACE(std::string(PagedLayoutName(layout)) + " " + spec);
      const KvShape shape{3, 2, 150 + static_cast<int>(rng() % 150), 64};
      const KvCache kv = RandomKv(rng, shape, DType::kBF16);
      PagedTestCache sender_pages = MakePagedCache(rng, layout, DType::kBF16, shape, 16);
      ASSERT_TRUE(CopyToPages(kv.view(), sender_pages.mutable_view()).ok());
      const std::vector<uint8_t> frame = EncodeWhole(spec, kv.view());
      KvCache expected(DType::kBF16, shape);
      ASSERT_TRUE((*DecoderContext::Create())->Decode(frame, expected.mutable_view()).ok());

      for (bool produced : {false, true}) {
        auto pair = MakePair(GetParam());
        ASSERT_TRUE(pair);
        PagedTestCache receiver_pages =
            MakePagedCache(rng, PagedLayout::kVllmBlockFirst, DType::kBF16, shape, 32);
        PagedReceiver receiver(pair->receiver.get(), &receiver_pages);
        auto encoder = NewEncoder(spec);
        const uint64_t id = rng();
        int layers_done = 0;
        Result<StreamResult> sent =
            produced ? StreamKvWhileProducing(*pair->sender, *encoder, sender_pages.view(), id,
                                              [&](const std::function<void(int)>& layer_done) {
                                                for (int l = 0; l < shape.layers; ++l) {
                                                  layer_done(l);
                                                  ++layers_done;
                                                }
                                                return Status::Ok();
                                              })
                     : StreamKv(*pair->sender, *encoder, sender_pages.view(), id);
        ASSERT_TRUE(sent.ok()) << sent.status().ToString();
        receiver.Join();
        ASSERT_TRUE(receiver.result.ok()) << receiver.result.status().ToString();
        EXPECT_FALSE(receiver.refused);
        EXPECT_EQ(receiver.transfer_id, id);
        EXPECT_EQ(sent->transfer.frame_bytes, frame.size());
        EXPECT_EQ(receiver.result->records, receiver.result->info.chunk_count);
        EXPECT_EQ(layers_done, produced ? shape.layers : 0);
        KvCache got(DType::kBF16, shape);
        ASSERT_TRUE(CopyFromPages(receiver_pages.view(), got.mutable_view()).ok());
        EXPECT_EQ(0, std::memcmp(got.bytes(), expected.bytes(), got.size_bytes()));
      }
    }
  }
}

TEST_P(KvReceiverTest, PagedProducerOutOfOrderFailsTheTransfer) {
  std::mt19937 rng(8002);
  const KvShape shape{4, 2, 40, 64};
  PagedTestCache pages = MakePagedCache(rng, PagedLayout::kVllm, DType::kF16, shape, 16);
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    auto pair = MakePair(GetParam());
    ASSERT_TRUE(pair);
    Result<TransferStats> received = Status::Internal("unset");
    std::thread receiver([&] {
      FrameHandler accept_all;
      accept_all.on_header = [](uint64_t, std::span<const uint8_t>) { return Status::Ok(); };
      accept_all.on_record = [](std::span<const uint8_t>) { return Status::Ok(); };
      received = ReceiveFrame(*pair->receiver, accept_all, 5);
    });
    auto encoder = NewEncoder("none");
    int calls = 0;
    auto sent =
        StreamKvWhileProducing(*pair->sender, *encoder, pages.view(), rng(),
                               [&](const std::function<void(int)>& layer_done) {
                                 for (int l = 0; l < shape.layers; ++l) {
                                   if (variant == 0 && l == 2) continue;        // a skipped layer
                                   layer_done(variant == 1 && l == 1 ? 3 : l);  // one out of order
                                   ++calls;
                                 }
                                 if (variant == 2) layer_done(shape.layers);  // one too many
                                 return Status::Ok();
                               });
    receiver.join();
    ASSERT_FALSE(sent.ok());
    EXPECT_EQ(sent.status().code(), StatusCode::kInternal) << sent.status().ToString();
    EXPECT_FALSE(received.ok());  // the receiver never saw a complete frame
  }
}

TEST_P(KvReceiverTest, RefusalsLeaveTheConnectionUsable) {
  std::mt19937 rng(8003);
  const KvShape shape{2, 2, 64, 64};
  const KvCache kv = RandomKv(rng, shape, DType::kF32);
  auto pair = MakePair(GetParam());
  ASSERT_TRUE(pair);
  std::vector<uint8_t> frame = EncodeWhole("kivi-2", kv.view());
  auto info = InspectFrame(frame);
  ASSERT_TRUE(info.ok());
  std::vector<uint8_t> corrupt = frame;
  corrupt[info->chunks[1].offset + info->chunks[1].size / 2] ^= 0x10;
  // Refused by the callback, a record failing its checksum, then a good frame.
  std::vector<std::pair<Status, bool>> outcomes;
  KvCache out(DType::kF32, shape);
  std::vector<uint8_t> mask;
  std::thread receiver([&] {
    auto decoder = DecoderContext::Create({.threads = 1});
    for (int i = 0; i < 3; ++i) {
      bool refused = false;
      auto r = ReceiveKv(
          *pair->receiver, **decoder,
          [&, i](uint64_t, const FrameInfo&) -> Result<KvDestination> {
            if (i == 0) return Status::ResourceExhausted("no room");
            return KvDestination(out.mutable_view());
          },
          {.keep_mask = &mask, .refused = &refused}, 5);
      outcomes.emplace_back(r.status(), refused);
    }
  });
  for (int i = 0; i < 3; ++i) {
    auto sent = StreamFrame(*pair->sender, i == 1 ? corrupt : frame, 100 + i);
    if (i < 2) {
      ASSERT_FALSE(sent.ok());
    } else {
      ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    }
  }
  receiver.join();
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].first.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(outcomes[0].second);
  EXPECT_EQ(outcomes[1].first.code(), StatusCode::kCorruption);
  EXPECT_TRUE(outcomes[1].second);
  EXPECT_TRUE(outcomes[2].first.ok()) << outcomes[2].first.ToString();
  EXPECT_FALSE(outcomes[2].second);
  KvCache expected(DType::kF32, shape);
  ASSERT_TRUE((*DecoderContext::Create())->Decode(frame, expected.mutable_view()).ok());
  EXPECT_EQ(0, std::memcmp(out.bytes(), expected.bytes(), out.size_bytes()));
  EXPECT_EQ(mask.size(), static_cast<size_t>(shape.NumElements() / shape.head_dim));
}

}  // namespace
INSTANTIATE_TEST_SUITE_P(Transports, KvReceiverTest, ::testing::ValuesIn(transporttest::AllKinds()),
                         transporttest::KindName);

}  // namespace kvserve
