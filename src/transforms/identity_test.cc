// Copyright kvserve authors.
#include "transforms/identity.h"

#include <gtest/gtest.h>

#include "transforms/transform_test_util.h"

namespace kvserve::transforms {
namespace {

using testing::RandomShapeChunk;

TEST(IdentityTransform, LeavesDataAndWritesNothing) {
  std::mt19937_64 rng(0x1de47);
  IdentityTransform transform;
  for (int trial = 0; trial < 20; ++trial) {
    auto chunk = RandomShapeChunk(rng, testing::AnyDims());
    SCOPED_TRACE(chunk.Describe());
    const auto original = chunk.values;
    std::vector<uint8_t> side_bytes;
    pipeline::ByteWriter writer(&side_bytes);
    ASSERT_TRUE(transform.Forward(chunk.info, chunk.tensor(), writer).ok());
    EXPECT_TRUE(side_bytes.empty());
    EXPECT_TRUE(testing::SameBits(chunk.values, original));
    pipeline::ByteReader reader(side_bytes);
    ASSERT_TRUE(transform.Inverse(chunk.info, chunk.tensor(), reader).ok());
    EXPECT_TRUE(testing::SameBits(chunk.values, original));
  }
}

TEST(IdentityTransform, RejectsSideBytesAndEmptyTensor) {
  std::mt19937_64 rng(0x1de48);
  IdentityTransform transform;
  auto chunk = RandomShapeChunk(rng, testing::AnyDims());
  std::vector<uint8_t> extra(1 + rng() % 16, 0x5a);
  pipeline::ByteReader reader(extra);
  EXPECT_EQ(transform.Inverse(chunk.info, chunk.tensor(), reader).code(),
            StatusCode::kCorruption);
  std::vector<uint8_t> none;
  pipeline::ByteWriter writer(&none);
  pipeline::ChunkTensor empty{nullptr, 0, 0, 0};
  EXPECT_EQ(transform.Forward(chunk.info, empty, writer).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::transforms
