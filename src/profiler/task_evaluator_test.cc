// Copyright kvserve authors. Tests of the task evaluator (QualityEvaluator
// behind the profiler's Evaluator) on a tiny random-weight model and a
// generated workload, and of the equal-weight MixedEvaluator.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvserve/profiler.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

// A tiny model and an exact-match workload whose answers are the model's own
// greedy continuation (so "none" scores 1 on every sample).
class TaskEvaluatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::TempDir("task_evaluator"));
    RandomModelSpec spec;
    spec.seed = 23;
    ASSERT_TRUE(WriteRandomModel(*dir_ + "/model", spec).ok());
    auto model = Model::Load(*dir_ + "/model");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_TRUE(testing::WriteGreedyWorkload(**model, *dir_ + "/tiny.jsonl", 6, 17));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  void SetUp() override {
    auto q = QualityEvaluator::Create(*dir_ + "/model", RuntimeOptions{1});
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    quality_ = std::move(q).value();
    auto samples = LoadWorkload(*dir_ + "/tiny.jsonl");
    ASSERT_TRUE(samples.ok()) << samples.status().ToString();
    samples_ = std::move(*samples);
  }

  std::unique_ptr<TaskEvaluator> Make(int n, uint64_t seed, const std::string& cache = "",
                                      const std::string& tag = "",
                                      const std::vector<EvalSample>* samples = nullptr) {
    TaskEvaluatorOptions o;
    o.samples = n;
    o.seed = seed;
    o.cache_dir = cache;
    o.bootstrap_resamples = 200;
    o.sample_tag = tag;
    auto ev = TaskEvaluator::Create(quality_.get(), "tiny", samples ? *samples : samples_, o);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    return ev.ok() ? std::move(ev).value() : nullptr;
  }

  static std::string* dir_;
  std::unique_ptr<QualityEvaluator> quality_;
  std::vector<EvalSample> samples_;
};
std::string* TaskEvaluatorTest::dir_ = nullptr;

TEST_F(TaskEvaluatorTest, HeldOutEvaluatorHasItsOwnNameAndSampleSet) {
  const std::vector<EvalSample> held = *HeldOutSamples(samples_, 3, 9);
  ASSERT_EQ(held.size(), samples_.size() - 3);
  auto search = Make(3, 9);
  auto holdout = Make(3, 9, "", "holdout", &held);
  ASSERT_NE(search, nullptr);
  ASSERT_NE(holdout, nullptr);
  EXPECT_EQ(holdout->name(), "task:tiny:holdout:n=3:seed=9");
  EXPECT_NE(holdout->sample_set(), search->sample_set());  // never answered from the other set
  auto q = holdout->Evaluate(Profile());
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  std::set<std::string> held_ids;
  for (const EvalSample& h : held) held_ids.insert(h.id);
  ASSERT_EQ(holdout->last_report()->samples.size(), 3u);
  for (const SampleScore& s : holdout->last_report()->samples)
    EXPECT_EQ(held_ids.count(s.id), 1u) << s.id << " was scored but is not held out";
}

TEST_F(TaskEvaluatorTest, NoneIsFullQualityAndNotAProxy) {
  auto ev = Make(4, 9);
  ASSERT_NE(ev, nullptr);
  EXPECT_FALSE(ev->is_proxy());
  EXPECT_EQ(ev->name(), "task:tiny:n=4:seed=9");
  EXPECT_NE(ev->sample_set().find(quality_->model_fingerprint()), std::string::npos);
  auto q = ev->Evaluate(Profile());
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->quality, 1.0);
  EXPECT_EQ(q->ci_half_width, 0.0);
  EXPECT_EQ(q->samples, 4);
  ASSERT_NE(ev->last_report(), nullptr);
  EXPECT_EQ(ev->last_report()->samples_scored, 4);
}

