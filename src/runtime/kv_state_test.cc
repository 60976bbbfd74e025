#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kvserve/runtime.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

KvState RandomState(std::mt19937_64& rng, bool with_mask) {
  const int layers = 1 + rng() % 3, heads = 1 + rng() % 3, dim = 2 * (1 + rng() % 5);
  const int tokens = rng() % 40;
  KvState kv(layers, heads, dim);
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % 1000);
  kv.AppendTokens(ids);
  std::normal_distribution<float> normal;
  for (int l = 0; l < layers; ++l) {
    for (int k = 0; k < 2; ++k) {
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < tokens * dim; ++i) kv.head_data(l, k, h)[i] = normal(rng);
      }
    }
  }
  std::vector<float> logits(rng() % 20);
  for (auto& x : logits) x = normal(rng);
  kv.set_last_logits(logits);
  if (with_mask && tokens > 0) {
    std::vector<uint8_t> keep(tokens);
    for (auto& b : keep) b = rng() % 2;
    EXPECT_TRUE(kv.SetKeepMask(static_cast<int>(rng() % layers), 0, keep).ok());
  }
  return kv;
}

void ExpectSameState(const KvState& a, const KvState& b) {
  ASSERT_EQ(a.view().shape, b.view().shape);
  EXPECT_EQ(a.token_ids(), b.token_ids());
  EXPECT_EQ(a.has_keep_mask(), b.has_keep_mask());
  EXPECT_EQ(a.last_logits(), b.last_logits());
  if (a.tokens() == 0) return;  // no rows (their pointers may be null)
  for (int l = 0; l < a.layers(); ++l) {
    for (int h = 0; h < a.kv_heads(); ++h) {
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(0, std::memcmp(a.head_data(l, k, h), b.head_data(l, k, h),
                                 sizeof(float) * a.tokens() * a.head_dim()));
      }
      if (a.has_keep_mask()) {
        EXPECT_EQ(0, std::memcmp(a.keep_mask(l, h), b.keep_mask(l, h), a.tokens()));
      }
    }
  }
}

TEST(KvStateTest, StateApiRoundTrip) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    KvState kv = RandomState(rng, trial % 2);
    std::vector<std::byte> buffer(KvStateSize(kv));
    auto written = KvStateGet(kv, buffer);
    ASSERT_TRUE(written.ok());
    EXPECT_EQ(*written, buffer.size());
    auto back = KvStateSet(buffer);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ExpectSameState(kv, *back);
    if (!buffer.empty()) {
      std::vector<std::byte> small(buffer.size() - 1);
      EXPECT_EQ(KvStateGet(kv, small).status().code(), StatusCode::kResourceExhausted);
    }
  }
}

TEST(KvStateTest, CorruptStateIsRejected) {
  std::mt19937_64 rng(6);
  KvState kv = RandomState(rng, true);
  std::vector<std::byte> buffer(KvStateSize(kv));
  ASSERT_TRUE(KvStateGet(kv, buffer).ok());
  for (size_t len = 0; len < buffer.size(); len += 1 + len / 8) {
    EXPECT_EQ(KvStateSet(std::span(buffer.data(), len)).status().code(), StatusCode::kCorruption);
  }
  for (int trial = 0; trial < 200; ++trial) {
    auto bad = buffer;
    bad[rng() % bad.size()] ^= static_cast<std::byte>(1 + rng() % 255);
    EXPECT_EQ(KvStateSet(bad).status().code(), StatusCode::kCorruption);
  }
}

TEST(KvStateTest, GrowthPreservesContentsAndViews) {
  std::mt19937_64 rng(7);
  KvState kv = RandomState(rng, true);
  KvCache before = kv.ToCache();
  kv.Reserve(kv.tokens() + 1000);
  KvCache after = kv.ToCache();
  ASSERT_EQ(before.size_bytes(), after.size_bytes());
  EXPECT_EQ(0, std::memcmp(before.bytes(), after.bytes(), before.size_bytes()));
  // The strided view addresses the same elements as the contiguous copy.
  KvView v = kv.view();
  KvView c = after.view();
  for (int trial = 0; trial < 100 && v.shape.tokens > 0; ++trial) {
    int l = rng() % v.shape.layers, k = rng() % 2, h = rng() % v.shape.kv_heads,
        t = rng() % v.shape.tokens, d = rng() % v.shape.head_dim;
    EXPECT_EQ(0, std::memcmp(v.At(l, k, h, t, d), c.At(l, k, h, t, d), 4));
  }
  auto rebuilt = KvState::FromView(c, kv.token_ids());
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_EQ(0, std::memcmp(rebuilt->ToCache().bytes(), after.bytes(), after.size_bytes()));
}

TEST(KvStateTest, FileExportImport) {
  std::mt19937_64 rng(8);
  KvState kv = RandomState(rng, false);
  const std::string path = testing::TempDir("kvstate") + "/state.kvst";
  ASSERT_TRUE(ExportKV(kv, path).ok());
  auto back = ImportKV(path);
  ASSERT_TRUE(back.ok());
  ExpectSameState(kv, *back);
  EXPECT_EQ(ImportKV(path + ".missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve
