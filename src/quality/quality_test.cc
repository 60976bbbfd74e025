// Copyright kvserve authors. Tests of the quality evaluator on a tiny
// random-weight model and generated workload files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvserve/quality.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class QualityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::TempDir("quality"));
    RandomModelSpec spec;
    spec.seed = 11;
    ASSERT_TRUE(WriteRandomModel(*dir_ + "/model", spec).ok());
    auto model = Model::Load(*dir_ + "/model");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::mt19937_64 rng(5);
    std::string em, ppl;
    for (int i = 0; i < 8; ++i) {
      const int len = 40 + static_cast<int>(rng() % 40);
      std::vector<int32_t> prompt(len);
      for (auto& t : prompt) t = 1 + static_cast<int32_t>(rng() % 90);
      // Exact-match answers: the model's own greedy continuation (f32 KV).
      std::vector<int32_t> full{0};
      full.insert(full.end(), prompt.begin(), prompt.end());
      auto pre = (*model)->Prefill(full);
      ASSERT_TRUE(pre.ok());
      Sampler greedy(SamplingOptions{});
      auto answer = Generate(**model, &pre->kv, pre->kv.last_logits(), 6, &greedy, false);
      ASSERT_TRUE(answer.ok());
      em += nlohmann::json({{"id", "em-" + std::to_string(i)}, {"workload", "tiny"},
                            {"metric", "exact_match"}, {"prompt_ids", prompt},
                            {"answer_ids", *answer}})
                .dump() + "\n";
      std::vector<int32_t> cont(24);
      for (auto& t : cont) t = 1 + static_cast<int32_t>(rng() % 90);
      ppl += nlohmann::json({{"id", "ppl-" + std::to_string(i)}, {"workload", "tinyprose"},
                             {"metric", "perplexity"}, {"prompt_ids", prompt},
                             {"answer_ids", cont}})
                 .dump() + "\n";
    }
    WriteText(*dir_ + "/em.jsonl", em);
    WriteText(*dir_ + "/ppl.jsonl", ppl);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::vector<EvalSample> Load(const std::string& name) {
    auto s = LoadWorkload(*dir_ + "/" + name);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : std::vector<EvalSample>{};
  }
  static std::unique_ptr<QualityEvaluator> Evaluator() {
    auto ev = QualityEvaluator::Create(*dir_ + "/model", RuntimeOptions{1});
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    return ev.ok() ? std::move(ev).value() : nullptr;
  }
  static std::string* dir_;
};
std::string* QualityTest::dir_ = nullptr;