TEST_F(TaskEvaluatorTest, LossyProfilesGiveFiniteBoundedQualityWithOrderedInterval) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 3; ++trial) {
    const int bits_key = 1 + static_cast<int>(rng() % 2);
    const int bits_value = 1 + static_cast<int>(rng() % 2);
    auto profile = Profile::Parse(
        fmt::format("identity+uniform(k={},v={})+pack", bits_key, bits_value));
    ASSERT_TRUE(profile.ok());
    auto ev = Make(0, rng() % 100);
    ASSERT_NE(ev, nullptr);
    auto q = ev->Evaluate(*profile);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_TRUE(std::isfinite(q->quality));
    EXPECT_GE(q->quality, 0.0);
    EXPECT_LE(q->quality, 1.5);
    EXPECT_GE(q->ci_half_width, 0.0);
    const QualityReport* r = ev->last_report();
    ASSERT_NE(r, nullptr);
    EXPECT_LE(r->relative_ci.low, r->relative_ci.high);
    EXPECT_NEAR(q->ci_half_width, (r->relative_ci.high - r->relative_ci.low) / 2, 1e-12);
    EXPECT_EQ(q->low, r->relative_ci.low);  // the interval's own ends, not a symmetric guess
    EXPECT_EQ(q->high, r->relative_ci.high);
    EXPECT_EQ(q->LowerBound(), r->relative_ci.low);
    const CodecMetrics m = TaskCodecMetrics(*r);
    EXPECT_GT(m.compression_ratio, 1.5);  // <= 2-bit codes vs f16
    EXPECT_GE(m.encode_bytes_per_second, 0.0);
    // Deterministic: the same profile and options give the same number.
    auto again = ev->Evaluate(*profile);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->quality, q->quality);
    EXPECT_EQ(again->ci_half_width, q->ci_half_width);
  }
}

// Counts calls into the wrapped evaluator.
class CountingEvaluator final : public Evaluator {
 public:
  explicit CountingEvaluator(Evaluator* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  bool is_proxy() const override { return inner_->is_proxy(); }
  Result<QualityEstimate> Evaluate(const Profile& p) override {
    ++calls;
    return inner_->Evaluate(p);
  }
  int calls = 0;

 private:
  Evaluator* inner_;
};

TEST_F(TaskEvaluatorTest, SecondEvaluationComesFromTheResultsDatabase) {
  const std::string cache = *dir_ + "/prefill-cache";
  auto ev = Make(3, 5, cache);
  ASSERT_NE(ev, nullptr);
  CountingEvaluator counting(ev.get());
  auto db = ResultsDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  int reused = 0;
  auto cached = MakeCachingEvaluator(&counting, db->get(),
                                     {"tiny-model", "tiny", "", ev->sample_set(), ""}, &reused);
  auto profile = Profile::Parse("kivi-2");
  ASSERT_TRUE(profile.ok());
  auto first = cached->Evaluate(*profile);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = cached->Evaluate(*profile);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(counting.calls, 1);
  EXPECT_EQ(reused, 1);
  EXPECT_EQ(second->quality, first->quality);
  EXPECT_EQ(second->ci_half_width, first->ci_half_width);
  EXPECT_EQ(second->samples, 3);
  auto row = (*db)->Get({"tiny-model", "tiny", profile->ToString(), ev->sample_set(), ev->name()});
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  ASSERT_TRUE(row->quality.has_value());
  EXPECT_EQ(row->quality->quality, first->quality);
  // The prefill cache was filled by the first evaluation only.
  EXPECT_EQ(quality_->prefills(), 3);
}

TEST_F(TaskEvaluatorTest, CodecKvIsARealPrefilledKvInTheWireDtype) {
  auto ev = Make(0, 2);
  ASSERT_NE(ev, nullptr);
  std::string description;
  auto kv = ev->CodecKv(32, &description);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->dtype(), DType::kF16);
  EXPECT_EQ(kv->shape().tokens, 32);
  EXPECT_EQ(kv->shape().layers, quality_->model().config().layers);
  EXPECT_NE(description.find("tiny"), std::string::npos);
  auto whole = ev->CodecKv(0);
  ASSERT_TRUE(whole.ok());
  EXPECT_GT(whole->shape().tokens, 48);  // BOS + a prompt of >= 48 tokens
  // The cut is a prefix of the whole cache.
  const KvView a = kv->view(), b = whole->view();
  for (int l = 0; l < a.shape.layers; ++l)
    for (int t = 0; t < a.shape.tokens; ++t)
      EXPECT_EQ(std::memcmp(a.At(l, 1, 0, t, 0), b.At(l, 1, 0, t, 0), a.shape.head_dim * 2), 0);
  auto meter = MakeKvCodecMeter(whole->view(), nullptr);
  auto m = meter->Measure(*Profile::Parse("identity+uniform(k=2,v=2)+pack"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->compression_ratio, 1.0);
}

// An evaluator answering a fixed estimate per profile spec.
class FixedEvaluator final : public Evaluator {
 public:
  FixedEvaluator(std::string name, bool proxy, QualityEstimate q)
      : name_(std::move(name)), proxy_(proxy), q_(q) {}
  std::string name() const override { return name_; }
  bool is_proxy() const override { return proxy_; }
  Result<QualityEstimate> Evaluate(const Profile&) override { return q_; }

