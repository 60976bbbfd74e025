// Streaming a KV cache while it is produced (StreamKvWhileProducing): the
// frame a receiver gets equals what StreamKv of the finished cache sends,
// whatever the producer's strides, so a lossless profile decodes to the
// producer's bytes; a producer that fails, delivers a layer that does not
// match the declared shape, or delivers too few or too many layers makes the
// call fail and leaves the receiver without a complete frame; a receiver's
// refusal still lets the producer run to completion.
#include "kvserve/connector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/transport.h"
#include "connector/connector_test_util.h"

namespace kvserve {
namespace {

using connectortest::Kind;
using connectortest::MakePair;

class KvStreamerTest : public ::testing::TestWithParam<Kind> {};

// Receives one frame on its own thread, keeping the frame's bytes and
// decoding each record as it arrives.
class Receiver {
 public:
  explicit Receiver(Connection* connection) {
    thread_ =
        std::thread([this, connection] { result_ = ReceiveFrame(*connection, Handler(), 5); });
  }
  ~Receiver() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Joins first.
  const Result<TransferStats>& result() {
    Join();
    return result_;
  }
  // True when the whole frame arrived, every record decoded and the
  // transfer was acknowledged as complete.
  bool Complete() {
    Join();
    return result_.ok() && started_ &&
           static_cast<uint64_t>(records_) == decoder_->info().chunk_count;
  }
  const KvCache& cache() const { return cache_; }
  const std::vector<uint8_t>& frame() const { return frame_; }
  int records() const { return records_; }

 private:
  FrameHandler Handler() {
    FrameHandler h;
    h.on_header = [this](uint64_t, std::span<const uint8_t> header) -> Status {
      KVSERVE_ASSIGN_OR_RETURN(size_t used, decoder_->Start(header));
      if (used != header.size()) return Status::Corruption("header length mismatch");
      cache_ = KvCache(decoder_->info().dtype, decoder_->info().shape);
      frame_.assign(header.begin(), header.end());
      started_ = true;
      return Status::Ok();
    };
    h.on_record = [this](std::span<const uint8_t> record) -> Status {
      KVSERVE_ASSIGN_OR_RETURN(size_t used, decoder_->DecodeRecord(record, cache_.mutable_view()));
      if (used != record.size()) return Status::Corruption("record length mismatch");
      frame_.insert(frame_.end(), record.begin(), record.end());
      ++records_;
      return Status::Ok();
    };
    return h;
  }

  std::unique_ptr<DecoderContext> decoder_ =
      std::move(DecoderContext::Create({.threads = 1})).value();
  KvCache cache_;
  std::vector<uint8_t> frame_;
  int records_ = 0;
  bool started_ = false;
  Result<TransferStats> result_ = Status::Internal("unset");
  std::thread thread_;
};

// A KV cache held in an engine-like strided layout: each head has room for
// more tokens than it holds (the token axis is padded) and, with
// `dim_stride` > 1, elements of a row are interleaved with other data. The
// padding holds NaNs that must never reach a frame.
struct StridedKv {
  KvShape shape;
  KvStrides strides;
  std::vector<float> storage;
  KvCache dense;  // the same elements, contiguous

