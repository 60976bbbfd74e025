// Copyright kvserve authors. MeasureCandidates: every profile measured once,
// stored, read back on a rerun; errors stop the loop with context.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kvserve/profiler.h"

namespace kvserve {
namespace {

// Seeded metrics per spec; counts the calls and fails on `fail_spec`.
class CountingMeter final : public CodecMeter {
 public:
  explicit CountingMeter(uint64_t seed) : rng_(seed) {}
  Result<CodecMetrics> Measure(const Profile& p) override {
    ++calls;
    if (p.ToString() == fail_spec) return Status::Internal("meter broke");
    CodecMetrics m{1.0 + static_cast<double>(rng_() % 1000) / 100, 1e9 + static_cast<double>(rng_() % 1000),
                   2e9, 0};
    given[p.ToString()] = m;
    return m;
  }
  int calls = 0;
  std::string fail_spec;
  std::map<std::string, CodecMetrics> given;

 private:
  std::mt19937_64 rng_;
};

StrategySpace KiviSpace() {
  std::vector<Profile> profiles;
  for (int k = 1; k <= 4; ++k)
    for (int v = 1; v <= 4; ++v)
      profiles.push_back(*Profile::Parse("identity+kivi(k=" + std::to_string(k) + ",v=" + std::to_string(v) +
                                         ")+pack"));
  return *StrategySpace::FromProfiles(std::move(profiles));
}

TEST(MeasureCandidates, MeasuresEachProfileOnceAndReadsThemBackOnARerun) {
  const StrategySpace space = KiviSpace();
  auto db = ResultsDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  const EvaluationKey scope{"m", "w", "", "kv=abc", ""};
  CountingMeter meter(31);
  std::vector<std::pair<int, size_t>> notes;
  auto first = MeasureCandidates(space, meter, **db, scope, 5, [&](int measured, int from_db, size_t done) {
    notes.push_back({measured, done});
    EXPECT_EQ(from_db, 0);
    return Status::Ok();
  });
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->size(), space.profiles().size());
  EXPECT_EQ(meter.calls, space.size());
  EXPECT_EQ(notes, (std::vector<std::pair<int, size_t>>{{5, 5}, {10, 10}, {15, 15}}));
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*first)[i].profile.ToString(), space.profiles()[i].ToString());
    EXPECT_EQ((*first)[i].codec.compression_ratio,
              meter.given[space.profiles()[i].ToString()].compression_ratio);
  }
  // A rerun on the same scope measures nothing; another sample set measures again.
  CountingMeter again(32);
  auto second = MeasureCandidates(space, again, **db, scope);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(again.calls, 0);
  for (size_t i = 0; i < second->size(); ++i)
    EXPECT_EQ((*second)[i].codec.compression_ratio, (*first)[i].codec.compression_ratio);
  CountingMeter other(33);
  ASSERT_TRUE(MeasureCandidates(space, other, **db, {"m", "w", "", "kv=def", ""}).ok());
  EXPECT_EQ(other.calls, space.size());
}

TEST(MeasureCandidates, ErrorsStopTheLoopAndKeepWhatWasMeasured) {
  const StrategySpace space = KiviSpace();
  auto db = ResultsDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  const EvaluationKey scope{"m", "w", "", "s", ""};
  CountingMeter meter(34);
  meter.fail_spec = space.profiles()[6].ToString();
  auto r = MeasureCandidates(space, meter, **db, scope);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find(meter.fail_spec), std::string::npos);
  EXPECT_EQ(meter.calls, 7);
  // The six measured before the failure are stored.
  CountingMeter rerun(35);
  ASSERT_TRUE(MeasureCandidates(space, rerun, **db, scope).ok());
  EXPECT_EQ(rerun.calls, space.size() - 6);
  // A progress callback's error is returned as is.
  CountingMeter stopped(36);
  auto s = MeasureCandidates(space, stopped, **db, {"m", "w", "", "t", ""}, 2,
                             [](int, int, size_t) { return Status::Unavailable("interrupted"); });
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(stopped.calls, 2);
}

}  // namespace
}  // namespace kvserve
