// Paged KV views (kvserve/paged.h) through the codec: frames encoded from an
// engine's pages equal those of the same KV laid out contiguously, for all
// four layouts, block sizes 16 and 32, bf16/f16/f32 and random block
// tables; decoding scatters into a receiver's own pages (another layout,
// block size and table) exactly what a contiguous output receives, and
// touches no slot outside the request.
#include "kvserve/paged.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "pipeline/paged_test_util.h"

namespace kvserve {
namespace {

using testing::MakePagedCache;
using testing::PagedTestCache;
using testing::RandomKv;

constexpr PagedLayout kLayouts[] = {PagedLayout::kVllm, PagedLayout::kVllmBlockFirst,
                                    PagedLayout::kFlashInferNhd, PagedLayout::kFlashInferHnd};
constexpr DType kDTypes[] = {DType::kBF16, DType::kF16, DType::kF32};
// Lossless, token-delta (whole-chunk transform), rotation, grouped KIVI with
// a raw recent window, zstd and rANS codecs.
const char* const kProfiles[] = {"none",
                                 "kivi-2",
                                 "cachegen",
                                 "hadamard(seed=7)+kivi(k=2,v=2,group=32,residual=40)+rans",
                                 "delta+kivi(k=3,v=2,group=32)+zstd",
                                 "identity+uniform(k=4,v=4,group=32)+pack"};

std::vector<uint8_t> Encode(const Profile& profile, const auto& kv, int threads) {
  auto encoder = EncoderContext::Create(profile, {.threads = threads});
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  const Status s = (*encoder)->Encode(kv, sink);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return frame;
}

// Layer by layer (Begin, EncodeLayer per layer, Finish).
std::vector<uint8_t> EncodeByLayer(const Profile& profile, const PagedKvView& kv) {
  auto encoder = EncoderContext::Create(profile, {.threads = 1});
  EXPECT_TRUE(encoder.ok());
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  EXPECT_TRUE((*encoder)->Begin(kv.shape, kv.dtype, sink).ok());
  for (int l = 0; l < kv.shape.layers; ++l) {
    const Status s = (*encoder)->EncodeLayer(l, kv);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_TRUE((*encoder)->Finish().ok());
  return frame;
}

KvShape RandomShape(std::mt19937& rng) {
  // Token counts that are no multiple of the block size or of the chunk.
  return KvShape{2 + static_cast<int32_t>(rng() % 2), 1 + static_cast<int32_t>(rng() % 3),
                 70 + static_cast<int32_t>(rng() % 200), 64};
}

TEST(PagedTest, PagedFramesEqualContiguousFrames) {
  std::mt19937 rng(20);
  int cases = 0;
  for (PagedLayout layout : kLayouts)
    for (int32_t block_size : {16, 32})
      for (DType dtype : kDTypes) {
        const KvShape shape = RandomShape(rng);
        const KvCache kv = RandomKv(rng, shape, dtype);
        PagedTestCache pages = MakePagedCache(rng, layout, dtype, shape, block_size);
        ASSERT_TRUE(CopyToPages(kv.view(), pages.mutable_view()).ok());
        for (const char* spec : kProfiles) {
          SCOPED_TRACE(std::string(PagedLayoutName(layout)) + " block " +
                       std::to_string(block_size) + " " + std::string(DTypeName(dtype)) + " " +
                       spec);
          const Profile profile = *Profile::Parse(spec);
          const std::vector<uint8_t> contiguous = Encode(profile, kv.view(), 1);
          EXPECT_EQ(Encode(profile, pages.view(), 1), contiguous);
          EXPECT_EQ(Encode(profile, pages.view(), 3), contiguous);
          EXPECT_EQ(EncodeByLayer(profile, pages.view()), contiguous);
          ++cases;
        }
      }
  EXPECT_EQ(cases, 4 * 2 * 3 * 6);
}

// Block sizes that divide no chunk or group: runs start mid-block.
TEST(PagedTest, AnyBlockSizeGivesTheSameFrame) {
  std::mt19937 rng(24);
  for (PagedLayout layout : kLayouts)
    for (int32_t block_size : {1, 7, 24}) {
      const KvShape shape = RandomShape(rng);
      const KvCache kv = RandomKv(rng, shape, DType::kBF16);
      PagedTestCache pages = MakePagedCache(rng, layout, DType::kBF16, shape, block_size);
      ASSERT_TRUE(CopyToPages(kv.view(), pages.mutable_view()).ok());
      for (const char* spec :
           {"none", "hadamard(seed=7)+kivi(k=2,v=2,group=32,residual=40)+rans"}) {
        SCOPED_TRACE(std::string(PagedLayoutName(layout)) + " block " + std::to_string(block_size) +
                     " " + spec);
        const Profile profile = *Profile::Parse(spec);
        const std::vector<uint8_t> frame = Encode(profile, kv.view(), 1);
        EXPECT_EQ(Encode(profile, pages.view(), 2), frame);
        PagedTestCache receiver = MakePagedCache(rng, layout, DType::kBF16, shape, block_size);
        auto decoder = DecoderContext::Create({.threads = 2});
        KvCache expected(DType::kBF16, shape), got(DType::kBF16, shape);
        ASSERT_TRUE((*decoder)->Decode(frame, expected.mutable_view()).ok());
        ASSERT_TRUE((*decoder)->Decode(frame, receiver.mutable_view()).ok());
        ASSERT_TRUE(CopyFromPages(receiver.view(), got.mutable_view()).ok());
        EXPECT_EQ(0, std::memcmp(got.bytes(), expected.bytes(), got.size_bytes()));
      }
    }
}

TEST(PagedTest, DecodeScattersIntoTheReceiversPages) {
  std::mt19937 rng(21);
  for (PagedLayout layout : kLayouts)
    for (int32_t block_size : {16, 32})
      for (DType dtype : kDTypes) {
        const KvShape shape = RandomShape(rng);
        const KvCache kv = RandomKv(rng, shape, dtype);
        // The receiver: another layout and block size, its own table.
        const PagedLayout other = kLayouts[rng() % 4];
        const int32_t other_block = block_size == 16 ? 32 : 16;
        for (const char* spec :
             {"none", "kivi-2", "hadamard(seed=7)+kivi(k=2,v=2,group=32,residual=40)+rans",
              "delta+kivi(k=3,v=2,group=32)+zstd"}) {
          SCOPED_TRACE(std::string(PagedLayoutName(layout)) + " -> " +
                       std::string(PagedLayoutName(other)) + " " + std::string(DTypeName(dtype)) +
                       " " + spec);
          const std::vector<uint8_t> frame = Encode(*Profile::Parse(spec), kv.view(), 1);
          KvCache expected(dtype, shape);
          auto decoder = DecoderContext::Create({.threads = 2});
          ASSERT_TRUE((*decoder)->Decode(frame, expected.mutable_view()).ok());

          PagedTestCache receiver = MakePagedCache(rng, other, dtype, shape, other_block);
          const std::vector<std::vector<std::byte>> before = receiver.layer_storage;
          ASSERT_TRUE((*decoder)->Decode(frame, receiver.mutable_view()).ok());
          KvCache got(dtype, shape);
          ASSERT_TRUE(CopyFromPages(receiver.view(), got.mutable_view()).ok());
          EXPECT_EQ(0, std::memcmp(got.bytes(), expected.bytes(), got.size_bytes()));

          // Record by record (in reverse order) into a fresh receiver.
          PagedTestCache streamed = MakePagedCache(rng, other, dtype, shape, other_block);
          auto info = InspectFrame(frame);
          ASSERT_TRUE(info.ok());
          ASSERT_TRUE((*decoder)->Start(frame).ok());
          for (auto it = info->chunks.rbegin(); it != info->chunks.rend(); ++it) {
            auto used = (*decoder)->DecodeRecord(
                std::span<const uint8_t>(frame).subspan(it->offset, it->size),
                streamed.mutable_view());
            ASSERT_TRUE(used.ok()) << used.status().ToString();
          }
          KvCache got_streamed(dtype, shape);
          ASSERT_TRUE(CopyFromPages(streamed.view(), got_streamed.mutable_view()).ok());
          EXPECT_EQ(0, std::memcmp(got_streamed.bytes(), expected.bytes(), got.size_bytes()));

          // Only the request's slots changed: blocks outside the table and
          // the slots after the last token keep their 0x5A bytes.
          std::vector<std::vector<std::byte>> marked = before;
          const size_t es = DTypeSize(dtype);
          for (int l = 0; l < shape.layers; ++l)
            for (int k = 0; k < 2; ++k)
              for (int h = 0; h < shape.kv_heads; ++h)
                for (int t = 0; t < shape.tokens; ++t) {
                  const std::byte* slot = receiver.view().At(l, k, h, t, 0);
                  const size_t at = static_cast<size_t>(slot - receiver.layer_storage[l].data());
                  std::memcpy(marked[l].data() + at, slot, es * shape.head_dim);
                }
          EXPECT_EQ(marked, receiver.layer_storage);
        }
      }
}

TEST(PagedTest, PrunedTokensDecodeAsZerosInPages) {
  std::mt19937 rng(22);
  const KvShape shape{2, 4, 150, 64};
  const KvCache kv = RandomKv(rng, shape, DType::kBF16);
  HeadScores scores;
  scores.layers = shape.layers;
  scores.kv_heads = shape.kv_heads;
  for (int i = 0; i < shape.layers * shape.kv_heads; ++i) scores.scores.push_back((i % 3) / 2.0f);
  auto encoder =
      EncoderContext::Create(*Profile::Parse("identity+duo(k=8,v=8,sinks=4,recent=32)+pack"),
                             {.threads = 1, .head_scores = &scores});
  ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);
  ASSERT_TRUE((*encoder)->Encode(kv.view(), sink).ok());
  auto decoder = DecoderContext::Create({.threads = 1});
  KvCache expected(DType::kBF16, shape);
  std::vector<uint8_t> expected_mask, mask;
  ASSERT_TRUE((*decoder)->Decode(frame, expected.mutable_view(), &expected_mask).ok());
  PagedTestCache receiver =
      MakePagedCache(rng, PagedLayout::kFlashInferHnd, DType::kBF16, shape, 16);
  ASSERT_TRUE((*decoder)->Decode(frame, receiver.mutable_view(), &mask).ok());
  EXPECT_EQ(mask, expected_mask);
  EXPECT_NE(std::count(mask.begin(), mask.end(), 0), 0);  // duo pruned something
  KvCache got(DType::kBF16, shape);
  ASSERT_TRUE(CopyFromPages(receiver.view(), got.mutable_view()).ok());
  EXPECT_EQ(0, std::memcmp(got.bytes(), expected.bytes(), got.size_bytes()));
}

TEST(PagedTest, LayoutsAddressTheirDocumentedShapes) {
  // Element (kind, block, slot, head, dim) of one layer, by the shapes in
  // kvserve/paged.h, for every layout.
  const int32_t blocks = 7, slots = 16, heads = 3, dim = 8;
  for (PagedLayout layout : kLayouts) {
    auto g = DescribePagedLayout(layout, blocks, slots, heads, dim);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->layer_elements, int64_t{2} * blocks * slots * heads * dim);
    for (int kind = 0; kind < 2; ++kind)
      for (int b = 0; b < blocks; ++b)
        for (int s = 0; s < slots; ++s)
          for (int h = 0; h < heads; ++h) {
            int64_t want = 0;
            switch (layout) {
              case PagedLayout::kVllm:
                want = (((int64_t{kind} * blocks + b) * slots + s) * heads + h) * dim;
                break;
              case PagedLayout::kVllmBlockFirst:
              case PagedLayout::kFlashInferNhd:
                want = (((int64_t{b} * 2 + kind) * slots + s) * heads + h) * dim;
                break;
              case PagedLayout::kFlashInferHnd:
                want = (((int64_t{b} * 2 + kind) * heads + h) * slots + s) * dim;
                break;
            }
            const int64_t got = (kind == 1 ? g->value_offset : 0) + b * g->strides.block +
                                s * g->strides.slot + h * g->strides.head;
            ASSERT_EQ(got, want) << PagedLayoutName(layout);
          }
    EXPECT_EQ(*ParsePagedLayout(PagedLayoutName(layout)), layout);
  }
  EXPECT_EQ(ParsePagedLayout("vllm-v2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(DescribePagedLayout(PagedLayout::kVllm, 0, 16, 2, 64).ok());
}

TEST(PagedTest, BadViewsAreRefused) {
  std::mt19937 rng(23);
  const KvShape shape{2, 2, 40, 64};
  const KvCache kv = RandomKv(rng, shape, DType::kF16);
  PagedTestCache pages = MakePagedCache(rng, PagedLayout::kVllm, DType::kF16, shape, 16);
  ASSERT_TRUE(CopyToPages(kv.view(), pages.mutable_view()).ok());
  auto encoder = EncoderContext::Create(*Profile::Parse("kivi-2"), {.threads = 1});
  std::vector<uint8_t> frame;
  VectorSink sink(&frame);

  PagedTestCache bad = pages;  // a table entry outside the cache
  bad.block_table[1] = bad.num_blocks;
  EXPECT_EQ((*encoder)->Encode(bad.view(), sink).code(), StatusCode::kInvalidArgument);
  bad.block_table[1] = -1;
  EXPECT_EQ((*encoder)->Encode(bad.view(), sink).code(), StatusCode::kInvalidArgument);
  PagedKvView null_table = pages.view();
  null_table.block_table = nullptr;
  EXPECT_EQ((*encoder)->Encode(null_table, sink).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pages.layers.View(pages.block_table, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pages.layers.View(std::span(pages.block_table).first(2), 40).status().code(),
            StatusCode::kInvalidArgument);  // 40 tokens need 3 blocks of 16

  ASSERT_TRUE((*encoder)->Encode(pages.view(), sink).ok());
  auto decoder = DecoderContext::Create({.threads = 1});
  PagedTestCache twice = MakePagedCache(rng, PagedLayout::kVllm, DType::kF16, shape, 16);
  twice.block_table[2] = twice.block_table[0];  // two token ranges in one block
  EXPECT_EQ((*decoder)->Decode(frame, twice.mutable_view()).code(), StatusCode::kInvalidArgument);
  PagedTestCache wrong_dtype = MakePagedCache(rng, PagedLayout::kVllm, DType::kBF16, shape, 16);
  EXPECT_EQ((*decoder)->Decode(frame, wrong_dtype.mutable_view()).code(),
            StatusCode::kInvalidArgument);
  // A corrupt frame is Corruption, paged output or not.
  frame[frame.size() / 2] ^= 0x40;
  PagedTestCache receiver = MakePagedCache(rng, PagedLayout::kVllm, DType::kF16, shape, 16);
  EXPECT_EQ((*decoder)->Decode(frame, receiver.mutable_view()).code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kvserve