  // Layer `layer` as the single-layer view a prefill hands its callback.
  KvView LayerView(int layer) const {
    KvShape one = shape;
    one.layers = 1;
    return KvView{storage.data() + layer * strides.layer, DType::kF32, one, strides};
  }
};

StridedKv RandomStridedKv(std::mt19937& rng, const KvShape& shape, int dim_stride) {
  StridedKv kv;
  kv.shape = shape;
  const int capacity = shape.tokens + 1 + static_cast<int>(rng() % 7);
  kv.strides.dim = dim_stride;
  kv.strides.token = int64_t{shape.head_dim} * dim_stride + static_cast<int64_t>(rng() % 3);
  kv.strides.head = kv.strides.token * capacity;
  kv.strides.kind = kv.strides.head * shape.kv_heads;
  kv.strides.layer = kv.strides.kind * 2;
  kv.storage.assign(static_cast<size_t>(kv.strides.layer * shape.layers), std::nanf(""));
  kv.dense = KvCache(DType::kF32, shape);
  const MutableKvView dense = kv.dense.mutable_view();
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int l = 0; l < shape.layers; ++l)
    for (int kind = 0; kind < 2; ++kind)
      for (int h = 0; h < shape.kv_heads; ++h)
        for (int t = 0; t < shape.tokens; ++t)
          for (int d = 0; d < shape.head_dim; ++d) {
            const float value = normal(rng);
            kv.storage[l * kv.strides.layer + kind * kv.strides.kind + h * kv.strides.head +
                       t * kv.strides.token + d * kv.strides.dim] = value;
            std::memcpy(dense.At(l, kind, h, t, d), &value, sizeof value);
          }
  return kv;
}

std::unique_ptr<EncoderContext> NewEncoder(const std::string& spec) {
  auto profile = Profile::Parse(spec);
  EXPECT_TRUE(profile.ok()) << spec << ": " << profile.status().ToString();
  auto encoder = EncoderContext::Create(*profile, {.threads = 1});
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  return std::move(*encoder);
}

// A producer that hands over `layers` layers of `kv` in order, then returns
// `result`; it counts its calls in *delivered.
LayerProducer Deliver(const StridedKv& kv, int layers, Status result, int* delivered) {
  return [&kv, layers, result, delivered](const LayerReadyCallback& on_layer) {
    for (int l = 0; l < layers; ++l) {
      on_layer(l, kv.LayerView(l));
      ++*delivered;
    }
    return result;
  };
}

TEST_P(KvStreamerTest, OverlappedStreamSendsTheFrameOfTheFinishedCache) {
  std::mt19937 rng(7001);
  for (const char* spec : {"none", "identity+raw+pack", "kivi-2"}) {
    for (int dim_stride : {1, 2}) {
      SCOPED_TRACE(std::string(spec) + ", dim stride " + std::to_string(dim_stride));
      // kivi-2 keeps the last 128 tokens raw and quantizes whole groups of
      // 32 before them: at least 64 tokens are quantized.
      const KvShape shape{4, 2, 200 + static_cast<int>(rng() % 50), 64};
      const StridedKv kv = RandomStridedKv(rng, shape, dim_stride);
      const uint64_t transfer_id = rng();

      // Reference: StreamKv of the finished cache.
      auto reference_pair = MakePair(GetParam());
      ASSERT_TRUE(reference_pair);
      Receiver reference(reference_pair->receiver.get());
      auto reference_encoder = NewEncoder(spec);
      auto plain = StreamKv(*reference_pair->sender, *reference_encoder, kv.dense.view(),
                                   transfer_id);
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      ASSERT_TRUE(reference.Complete()) << reference.result().status().ToString();

      auto pair = MakePair(GetParam());
      ASSERT_TRUE(pair);
      Receiver receiver(pair->receiver.get());
      auto encoder = NewEncoder(spec);
      int delivered = 0;
      auto streamed =
          StreamKvWhileProducing(*pair->sender, *encoder, shape, DType::kF32, transfer_id,
                                        Deliver(kv, shape.layers, Status::Ok(), &delivered));
      ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
      ASSERT_TRUE(receiver.Complete()) << receiver.result().status().ToString();
      EXPECT_EQ(delivered, shape.layers);
      EXPECT_EQ(receiver.result()->transfer_id, transfer_id);
      EXPECT_EQ(streamed->transfer.transfer_id, transfer_id);
      EXPECT_EQ(streamed->transfer.frame_bytes, plain->transfer.frame_bytes);
      EXPECT_GT(streamed->kv_seconds, 0);

      EXPECT_EQ(receiver.frame(), reference.frame());
      ASSERT_EQ(receiver.cache().size_bytes(), reference.cache().size_bytes());
      EXPECT_EQ(std::memcmp(receiver.cache().bytes(), reference.cache().bytes(),
                            reference.cache().size_bytes()),
                0);
      if (std::string(spec) != "kivi-2") {
        ASSERT_EQ(receiver.cache().size_bytes(), kv.dense.size_bytes());
        EXPECT_EQ(std::memcmp(receiver.cache().bytes(), kv.dense.bytes(), kv.dense.size_bytes()),
                  0);
      } else {
        // Lossy: the decoded cache is close to, but not, the source.
        EXPECT_NE(std::memcmp(receiver.cache().bytes(), kv.dense.bytes(), kv.dense.size_bytes()),
                  0);
      }
    }
  }
}

TEST_P(KvStreamerTest, FailingProducerAbortsTheTransferAndReturnsItsError) {
  std::mt19937 rng(7002);
  const KvShape shape{4, 2, 37, 64};
  // Fails before any layer, in the middle, and after the last layer: the
  // receiver must not be left with a frame of a failed prefill.
  for (int fail_after : {0, 1 + static_cast<int>(rng() % 3), shape.layers}) {
    for (const char* spec : {"none", "kivi-2"}) {
      SCOPED_TRACE(std::string(spec) + ", fails after " + std::to_string(fail_after) + " layers");
      const StridedKv kv = RandomStridedKv(rng, shape, 1);
      auto pair = MakePair(GetParam());
      ASSERT_TRUE(pair);
      Receiver receiver(pair->receiver.get());
      auto encoder = NewEncoder(spec);
      int delivered = 0;
      const std::string reason =
          "prefill ran out of memory at token " + std::to_string(rng() % 1000);
      auto streamed = StreamKvWhileProducing(
          *pair->sender, *encoder, shape, DType::kF32, rng(),
          Deliver(kv, fail_after, Status::ResourceExhausted(reason), &delivered));
      ASSERT_FALSE(streamed.ok());
      EXPECT_EQ(streamed.status().code(), StatusCode::kResourceExhausted)
          << streamed.status().ToString();
      EXPECT_NE(streamed.status().message().find(reason), std::string::npos)
          << streamed.status().ToString();
      EXPECT_EQ(delivered, fail_after);
      EXPECT_FALSE(receiver.Complete()) << receiver.records() << " records";
      EXPECT_FALSE(receiver.result().ok());
    }
  }
}

// How a producer can break the contract "one view per layer, in order, of
// the declared shape".
enum class Mismatch {
  kTokens,
  kHeads,
  kHeadDim,
  kTwoLayers,
  kDType,
  kSkippedLayer,
  kRepeatedLayer,
  kExtraLayer
};

TEST_P(KvStreamerTest, LayerThatDoesNotMatchTheShapeFailsTheTransfer) {
  std::mt19937 rng(7003);
  const KvShape shape{4, 2, 37, 64};
  for (Mismatch mismatch : {Mismatch::kTokens, Mismatch::kHeads, Mismatch::kHeadDim,
                            Mismatch::kTwoLayers, Mismatch::kDType, Mismatch::kSkippedLayer,
                            Mismatch::kRepeatedLayer, Mismatch::kExtraLayer}) {
    SCOPED_TRACE("mismatch " + std::to_string(static_cast<int>(mismatch)));
    const StridedKv kv = RandomStridedKv(rng, shape, 1);
    const int bad = static_cast<int>(rng() % shape.layers);  // the call that breaks the contract
    int calls = 0;
    LayerProducer produce = [&](const LayerReadyCallback& on_layer) {
      for (int l = 0; l < shape.layers; ++l) {
        KvView view = kv.LayerView(l);
        int index = l;
        if (l == bad) {
          switch (mismatch) {
            case Mismatch::kTokens:
              view.shape.tokens -= 1;
              break;
            case Mismatch::kHeads:
              view.shape.kv_heads -= 1;
              break;
            case Mismatch::kHeadDim:
              view.shape.head_dim /= 2;
              break;
            case Mismatch::kTwoLayers:
              view.shape.layers = 2;
              break;
            case Mismatch::kDType:
              view.dtype = DType::kF16;
              break;
            case Mismatch::kSkippedLayer:
              index = l + 1;
              break;
            case Mismatch::kRepeatedLayer:
              index = l == 0 ? 1 : l - 1;
              break;
            case Mismatch::kExtraLayer:
              break;
          }
        }
        on_layer(index, view);
        ++calls;
      }
      if (mismatch == Mismatch::kExtraLayer) {
        on_layer(shape.layers, kv.LayerView(bad));
        ++calls;
      }
      return Status::Ok();
    };
    auto pair = MakePair(GetParam());
    ASSERT_TRUE(pair);
    Receiver receiver(pair->receiver.get());
    auto encoder = NewEncoder("none");
    auto streamed =
        StreamKvWhileProducing(*pair->sender, *encoder, shape, DType::kF32, rng(), produce);
    EXPECT_FALSE(streamed.ok());
    // The producer is not cut short: its own result stays whole.
    EXPECT_EQ(calls, shape.layers + (mismatch == Mismatch::kExtraLayer ? 1 : 0));
    EXPECT_FALSE(receiver.Complete()) << receiver.records() << " records";
    EXPECT_FALSE(receiver.result().ok());
  }
}

TEST_P(KvStreamerTest, ProducerThatStopsEarlyFailsTheTransfer) {
  std::mt19937 rng(7004);
  const KvShape shape{4, 2, 37, 64};
  for (int layers = 0; layers < shape.layers; ++layers) {
    SCOPED_TRACE(std::to_string(layers) + " layers delivered");
    const StridedKv kv = RandomStridedKv(rng, shape, 1 + static_cast<int>(rng() % 2));
    auto pair = MakePair(GetParam());
    ASSERT_TRUE(pair);
    Receiver receiver(pair->receiver.get());
    auto encoder = NewEncoder(rng() % 2 ? "none" : "kivi-2");
    int delivered = 0;
    auto streamed =
        StreamKvWhileProducing(*pair->sender, *encoder, shape, DType::kF32, rng(),
                                      Deliver(kv, layers, Status::Ok(), &delivered));
    EXPECT_FALSE(streamed.ok());
    EXPECT_NE(streamed.status().message().find(std::to_string(layers) + " of " +
                                               std::to_string(shape.layers)),
              std::string::npos)
        << streamed.status().ToString();
    EXPECT_EQ(delivered, layers);
    EXPECT_FALSE(receiver.Complete()) << receiver.records() << " records";
    EXPECT_FALSE(receiver.result().ok());
  }
}

// The receiver refuses the frame: the call returns its verdict, and the
// producer still delivered every layer (its result is the caller's to retry
// with).
TEST_P(KvStreamerTest, RefusedTransferLetsTheProducerFinish) {
  std::mt19937 rng(7005);
  const KvShape shape{4, 2, 37, 64};
  const StridedKv kv = RandomStridedKv(rng, shape, 1);
  auto pair = MakePair(GetParam());
  ASSERT_TRUE(pair);
  Result<TransferStats> received = Status::Internal("unset");
  FrameHandler refuse;
  refuse.on_header = [](uint64_t, std::span<const uint8_t>) {
    return Status::Corruption("no room for this frame");
  };
  refuse.on_record = [](std::span<const uint8_t>) { return Status::Ok(); };
  std::thread receiver([&] { received = ReceiveFrame(*pair->receiver, refuse, 5); });
  auto encoder = NewEncoder("kivi-2");
  int delivered = 0;
  auto streamed =
      StreamKvWhileProducing(*pair->sender, *encoder, shape, DType::kF32, rng(),
                                    Deliver(kv, shape.layers, Status::Ok(), &delivered));
  receiver.join();
  ASSERT_FALSE(streamed.ok());
  EXPECT_EQ(streamed.status().code(), StatusCode::kCorruption) << streamed.status().ToString();
  EXPECT_NE(streamed.status().message().find("no room"), std::string::npos)
      << streamed.status().ToString();
  EXPECT_EQ(received.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(delivered, shape.layers);
}

}  // namespace
INSTANTIATE_TEST_SUITE_P(Transports, KvStreamerTest,
                         ::testing::ValuesIn(transporttest::AllKinds()), transporttest::KindName);

}  // namespace kvserve
