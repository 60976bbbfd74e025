// Copyright kvserve authors. Properties every Codec must have, checked for
// all four codecs: round trip, determinism, exact consumption, rejection of
// truncated / extended input, memory safety on corrupt or random input, and
// thread safety of const Encode/Decode.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codecs/codec_test_util.h"
#include "codecs/lz4_codec.h"
#include "codecs/pack.h"
#include "codecs/rans.h"
#include "codecs/zstd_codec.h"

namespace kvserve::codecs {
namespace {

using testing::Distribution;
using testing::RandomCount;
using testing::RandomLevels;
using testing::RandomSegment;

struct CodecCase {
  std::string name;
  std::function<std::unique_ptr<pipeline::Codec>(std::mt19937_64&)> make;  // random params
};

std::vector<CodecCase> AllCodecs() {
  return {
      {"pack", [](std::mt19937_64& rng) -> std::unique_ptr<pipeline::Codec> {
         return std::make_unique<PackCodec>(rng() % 2 && CpuHasAvx2() ? PackImpl::kAvx2
                                                                      : PackImpl::kScalar);
       }},
      {"rans", [](std::mt19937_64& rng) -> std::unique_ptr<pipeline::Codec> {
         return std::make_unique<RansCodec>(std::uniform_int_distribution<int>(8, 15)(rng));
       }},
      {"zstd", [](std::mt19937_64& rng) -> std::unique_ptr<pipeline::Codec> {
         return std::make_unique<ZstdCodec>(std::uniform_int_distribution<int>(1, 9)(rng));
       }},
      {"lz4", [](std::mt19937_64& rng) -> std::unique_ptr<pipeline::Codec> {
         return std::make_unique<Lz4Codec>(std::uniform_int_distribution<int>(1, 64)(rng));
       }},
  };
}

class CodecPropertiesTest : public ::testing::TestWithParam<int> {
 protected:
  const CodecCase& codec_case() const {
    static const std::vector<CodecCase> cases = AllCodecs();
    return cases[GetParam()];
  }
};

// Decodes into a buffer with guard bytes on both sides; a successful decode
// must yield symbols < levels. Returns the status.
Status GuardedDecode(const pipeline::Codec& codec, std::span<const uint8_t> in, uint16_t levels,
                     size_t count, std::vector<uint8_t>* symbols = nullptr) {
  std::vector<uint8_t> buf(count + 64, 0xCD);
  Status s = codec.Decode(in, levels, count, buf.data() + 32);
  for (int k = 0; k < 32; ++k) {
    EXPECT_EQ(buf[k], 0xCD) << "write before out";
    EXPECT_EQ(buf[32 + count + k], 0xCD) << "write after out[count)";
  }
  if (s.ok()) {
    for (size_t i = 0; i < count; ++i) {
      if (buf[32 + i] >= levels) {
        ADD_FAILURE() << "decoded symbol " << int(buf[32 + i]) << " >= levels " << levels;
        break;
      }
    }
    if (symbols) symbols->assign(buf.begin() + 32, buf.begin() + 32 + count);
  } else {
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  }
  return s;
}

TEST_P(CodecPropertiesTest, RoundTripsRandomSegmentsDeterministically) {
  std::mt19937_64 rng(0xc0dec + GetParam());
  for (int trial = 0; trial < 120; ++trial) {
    auto codec = codec_case().make(rng);
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 200000),
                                   testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> prefix = {0xAB, 0xCD};  // Encode appends after existing bytes
    std::vector<uint8_t> again;
    ASSERT_TRUE(codec->Encode(seg, &prefix).ok());
    ASSERT_TRUE(codec->Encode(seg, &again).ok());
    ASSERT_EQ(std::vector<uint8_t>(prefix.begin() + 2, prefix.end()), again);
    std::vector<uint8_t> back;
    Status s = GuardedDecode(*codec, again, seg.levels, seg.symbols.size(), &back);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(back, seg.symbols) << codec_case().name << " levels " << levels;
  }
}

TEST_P(CodecPropertiesTest, RejectsEveryTruncationAndTrailingBytes) {
  std::mt19937_64 rng(0x7a11 + GetParam());
  for (int trial = 0; trial < 25; ++trial) {
    auto codec = codec_case().make(rng);
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 2000),
                                   testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(codec->Encode(seg, &bytes).ok());
    for (size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_FALSE(GuardedDecode(*codec, std::span<const uint8_t>(bytes.data(), len), seg.levels,
                                 seg.symbols.size())
                       .ok())
          << codec_case().name << ": truncated to " << len << " of " << bytes.size();
    }
    bytes.push_back(static_cast<uint8_t>(rng()));
    EXPECT_FALSE(GuardedDecode(*codec, bytes, seg.levels, seg.symbols.size()).ok());
  }
}

