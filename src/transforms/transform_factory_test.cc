// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <memory>

#include "kvserve/profile.h"
#include "core/stages.h"
#include "transforms/affine.h"
#include "transforms/delta.h"
#include "transforms/hadamard.h"
#include "transforms/identity.h"
#include "transforms/transform_test_util.h"

namespace kvserve::transforms {
namespace {

// Runs `made` and `reference` on the same random chunk; both must agree bit
// for bit on the output and the side bytes.
void ExpectSameAs(const pipeline::Transform& made, const pipeline::Transform& reference,
                  std::mt19937_64& rng) {
  auto a = testing::RandomShapeChunk(rng, testing::PowerOfTwoDims());
  auto b = a;
  std::vector<uint8_t> side_a, side_b;
  pipeline::ByteWriter writer_a(&side_a), writer_b(&side_b);
  ASSERT_TRUE(made.Forward(a.info, a.tensor(), writer_a).ok());
  ASSERT_TRUE(reference.Forward(b.info, b.tensor(), writer_b).ok());
  EXPECT_TRUE(testing::SameBits(a.values, b.values));
  EXPECT_EQ(side_a, side_b);
}

TEST(CreateTransform, BuildsEachTypeWithItsParameters) {
  std::mt19937_64 rng(0xfac7);
  Profile profile;
  profile.set_transform(TransformType::kIdentity);
  auto identity = pipeline::CreateTransform(profile);
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  ExpectSameAs(**identity, IdentityTransform(), rng);

  profile.set_transform(TransformType::kDelta);
  auto delta_default = pipeline::CreateTransform(profile);
  ASSERT_TRUE(delta_default.ok());
  ExpectSameAs(**delta_default, DeltaTransform(0), rng);
  ASSERT_TRUE(profile.Set(ParamId::kAnchor, 16).ok());
  auto delta = pipeline::CreateTransform(profile);
  ASSERT_TRUE(delta.ok());
  ExpectSameAs(**delta, DeltaTransform(16), rng);

  profile.Clear(ParamId::kAnchor);
  profile.set_transform(TransformType::kHadamard);
  auto hadamard_default = pipeline::CreateTransform(profile);
  ASSERT_TRUE(hadamard_default.ok());
  ExpectSameAs(**hadamard_default, HadamardTransform(0x5eed), rng);
  const int64_t seed = static_cast<int64_t>(rng() & 0x7fffffff);
  ASSERT_TRUE(profile.Set(ParamId::kSeed, seed).ok());
  auto hadamard = pipeline::CreateTransform(profile);
  ASSERT_TRUE(hadamard.ok());
  ExpectSameAs(**hadamard, HadamardTransform(static_cast<uint64_t>(seed)), rng);

  profile.Clear(ParamId::kSeed);
  profile.set_transform(TransformType::kAffine);
  auto affine = pipeline::CreateTransform(profile);
  ASSERT_TRUE(affine.ok());
  ExpectSameAs(**affine, AffineTransform(), rng);
}

TEST(CreateTransform, UnknownTypeIsInvalidArgument) {
  Profile profile;
  profile.set_transform(static_cast<TransformType>(200));
  EXPECT_EQ(pipeline::CreateTransform(profile).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::transforms