 private:
  std::string name_;
  bool proxy_;
  QualityEstimate q_;
};

TEST(MixedEvaluatorTest, MeanQualityAndCombinedHalfWidth) {
  std::mt19937_64 rng(44);
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  for (int trial = 0; trial < 20; ++trial) {
    const int parts = 1 + static_cast<int>(rng() % 4);
    std::vector<std::unique_ptr<FixedEvaluator>> owned;
    std::vector<Evaluator*> raw;
    double sum = 0, sum_sq = 0;
    int samples = 0;
    bool any_proxy = false;
    for (int i = 0; i < parts; ++i) {
      QualityEstimate q{0.5 + 0.6 * uniform(), 0.1 * uniform(), 1 + static_cast<int>(rng() % 50)};
      const bool proxy = rng() % 3 == 0;
      any_proxy |= proxy;
      sum += q.quality, sum_sq += q.ci_half_width * q.ci_half_width, samples += q.samples;
      owned.push_back(std::make_unique<FixedEvaluator>("w" + std::to_string(i), proxy, q));
      raw.push_back(owned.back().get());
    }
    MixedEvaluator mixed(raw);
    auto q = mixed.Evaluate(Profile());
    ASSERT_TRUE(q.ok());
    EXPECT_NEAR(q->quality, sum / parts, 1e-12);
    EXPECT_NEAR(q->ci_half_width, std::sqrt(sum_sq) / parts, 1e-12);
    EXPECT_EQ(q->samples, samples);
    EXPECT_EQ(mixed.is_proxy(), any_proxy);
    EXPECT_EQ(mixed.last_parts().size(), static_cast<size_t>(parts));
    EXPECT_EQ(mixed.name().rfind("mixed:w0", 0), 0u);
  }
  MixedEvaluator empty(std::vector<Evaluator*>{});
  EXPECT_FALSE(empty.Evaluate(Profile()).ok());
}

// The lower-end wrapper hands the search the interval's lower end: `low`
// when the evaluator knows it, else quality - half width; nothing else moves.
TEST(LowerEndEvaluatorTest, QualityIsTheIntervalsLowerEnd) {
  std::mt19937_64 rng(45);
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  for (int trial = 0; trial < 20; ++trial) {
    QualityEstimate q{0.5 + 0.6 * uniform(), 0.1 * uniform(), 1 + static_cast<int>(rng() % 50)};
    const bool known_ends = trial % 2 == 0;
    if (known_ends) q.low = q.quality - 0.2 * uniform(), q.high = q.quality + 0.1;
    FixedEvaluator inner("task:w", false, q);
    auto lower = MakeLowerEndEvaluator(&inner);
    auto got = lower->Evaluate(Profile());
    ASSERT_TRUE(got.ok());
    EXPECT_DOUBLE_EQ(got->quality, known_ends ? q.low : q.quality - q.ci_half_width);
    EXPECT_DOUBLE_EQ(got->LowerBound(), got->quality);
    EXPECT_EQ(got->samples, q.samples);
    EXPECT_EQ(lower->name(), "task:w:lower-end");
    EXPECT_FALSE(lower->is_proxy());
  }
}

// The database key names what the subset holds: the same samples give the
// same key, a sample with other tokens another one.
TEST_F(TaskEvaluatorTest, SampleSetChangesWithTheSubsetsContent) {
  auto a = Make(4, 9), b = Make(4, 9);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->sample_set(), b->sample_set());
  std::mt19937 rng(31);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<EvalSample> changed = samples_;
    EvalSample& s = changed[rng() % changed.size()];
    std::vector<int32_t>& ids = rng() % 2 ? s.prompt_ids : s.answer_ids;
    ids[rng() % ids.size()] ^= 1;
    // All samples are scored, so the changed one is in the subset.
    auto c = Make(static_cast<int>(changed.size()), 9, "", "", &changed);
    auto d = Make(static_cast<int>(samples_.size()), 9);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(d, nullptr);
    EXPECT_NE(c->sample_set(), d->sample_set()) << "trial " << trial;
  }
}

}  // namespace
}  // namespace kvserve