TEST_P(CodecPropertiesTest, BitFlipsNeverCrashOrWriteOutOfBounds) {
  std::mt19937_64 rng(0xf1 + GetParam());
  for (int trial = 0; trial < 20; ++trial) {
    auto codec = codec_case().make(rng);
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, RandomCount(rng, 500),
                                   testing::kAllDistributions[trial % 5]);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(codec->Encode(seg, &bytes).ok());
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      auto bad = bytes;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      (void)GuardedDecode(*codec, bad, seg.levels, seg.symbols.size());
    }
  }
  for (int trial = 0; trial < 6; ++trial) {  // large segments, random flips
    auto codec = codec_case().make(rng);
    const int levels = RandomLevels(rng);
    const auto seg = RandomSegment(rng, levels, 150000, Distribution::kGaussian);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(codec->Encode(seg, &bytes).ok());
    for (int k = 0; k < 20 && !bytes.empty(); ++k) {
      auto bad = bytes;
      for (int f = std::uniform_int_distribution<int>(1, 6)(rng); f > 0; --f) {
        bad[std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng)] ^=
            static_cast<uint8_t>(1u << (rng() % 8));
      }
      (void)GuardedDecode(*codec, bad, seg.levels, seg.symbols.size());
    }
  }
}

TEST_P(CodecPropertiesTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(0x6a4b + GetParam());
  auto codec = codec_case().make(rng);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> garbage(RandomCount(rng, 400));
    for (auto& b : garbage) b = static_cast<uint8_t>(rng());
    if (!garbage.empty() && trial % 3 == 0) garbage[0] = trial % 2;  // valid rans modes
    const int levels = std::uniform_int_distribution<int>(0, 300)(rng);
    const size_t count = RandomCount(rng, 4000);
    (void)GuardedDecode(*codec, garbage, static_cast<uint16_t>(levels), count);
  }
}

TEST_P(CodecPropertiesTest, EncodeRejectsInvalidSegments) {
  std::mt19937_64 rng(0x1a + GetParam());
  for (int trial = 0; trial < 50; ++trial) {
    auto codec = codec_case().make(rng);
    const int levels = std::uniform_int_distribution<int>(2, 255)(rng);
    auto seg = RandomSegment(rng, levels, std::uniform_int_distribution<size_t>(1, 5000)(rng),
                             Distribution::kUniform);
    seg.symbols[std::uniform_int_distribution<size_t>(0, seg.symbols.size() - 1)(rng)] =
        static_cast<uint8_t>(std::uniform_int_distribution<int>(levels, 255)(rng));
    std::vector<uint8_t> out = {9};
    EXPECT_EQ(codec->Encode(seg, &out).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(out, std::vector<uint8_t>{9});
    seg.levels = static_cast<uint16_t>(trial % 2 ? 1 : 257 + trial);
    EXPECT_EQ(codec->Encode(seg, &out).code(), StatusCode::kInvalidArgument);
  }
}

TEST_P(CodecPropertiesTest, ConstMethodsAreThreadSafe) {
  std::mt19937_64 rng(0x7d + GetParam());
  auto codec = codec_case().make(rng);
  std::vector<pipeline::CodeSegment> segs;
  std::vector<std::vector<uint8_t>> want;
  for (int k = 0; k < 8; ++k) {
    segs.push_back(RandomSegment(rng, RandomLevels(rng), RandomCount(rng, 50000),
                                 testing::kAllDistributions[k % 5]));
    want.emplace_back();
    ASSERT_TRUE(codec->Encode(segs.back(), &want.back()).ok());
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 10; ++round) {
        for (size_t k = 0; k < segs.size(); ++k) {
          std::vector<uint8_t> bytes;
          std::vector<uint8_t> back(segs[k].symbols.size());
          if (!codec->Encode(segs[k], &bytes).ok() || bytes != want[k] ||
              !codec->Decode(bytes, segs[k].levels, back.size(), back.data()).ok() ||
              back != segs[k].symbols) {
            ++failures[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecPropertiesTest, ::testing::Range(0, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return AllCodecs()[info.param].name;
                         });

}  // namespace
}  // namespace kvserve::codecs