TEST_F(QualityTest, NoneIsExactlyFullQualityWithIdenticalAnswers) {
  auto ev = Evaluator();
  ASSERT_NE(ev, nullptr);
  for (DType wire : {DType::kF32, DType::kF16}) {
    QualityOptions o;
    o.wire_dtype = wire;
    auto r = ev->Evaluate(Load("em.jsonl"), Profile(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->relative, 1.0);
    EXPECT_EQ(r->relative_token_accuracy, 1.0);
    EXPECT_EQ(r->relative_ci.low, 1.0);
    EXPECT_EQ(r->relative_ci.high, 1.0);
    EXPECT_EQ(r->identical_predictions, 1.0);
    EXPECT_FALSE(r->subset);
    ASSERT_EQ(r->samples.size(), 8u);
    for (size_t i = 0; i < r->samples.size(); ++i) {
      EXPECT_EQ(r->samples[i].predicted, r->baseline[i].predicted);
      EXPECT_EQ(r->samples[i].nll, r->baseline[i].nll);
    }
    // The answers are the model's own greedy output over the f32 KV.
    if (wire == DType::kF32) {
      EXPECT_EQ(r->metric_value, 1.0);
    }
    auto j = nlohmann::json::parse(r->ToJson(true));
    EXPECT_EQ(j["relative"], 1.0);
    EXPECT_EQ(j["samples"].size(), 8u);
  }
}

TEST_F(QualityTest, LossyProfileGivesFiniteScoreAndOrderedInterval) {
  auto ev = Evaluator();
  ASSERT_NE(ev, nullptr);
  auto profile = Profile::Parse("identity+uniform(k=2,v=2)+pack");
  ASSERT_TRUE(profile.ok());
  for (const char* file : {"em.jsonl", "ppl.jsonl"}) {
    QualityOptions o;
    o.samples = 5;
    o.seed = 3;
    auto r = ev->Evaluate(Load(file), *profile, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->subset);
    EXPECT_EQ(r->samples_scored, 5);
    EXPECT_TRUE(std::isfinite(r->relative)) << file;
    EXPECT_GE(r->relative, 0.0);
    EXPECT_TRUE(std::isfinite(r->relative_token_accuracy));
    EXPECT_LE(r->relative_ci.low, r->relative_ci.high);
    EXPECT_LE(r->relative_token_accuracy_ci.low, r->relative_token_accuracy_ci.high);
    EXPECT_GT(r->cr_mean, 1.5);  // 2-bit codes vs f16 (tiny caches: header-heavy)
    for (const SampleScore& s : r->samples) {
      EXPECT_GE(s.token_accuracy, 0.0);
      EXPECT_LE(s.token_accuracy, 1.0);
      EXPECT_TRUE(std::isfinite(s.nll));
    }
  }
}

TEST_F(QualityTest, PrunedKvIsMaskedNotZeroed) {
  auto ev = Evaluator();
  ASSERT_NE(ev, nullptr);
  const ModelConfig& c = ev->model().config();
  HeadScores scores;
  scores.layers = c.layers;
  scores.kv_heads = c.kv_heads;
  scores.scores.assign(c.layers * c.kv_heads, 0.0f);  // all streaming heads
  auto profile = Profile::Parse("identity+duo(k=8,v=8,sinks=4,recent=8,heads=0)+pack");
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto samples = Load("ppl.jsonl");
  auto pre = ev->PrefillSample(samples[0], "", DType::kF32);
  ASSERT_TRUE(pre.ok());
  auto kv = KvState::FromView(pre->kv.view(), pre->token_ids);
  ASSERT_TRUE(kv.ok());
  QualityOptions o;
  o.head_scores = &scores;
  auto pruned = ev->ScoreSample(samples[0], *pre, *profile, o);
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  // References on the f32 KV: the same tokens hidden by the keep-mask, and
  // the same tokens zeroed instead. The evaluator must match the former.
  const int n = kv->tokens();
  std::vector<uint8_t> keep(n, 0);
  for (int t = 0; t < n; ++t) keep[t] = (t < 4 || t >= n - 8) ? 1 : 0;
  const auto& ans = samples[0].answer_ids;
  const int vocab = c.vocab_size;
  auto answer_nll = [&](KvState* state) {
    auto logits = ev->model().Decode(state, std::span(ans).first(ans.size() - 1), true);
    EXPECT_TRUE(logits.ok());
    double nll = 0;
    for (size_t i = 0; i < ans.size(); ++i) {
      const float* row = i == 0 ? pre->last_logits.data() : logits->data() + (i - 1) * vocab;
      double mx = row[0], sum = 0;
      for (int v = 0; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
      for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
      nll += std::log(sum) + mx - row[ans[i]];
    }
    return nll / ans.size();
  };
  auto masked = KvState::FromView(kv->view(), kv->token_ids());
  auto zeroed = KvState::FromView(kv->view(), kv->token_ids());
  ASSERT_TRUE(masked.ok() && zeroed.ok());
  for (int l = 0; l < c.layers; ++l)
    for (int h = 0; h < c.kv_heads; ++h) {
      ASSERT_TRUE(masked->SetKeepMask(l, h, keep).ok());
      for (int kind = 0; kind < 2; ++kind) {
        float* data = zeroed->head_data(l, kind, h);
        for (int t = 0; t < n; ++t)
          if (!keep[t]) std::fill(data + t * c.head_dim, data + (t + 1) * c.head_dim, 0.0f);
      }
    }
  const double masked_nll = answer_nll(&*masked);
  const double zeroed_nll = answer_nll(&*zeroed);
  EXPECT_GT(std::abs(zeroed_nll - masked_nll), 1e-3);  // the two differ on this model
  EXPECT_LT(std::abs(pruned->nll - masked_nll), std::abs(pruned->nll - zeroed_nll));
  EXPECT_NEAR(pruned->nll, masked_nll, 0.05);
  EXPECT_GT(static_cast<double>(pruned->input_bytes) / pruned->frame_bytes, 1.5);
}

TEST_F(QualityTest, PrefillCacheIsHitOnSecondRun) {
  const std::string cache = *dir_ + "/cache";
  auto samples = Load("em.jsonl");
  auto profile = Profile::Parse("kivi-4");
  ASSERT_TRUE(profile.ok());
  QualityOptions o;
  o.cache_dir = cache;
  auto first = Evaluator();
  auto r1 = first->Evaluate(samples, *profile, o);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1->prefills, 8);
  EXPECT_EQ(r1->prefill_cache_hits, 0);
  auto second = Evaluator();
  auto r2 = second->Evaluate(samples, *profile, o);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->prefills, 0);
  EXPECT_EQ(r2->prefill_cache_hits, 8);
  EXPECT_EQ(second->prefills(), 0);
  EXPECT_EQ(r2->relative, r1->relative);
  for (size_t i = 0; i < r1->samples.size(); ++i) {
    EXPECT_EQ(r2->samples[i].predicted, r1->samples[i].predicted);
    EXPECT_EQ(r2->baseline[i].predicted, r1->baseline[i].predicted);
  }
  // A corrupt cache file is recomputed, not trusted.
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.path().extension() == ".safetensors") {
      WriteText(e.path().string(), "garbage");
      break;
    }
  }
  auto third = Evaluator();
  auto r3 = third->Evaluate(samples, *profile, o);
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ(r3->prefills, 1);
  EXPECT_EQ(r3->relative, r1->relative);
}

