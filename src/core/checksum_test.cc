// Copyright kvserve authors. Checksum64 and Checksum64Stream equal
// libxxhash's own XXH3-64 (the shared library, built for the baseline
// instruction set) on seeded random inputs of every length class XXH3
// distinguishes (0-16, 17-128, 129-240, long, several stripes and blocks),
// both builds where the CPU has AVX2, and streams over random splits; and
// no call leaves the vector registers' upper halves in use (which slows
// every later SSE instruction of the thread).
#include "core/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/xxh3_ops.h"

namespace kvserve {
namespace {

std::vector<size_t> Lengths(std::mt19937_64& rng) {
  std::vector<size_t> lengths = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025};
  for (size_t limit : {size_t{256}, size_t{4096}, size_t{70000}, size_t{1} << 20})
    for (int i = 0; i < 6; ++i) lengths.push_back(rng() % limit);
  return lengths;
}

TEST(ChecksumTest, Checksum64EqualsLibxxhashOnRandomInputs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto lengths = Lengths(rng);
  std::vector<uint8_t> bytes((size_t{1} << 20) + 64);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const detail::Xxh3Ops* avx2 = __builtin_cpu_supports("avx2") ? detail::Xxh3Avx2Ops() : nullptr;
  for (size_t n : lengths) {
    // Misaligned starts too.
    const uint8_t* p = bytes.data() + rng() % 64;
    const uint64_t want = XXH3_64bits(p, n);
    EXPECT_EQ(Checksum64(p, n), want) << n;
    EXPECT_EQ(Checksum32(p, n), static_cast<uint32_t>(want)) << n;
    if (avx2 != nullptr) EXPECT_EQ(avx2->hash(p, n), want) << n;
  }
}

TEST(ChecksumTest, StreamOverRandomSplitsEqualsOneShot) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (size_t n : Lengths(rng)) {
    std::vector<uint8_t> bytes(n);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    Checksum64Stream stream;
    size_t at = 0;
    while (at < n) {
      const size_t piece = std::min(n - at, static_cast<size_t>(rng() % 5000));
      stream.Update(bytes.data() + at, piece);  // empty pieces included
      at += piece;
      // A digest in between does not end the stream.
      if (rng() % 4 == 0) EXPECT_EQ(stream.Digest(), XXH3_64bits(bytes.data(), at));
    }
    EXPECT_EQ(stream.Digest(), XXH3_64bits(bytes.data(), n)) << n;
  }
}

TEST(ChecksumTest, EveryBitFlipChangesTheChecksum) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(3000);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const uint64_t clean = Checksum64(bytes.data(), bytes.size());
  for (int i = 0; i < 200; ++i) {
    const size_t bit = rng() % (bytes.size() * 8);
    bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(Checksum64(bytes.data(), bytes.size()), clean) << bit;
    bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(ChecksumTest, CallsLeaveTheUpperVectorStateClean) {
  if (!__builtin_cpu_supports("avx")) GTEST_SKIP() << "no AVX";
  ClearAvxUpperState();  // whatever ran before on this thread
  if (AvxUpperStateInUse() != std::optional<bool>(false))
    GTEST_SKIP() << "the CPU cannot report its upper vector state";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(size_t{1} << 20);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t n : Lengths(rng)) {
    (void)Checksum64(bytes.data(), n);
    EXPECT_EQ(AvxUpperStateInUse(), std::optional<bool>(false)) << "after Checksum64 of " << n << " bytes";
    Checksum64Stream stream;
    stream.Update(bytes.data(), n);
    EXPECT_EQ(AvxUpperStateInUse(), std::optional<bool>(false)) << "after an update of " << n << " bytes";
    (void)stream.Digest();
    EXPECT_EQ(AvxUpperStateInUse(), std::optional<bool>(false)) << "after a digest of " << n << " bytes";
  }
}

}  // namespace
}  // namespace kvserve
