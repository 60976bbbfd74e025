// Copyright kvserve authors. The connector's device paths
// (DeviceConnector, kvserve/connector.h) over a real connection: a device
// cache streamed window by window through a ring far smaller than the cache
// arrives as the CPU encoder's frame, byte for byte; a frame received into
// device memory (contiguous or paged) holds the CPU decode's values and keep
// mask; a producer's per-layer device views (K and V apart, V below K)
// stream the same frame; a failing producer leaves the receiver without a
// frame; a ring the budget cannot hold fails the transfer cleanly; a
// corrupt record is refused and the connection stays usable. The ring never
// holds more device memory than the budget. Skips without a GPU; runs in
// the host simulator (test_cuda_sim).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "connector/connector_test_util.h"
#include "cuda/cuda_test_util.h"
#include "kvserve/connector.h"
#include "kvserve/controller.h"
#include "kvserve/cuda.h"
#include "kvserve/kv_file.h"

namespace kvserve::cuda {
namespace {

using namespace kvserve::cuda::testing;  // NOLINT: the shared test helpers
using connectortest::Kind;
using connectortest::MakePair;

// A small ring: the caches below are several times larger.
DeviceConnectorOptions SmallRing() {
  DeviceConnectorOptions o;
  o.device_budget_bytes = 1 << 20;
  o.pinned_budget_bytes = 1 << 20;
  o.max_slots = 3;
  return o;
}

// The frame a host receiver gets, and its decode.
struct HostReception {
  Status status;
  std::vector<uint8_t> frame;
};

HostReception ReceiveOnHost(Connection& c) {
  HostReception r;
  FrameHandler h;
  h.on_header = [&](uint64_t, std::span<const uint8_t> header) {
    r.frame.assign(header.begin(), header.end());
    return Status::Ok();
  };
  h.on_record = [&](std::span<const uint8_t> record) {
    r.frame.insert(r.frame.end(), record.begin(), record.end());
    return Status::Ok();
  };
  r.status = ReceiveFrame(c, h, 10).status();
  return r;
}

// Device memory holding `cache` (its layout and padding included).
struct DeviceCache {
  DeviceBuffer<> buffer;
  KvView view;
  explicit DeviceCache(const HostCache& cache) : buffer(cache.bytes.size()), view(cache.view()) {
    (void)cudaMemcpy(buffer.ptr, cache.bytes.data(), cache.bytes.size(), cudaMemcpyHostToDevice);
    view.data = buffer.ptr + cache.origin;
  }
};

// A device reception into a contiguous destination the callback allocates.
struct DeviceReceived {
  Status status;
  bool refused = false;
  std::vector<uint8_t> values;
  std::vector<uint8_t> mask;
  uint64_t records = 0;
};

DeviceReceived ReceiveOnDevice(DeviceConnector& dc, Connection& c, const MutablePagedKvView* pages = nullptr) {
  DeviceReceived r;
  Message begin;
  Status s = c.Receive(&begin, 10);
  if (!s.ok()) {
    r.status = s;
    return r;
  }
  std::unique_ptr<DeviceBuffer<>> out;
  KvShape shape;
  DType dtype = DType::kBF16;
  auto destination = [&](uint64_t, const FrameInfo& info) -> Result<KvDestination> {
    shape = info.shape;
    dtype = info.dtype;
    if (pages != nullptr) return KvDestination(*pages);
    out = std::make_unique<DeviceBuffer<>>(static_cast<size_t>(info.shape.NumElements()) * DTypeSize(info.dtype));
    (void)cudaMemset(out->ptr, 0x5A, out->bytes);
    return KvDestination(MutableKvView{out->ptr, info.dtype, info.shape, KvStrides::Contiguous(info.shape)});
  };
  KvReceiveOptions options;
  options.keep_mask = &r.mask;
  options.refused = &r.refused;
  auto got = dc.ReceiveKvFrom(c, begin, destination, options, nullptr);
  r.status = got.status();
  if (!got.ok()) return r;
  r.records = got->records;
  if (out != nullptr) {
    r.values.resize(out->bytes);
    (void)cudaMemcpy(r.values.data(), out->ptr, out->bytes, cudaMemcpyDeviceToHost);
  }
  return r;
}

class DeviceConnectorTest : public ::testing::TestWithParam<Kind> {};

// Device sender -> host receiver: the CPU encoder's frame. Host sender ->
// device receiver, and device -> device: the CPU decode's values and mask.
TEST_P(DeviceConnectorTest, FramesAndValuesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto pair = MakePair(GetParam());
  if (pair == nullptr) GTEST_SKIP() << "transport unavailable";
  auto dc = NewDeviceConnector(SmallRing());
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  std::mt19937 rng(11);
  uint64_t id = 1;
  for (const char* spec : {"none", "kivi-2", "kvserve-h2r", "duo", "cachegen"}) {
    SCOPED_TRACE(spec);
    const Profile p = *Profile::Parse(spec);
    const KvShape shape{3, 2, 700, 128};
    const HostCache cache = MakeCache(rng, shape, DType::kBF16, static_cast<int>(rng() % 4));
    const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 5);
    const std::vector<uint8_t> cpu = CpuEncode(p, cache.view(), &scores);
    ASSERT_GT(static_cast<uint64_t>(shape.NumElements()) * 2, 2 * SmallRing().device_budget_bytes)
        << "the cache should outgrow the ring";
    const Decoded want = CpuDecode(cpu, shape, DType::kBF16);
    const DeviceCache dev(cache);

    HostReception host;
    std::thread rx([&] { host = ReceiveOnHost(*pair->receiver); });
    auto sent = (*dc)->StreamKv(*pair->sender, p, &scores, DeviceKvSource(dev.view), id++, nullptr);
    rx.join();
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    ASSERT_TRUE(host.status.ok()) << host.status.ToString();
    EXPECT_EQ(FirstDifference(host.frame, cpu), SIZE_MAX) << "the device sender's frame differs from the CPU's";
    EXPECT_EQ(sent->transfer.frame_bytes, cpu.size());

    DeviceReceived got;
    std::thread drx([&] { got = ReceiveOnDevice(**dc, *pair->receiver); });
    auto cpu_sent = StreamFrame(*pair->sender, cpu, id++);
    drx.join();
    ASSERT_TRUE(cpu_sent.ok()) << cpu_sent.status().ToString();
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    EXPECT_EQ(FirstDifference(got.values, want.values), SIZE_MAX) << "device decode differs from the CPU's";
    if (p.quantizer() == QuantizerType::kDuo) EXPECT_EQ(got.mask, want.mask);

    std::thread ddx([&] { got = ReceiveOnDevice(**dc, *pair->receiver); });
    sent = (*dc)->StreamKv(*pair->sender, p, &scores, DeviceKvSource(dev.view), id++, nullptr);
    ddx.join();
    ASSERT_TRUE(sent.ok() && got.status.ok()) << sent.status().ToString() << " / " << got.status.ToString();
    EXPECT_EQ(FirstDifference(got.values, want.values), SIZE_MAX);
  }
  const DeviceMemoryStats m = (*dc)->memory();
  EXPECT_LE(m.peak_transfer_bytes, SmallRing().device_budget_bytes);
  EXPECT_GT(m.peak_transfer_bytes, 0u);
}

// A producer handing over per-layer device views (K and V allocated apart,
// V below K) streams the CPU's frame; one that fails mid-way makes the call
// fail with its error and leaves the receiver without a frame.
TEST_P(DeviceConnectorTest, ProducerLayersStreamAsTheyComeAndFailuresAbort) {
  SKIP_WITHOUT_GPU();
  auto pair = MakePair(GetParam());
  if (pair == nullptr) GTEST_SKIP() << "transport unavailable";
  auto dc = NewDeviceConnector(SmallRing());
  ASSERT_TRUE(dc.ok());
  std::mt19937 rng(12);
  const KvShape shape{4, 2, 500, 64};
  const HostCache cache = MakeCache(rng, shape, DType::kF16, 0);
  const Profile p = *Profile::Parse("kvserve-h2r");
  const std::vector<uint8_t> cpu = CpuEncode(p, cache.view(), nullptr);
  // Per layer: V's buffer, then K's (so the kind stride is negative).
  const size_t half = static_cast<size_t>(shape.kv_heads) * shape.tokens * shape.head_dim * 2;
  std::vector<std::unique_ptr<DeviceBuffer<>>> layers;
  for (int l = 0; l < shape.layers; ++l) {
    layers.push_back(std::make_unique<DeviceBuffer<>>(2 * half));
    const uint8_t* k = cache.bytes.data() + (2 * l) * half;
    (void)cudaMemcpy(layers.back()->ptr + half, k, half, cudaMemcpyHostToDevice);
    (void)cudaMemcpy(layers.back()->ptr, k + half, half, cudaMemcpyHostToDevice);
  }
  auto layer_view = [&](int l) {
    KvShape one = shape;
    one.layers = 1;
    KvView v{layers[l]->ptr + half, DType::kF16, one, KvStrides::Contiguous(one)};
    v.strides.kind = -static_cast<int64_t>(half / 2);
    return v;
  };
  for (int fail_at : {-1, 2}) {
    SCOPED_TRACE(fail_at < 0 ? "whole" : "failing");
    HostReception host;
    std::thread rx([&] { host = ReceiveOnHost(*pair->receiver); });
    auto sent = (*dc)->StreamKvWhileProducing(
        *pair->sender, p, nullptr, shape, DType::kF16, 40 + fail_at,
        [&](const LayerReadyCallback& on_layer) {
          for (int l = 0; l < shape.layers; ++l) {
            if (l == fail_at) return Status::Internal("the model failed");
            on_layer(l, layer_view(l));
          }
          return Status::Ok();
        },
        nullptr);
    rx.join();
    if (fail_at < 0) {
      ASSERT_TRUE(sent.ok()) << sent.status().ToString();
      ASSERT_TRUE(host.status.ok()) << host.status.ToString();
      EXPECT_EQ(FirstDifference(host.frame, cpu), SIZE_MAX);
    } else {
      EXPECT_EQ(sent.status().code(), StatusCode::kInternal) << sent.status().ToString();
      EXPECT_FALSE(host.status.ok()) << "the receiver must not get a complete frame";
    }
  }
}

// Pages on both sides: the sender's vLLM pages, the receiver's FlashInfer
// HND pages of another block size and table.
TEST_P(DeviceConnectorTest, PagedSourceAndDestination) {
  SKIP_WITHOUT_GPU();
  auto pair = MakePair(GetParam());
  if (pair == nullptr) GTEST_SKIP() << "transport unavailable";
  auto dc = NewDeviceConnector(SmallRing());
  ASSERT_TRUE(dc.ok());
  std::mt19937 rng(13);
  const KvShape shape{2, 2, 600, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const Profile p = *Profile::Parse("kivi-2");
  const std::vector<uint8_t> cpu = CpuEncode(p, cache.view(), nullptr);
  const Decoded want = CpuDecode(cpu, shape, DType::kBF16);
  DevicePagedCache sender(rng, shape, DType::kBF16, PagedLayout::kVllm, 16, &cache);
  DevicePagedCache receiver(rng, shape, DType::kBF16, PagedLayout::kFlashInferHnd, 24);
  const MutablePagedKvView rview = receiver.mutable_view();
  DeviceReceived got;
  std::thread rx([&] { got = ReceiveOnDevice(**dc, *pair->receiver, &rview); });
  auto sent = (*dc)->StreamKv(*pair->sender, p, nullptr, DeviceKvSource(sender.view()), 7, nullptr);
  rx.join();
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  const std::vector<uint8_t> values = receiver.Contiguous();
  EXPECT_EQ(FirstDifference(values, want.values), SIZE_MAX);
}

// A budget too small for two slots fails before anything is sent (the
// connection carries the next transfer); a corrupt record is refused by the
// device receiver and the connection stays usable.
TEST_P(DeviceConnectorTest, SmallBudgetAndCorruptRecordFailCleanly) {
  SKIP_WITHOUT_GPU();
  auto pair = MakePair(GetParam());
  if (pair == nullptr) GTEST_SKIP() << "transport unavailable";
  std::mt19937 rng(14);
  const KvShape shape{2, 2, 600, 128};
  const HostCache cache = MakeCache(rng, shape, DType::kBF16, 0);
  const DeviceCache dev(cache);
  const Profile p = *Profile::Parse("identity+raw+pack+pipeline(chunk=512)");  // raw records of 256 KiB
  DeviceConnectorOptions tiny = SmallRing();
  tiny.device_budget_bytes = 256 * 1024;
  auto small = NewDeviceConnector(tiny);
  ASSERT_TRUE(small.ok());
  auto refused = (*small)->StreamKv(*pair->sender, p, nullptr, DeviceKvSource(dev.view), 1, nullptr);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();

  auto dc = NewDeviceConnector(SmallRing());
  ASSERT_TRUE(dc.ok());
  const std::vector<uint8_t> good = CpuEncode(*Profile::Parse("kivi-2"), cache.view(), nullptr);
  auto info = InspectFrame(good);
  ASSERT_TRUE(info.ok());
  const ChunkEntry& middle = info->chunks[info->chunks.size() / 2];
  // A flipped byte in a record's body: the receiver refuses the frame. In
  // its length: the sender sees a malformed frame and aborts the transfer
  // (the receiver did not refuse it). Either way the connection carries
  // the next transfer.
  uint64_t id = 2;
  for (const bool in_body : {true, false}) {
    SCOPED_TRACE(in_body ? "body" : "length");
    std::vector<uint8_t> bad = good;
    bad[middle.offset + (in_body ? 24 + (middle.size - 28) / 2 : 18)] ^= 0x08;
    DeviceReceived got;
    std::thread rx([&] { got = ReceiveOnDevice(**dc, *pair->receiver); });
    auto sent = StreamFrame(*pair->sender, bad, id++);
    rx.join();
    EXPECT_EQ(got.status.code(), StatusCode::kCorruption) << got.status.ToString();
    EXPECT_EQ(got.refused, in_body) << got.status.ToString();
    EXPECT_FALSE(sent.ok());
    HostReception host;
    std::thread again([&] { host = ReceiveOnHost(*pair->receiver); });
    auto ok = (*dc)->StreamKv(*pair->sender, *Profile::Parse("kivi-2"), nullptr, DeviceKvSource(dev.view), id++,
                              nullptr);
    again.join();
    EXPECT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_TRUE(host.status.ok()) << host.status.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceConnectorTest, ::testing::Values(Kind::kLoopback, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kTcp ? "Tcp" : "Loopback";
                         });

}  // namespace
}  // namespace kvserve::cuda