TEST_F(QualityTest, MalformedWorkloadsGiveClearErrors) {
  const std::string d = *dir_;
  auto expect = [&](const std::string& text, StatusCode code, const std::string& needle) {
    const std::string path = d + "/bad.jsonl";
    WriteText(path, text);
    auto r = LoadWorkload(path);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().ToString().find(needle), std::string::npos) << r.status().ToString();
  };
  const std::string good =
      R"({"id":"a","metric":"exact_match","prompt_ids":[1,2],"answer_ids":[3]})";
  expect("", StatusCode::kCorruption, "empty");
  expect(good + "\n{not json\n", StatusCode::kCorruption, ":2: not valid JSON");
  expect(R"({"id":"a","metric":"exact_match","prompt_ids":[1]})", StatusCode::kCorruption,
         "answer_ids");
  expect(R"({"id":"a","metric":"bleu","prompt_ids":[1],"answer_ids":[1]})",
         StatusCode::kCorruption, "unknown metric");
  expect(R"({"id":"a","metric":"perplexity","prompt_ids":[1,-4],"answer_ids":[1]})",
         StatusCode::kCorruption, "prompt_ids");
  expect(R"({"id":"a","metric":"perplexity","prompt_ids":[],"answer_ids":[1]})",
         StatusCode::kCorruption, "non-empty");
  expect(good + "\n" + good + "\n", StatusCode::kCorruption, "duplicate id");
  expect(R"([{"metric":"perplexity","prompt_ids":[1],"answer_ids":[1]}])",
         StatusCode::kCorruption, "\"id\"");
  auto missing = LoadWorkload(d + "/nope.jsonl");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto resolved = ResolveWorkloadPath("qa", d + "/no_eval_dir");
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().ToString().find("scripts/data/build_all.sh"), std::string::npos);
  WriteText(d + "/arr.json", "[" + good + "]");
  auto arr = LoadWorkload(d + "/arr.json");
  ASSERT_TRUE(arr.ok()) << arr.status().ToString();
  EXPECT_EQ((*arr)[0].answer_ids, std::vector<int32_t>{3});
  // Token ids outside the model's vocab are rejected at evaluation.
  WriteText(d + "/oov.jsonl",
            R"({"id":"a","metric":"exact_match","prompt_ids":[1,2],"answer_ids":[500]})");
  auto oov = LoadWorkload(d + "/oov.jsonl");
  ASSERT_TRUE(oov.ok());
  auto ev = Evaluator();
  auto r = ev->Evaluate(*oov, Profile(), QualityOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(QualityStatsTest, SubsetIsDeterministicDistinctAndSorted) {
  auto a = ChooseSubset(100, 10, 7);
  EXPECT_EQ(a, ChooseSubset(100, 10, 7));
  ASSERT_EQ(a.size(), 10u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i - 1], a[i]);
  EXPECT_EQ(ChooseSubset(5, 0, 1).size(), 5u);
  EXPECT_EQ(ChooseSubset(5, 9, 1).size(), 5u);
}

TEST(QualityStatsTest, HeldOutSamplesAreTheComplementOfTheSearchSubset) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 20; ++trial) {
    const int total = 1 + static_cast<int>(rng() % 300);
    const int n = static_cast<int>(rng() % (total + 5));
    const uint64_t seed = rng();
    std::vector<EvalSample> all(total);
    for (int i = 0; i < total; ++i) all[i].id = "s" + std::to_string(i);
    const auto result = HeldOutSamples(all, n, seed);
    std::set<std::string> searched;
    for (int i : ChooseSubset(total, n, seed)) searched.insert(all[i].id);
    if (n <= 0 || n >= total) {
      EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const std::vector<EvalSample>& held = *result;
    ASSERT_EQ(held.size(), static_cast<size_t>(total - n));
    for (size_t i = 0; i < held.size(); ++i) {
      EXPECT_EQ(searched.count(held[i].id), 0u) << held[i].id << " is in both sets";
      if (i > 0) {
        EXPECT_LT(std::stoi(held[i - 1].id.substr(1)), std::stoi(held[i].id.substr(1)));
      }
    }
  }
}

TEST(QualityStatsTest, BootstrapBracketsTheMean) {
  std::vector<double> v;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) v.push_back((rng() % 1000) / 1000.0);
  auto mean = [&](const std::vector<int>& idx) {
    double s = 0;
    for (int i : idx) s += v[i];
    return s / idx.size();
  };
  std::vector<int> all(v.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  Interval ci = BootstrapInterval(static_cast<int>(v.size()), mean, 500, 3);
  EXPECT_LT(ci.low, mean(all));
  EXPECT_GT(ci.high, mean(all));
  EXPECT_LT(ci.high - ci.low, 0.2);
  Interval constant = BootstrapInterval(10, [](const std::vector<int>&) { return 2.0; }, 50, 1);
  EXPECT_EQ(constant.low, 2.0);
  EXPECT_EQ(constant.high, 2.0);
}

}  // namespace
}  // namespace kvserve
