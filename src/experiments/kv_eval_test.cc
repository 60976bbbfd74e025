// Copyright kvserve authors. EvaluateProfile / CompareCaches: a lossless
// profile is bit-exact with no error, a lossy one has a finite SNR and an
// error bounded by the signal, per-layer errors add up to the totals, the
// keep mask removes rows from the comparison, and the JSON carries it all.
#include "experiments/kv_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kvserve/kv_file.h"

namespace kvserve::lab {
namespace {

KvCache Synth(uint64_t seed) {
  auto kv = SynthesizeKv({.shape = {3, 2, 512, 32}, .dtype = DType::kF16, .seed = seed});
  EXPECT_TRUE(kv.ok()) << kv.status().ToString();
  return std::move(*kv);
}

TEST(KvEvalTest, LosslessIsExactAndLossyIsNot) {
  for (uint64_t seed : {11u, 12u}) {
    const KvCache kv = Synth(seed);
    auto none = EvaluateProfile("none", *Profile::Parse("none"), kv.view(), nullptr, 1, 1, {});
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_TRUE(none->bit_exact);
    EXPECT_EQ(none->key.max_abs, 0);
    EXPECT_TRUE(std::isinf(none->value.SnrDb()));
    EXPECT_EQ(FormatSnr(none->key.SnrDb()), "inf");
    EXPECT_DOUBLE_EQ(none->kept_fraction, 1.0);

    auto kivi = EvaluateProfile("kivi-2", *Profile::Parse("kivi-2"), kv.view(), nullptr, 1, 1, {});
    ASSERT_TRUE(kivi.ok()) << kivi.status().ToString();
    EXPECT_FALSE(kivi->bit_exact);
    EXPECT_GT(kivi->compression_ratio, 2.0);
    EXPECT_GT(kivi->key.Rmse(), 0);
    EXPECT_TRUE(std::isfinite(kivi->key.SnrDb()));
    EXPECT_GT(kivi->key.SnrDb(), 0);  // the error is smaller than the signal
    // The totals are the sums of the per-layer errors.
    ASSERT_EQ(kivi->layers.size(), 6u);
    uint64_t elements = 0;
    double max_abs = 0;
    for (size_t i = 0; i < kivi->layers.size(); i += 2) {
      elements += kivi->layers[i].count;
      max_abs = std::max(max_abs, kivi->layers[i].max_abs);
    }
    EXPECT_EQ(elements, kivi->key.count);
    EXPECT_EQ(elements, uint64_t{3} * 2 * 512 * 32);
    EXPECT_DOUBLE_EQ(max_abs, kivi->key.max_abs);
    const nlohmann::json j = kivi->Json();
    EXPECT_EQ(j["name"], "kivi-2");
    EXPECT_EQ(j["layers"].size(), 3u);
    EXPECT_EQ(j["key"]["elements"], kivi->key.count);
    EXPECT_EQ(none->Json()["value"]["snr_db"], "inf");
  }
}

TEST(KvEvalTest, KeepMaskSkipsRows) {
  const KvCache a = Synth(21), b = Synth(22);
  const size_t rows = size_t{3} * 2 * 2 * 512;
  std::vector<uint8_t> mask(rows, 1);
  for (size_t r = 0; r < rows; r += 3) mask[r] = 0;
  uint64_t kept_all = 0, kept = 0;
  const auto all = CompareCaches(a.view(), b.view(), {}, &kept_all);
  const auto some = CompareCaches(a.view(), b.view(), mask, &kept);
  EXPECT_EQ(kept_all, rows);
  EXPECT_EQ(kept, rows - (rows + 2) / 3);
  ASSERT_EQ(all.size(), some.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_LT(some[i].count, all[i].count);
    EXPECT_LE(some[i].sum_sq_err, all[i].sum_sq_err);
    EXPECT_GT(all[i].sum_sq_err, 0);  // two different caches differ
  }
  // Against itself there is no error at all.
  const auto self = CompareCaches(a.view(), a.view(), {}, &kept);
  for (const ErrorStats& e : self) EXPECT_EQ(e.sum_sq_err, 0);
}

}  // namespace
}  // namespace kvserve::lab
