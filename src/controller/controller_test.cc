// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "controller/test_util.h"
#include "kvserve/controller.h"

namespace kvserve {
namespace {

using controller_test::BruteForceMin;
using controller_test::LogUniform;
using controller_test::RandomTable;

ControllerRequest RandomRequest(std::mt19937_64& rng, int workloads) {
  ControllerRequest r;
  r.workload = static_cast<int>(rng() % static_cast<uint64_t>(workloads));
  r.kv_bytes = LogUniform(rng, 1e5, 1e10);
  r.bandwidth = LogUniform(rng, 1e7, 1e11);
  r.quality_min = std::round(std::uniform_real_distribution<double>(0.8, 1.0)(rng) * 100) / 100;
  return r;
}

// The envelope query equals the brute-force argmin (by value; ids may differ
// only on exact ties) over thousands of random tables, sizes and bandwidths.
TEST(ControllerTest, ModelOptimumEqualsBruteForce) {
  std::mt19937_64 rng(31);
  for (LatencyModelKind kind : {LatencyModelKind::kSerial, LatencyModelKind::kStreamed}) {
    for (int trial = 0; trial < 1500; ++trial) {
      const ProfileTable table = RandomTable(rng, 1 + static_cast<int>(rng() % 14), 2);
      ControllerOptions o;
      o.model = {kind, 1 + static_cast<int>(rng() % 48)};
      auto c = Controller::Create(table, o);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      for (int q = 0; q < 20; ++q) {
        const ControllerRequest r = RandomRequest(rng, 2);
        int expect = 0;
        const double best =
            BruteForceMin(table, o.model, r.workload, r.quality_min, r.kv_bytes, r.bandwidth, &expect);
        Result<int> got = (*c)->ModelOptimum(r);
        ASSERT_TRUE(got.ok());
        const double t = PredictSeconds(o.model, table.profile(*got), r.kv_bytes, r.bandwidth);
        ASSERT_NEAR(t, best, 1e-9 * best) << "trial " << trial;
        if (t != best) {
          ASSERT_EQ(*got, expect);
        }
        ASSERT_GE(table.Quality(*got, r.workload), r.quality_min);
      }
    }
  }
}

// With the bandit on and arbitrary (even adversarial) feedback, latency and
// codec times alike: never a profile below the floor, never a profile beyond
// its benefit threshold.
TEST(ControllerTest, FloorAndBenefitThresholdAlwaysHold) {
  std::mt19937_64 rng(32);
  for (int trial = 0; trial < 300; ++trial) {
    const ProfileTable table = RandomTable(rng, 1 + static_cast<int>(rng() % 14), 3);
    ControllerOptions o;
    o.epsilon = 0.3;
    o.cooldown_seconds = 0.5;
    if (trial % 2) o.model = {LatencyModelKind::kStreamed, 32};
    auto c = Controller::Create(table, o);
    ASSERT_TRUE(c.ok());
    for (int q = 0; q < 100; ++q) {
      ControllerRequest r = RandomRequest(rng, 3);
      r.now_seconds = q * 0.1;
      r.slo_seconds = rng() % 3 == 0 ? LogUniform(rng, 1e-3, 10.0) : kInfinity;
      Result<Decision> d = (*c)->Decide(r);
      ASSERT_TRUE(d.ok());
      ASSERT_GE(table.Quality(d->profile, r.workload), r.quality_min) << d->profile;
      if (d->feasible && d->profile != ProfileTable::kRaw) {
        const ProfileCost& p = table.profile(d->profile);
        ASSERT_LT(r.bandwidth, BenefitThresholdForSize(o.model, p, r.kv_bytes));
        if (o.model.kind == LatencyModelKind::kSerial) {
          ASSERT_LT(r.bandwidth, BenefitThreshold(p));
        }
      }
      Observation obs;
      obs.observed_seconds = d->predicted_seconds * LogUniform(rng, 0.3, 5.0) + 1e-9;
      // Codec times from 5x faster to 5x slower than the table, or none.
      obs.codec_seconds = rng() % 4 == 0 ? -1.0 : obs.observed_seconds * LogUniform(rng, 0.2, 5.0);
      obs.now_seconds = r.now_seconds;
      ASSERT_TRUE((*c)->Observe(*d, obs).ok());
    }
  }
}

// The risk guard: with bandwidth uncertainty sigma a compressed profile is
// chosen only if it also beats raw at B * exp(risk_sigmas * sigma); with
// nothing measured (sigma = inf) every feasible decision is raw. Random
// tables, requests, sigmas, both models, bandit on and off.
TEST(ControllerTest, RiskGuardCompressesOnlyWhenItWinsAtThePessimisticBandwidth) {
  std::mt19937_64 rng(34);
  int compressed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ProfileTable table = RandomTable(rng, 1 + static_cast<int>(rng() % 14), 2);
    ControllerOptions o;
    o.bandit = trial % 3 != 0;
    o.risk_sigmas = LogUniform(rng, 0.5, 4.0);
    if (trial % 2) o.model = {LatencyModelKind::kStreamed, 32};
    auto c = Controller::Create(table, o);
    ASSERT_TRUE(c.ok());
    for (int q = 0; q < 50; ++q) {
      ControllerRequest r = RandomRequest(rng, 2);
      r.now_seconds = q * 0.1;
      const int kind = static_cast<int>(rng() % 4);
      r.bandwidth_log_sigma = kind == 0 ? 0.0 : kind == 1 ? kInfinity : LogUniform(rng, 0.01, 1.0);
      Result<Decision> d = (*c)->Decide(r);
      ASSERT_TRUE(d.ok());
      ASSERT_GE(table.Quality(d->profile, r.workload), r.quality_min);
      if (!d->feasible || d->profile == ProfileTable::kRaw) continue;
      ASSERT_NE(kind, 1) << "compressed with nothing measured";
      ++compressed;
      const double upper = r.bandwidth * std::exp(o.risk_sigmas * r.bandwidth_log_sigma);
      ASSERT_LT(PredictSeconds(o.model, table.profile(d->profile), r.kv_bytes, upper),
                r.kv_bytes / upper);
      ASSERT_TRUE((*c)->Observe(*d, d->predicted_seconds, r.now_seconds).ok());
    }
  }
  EXPECT_GT(compressed, 1000);  // the property is not vacuous
}

// Codec times that show every codec D times slower than profiled (after a
// first observation at the profiled speed): the next decisions equal the
// brute-force argmin of the drifted latencies D * T(V, B * D) over the
// floor-feasible profiles and raw.
TEST(ControllerTest, ObservedCodecDriftMovesTheOptimum) {
  std::mt19937_64 rng(35);
  for (int trial = 0; trial < 200; ++trial) {
    const ProfileTable table = RandomTable(rng, 2 + static_cast<int>(rng() % 12), 1);
    ControllerOptions o;
    o.epsilon = 0.0;
    o.candidates = 3;
    auto c = Controller::Create(table, o);
    ASSERT_TRUE(c.ok());
    const double drift = LogUniform(rng, 1.3, 4.0);
    // Find a request served compressed and report its codec time twice.
    bool reported = false;
    for (int attempt = 0; attempt < 200 && !reported; ++attempt) {
      ControllerRequest r = RandomRequest(rng, 1);
      Result<Decision> d = (*c)->Decide(r);
      ASSERT_TRUE(d.ok());
      if (d->profile == ProfileTable::kRaw || !d->feasible) continue;
      const ProfileCost& p = table.profile(d->profile);
      const double codec = p.overhead_seconds + r.kv_bytes * p.CodecSecondsPerByte();
      ASSERT_TRUE((*c)->Observe(*d, {d->predicted_seconds, codec, 0.0}).ok());
      ASSERT_TRUE((*c)->Observe(*d, {d->predicted_seconds, codec * drift, 0.0}).ok());
      reported = true;
    }
    if (!reported) continue;
    for (int q = 0; q < 20; ++q) {
      const ControllerRequest r = RandomRequest(rng, 1);
      double best = r.kv_bytes / r.bandwidth;
      for (int p = 1; p < table.size(); ++p) {
        if (!(table.Quality(p, r.workload) >= r.quality_min)) continue;
        best = std::min(best, drift * PredictSeconds(o.model, table.profile(p), r.kv_bytes,
                                                     r.bandwidth * drift));
      }
      Result<Decision> d = (*c)->Decide(r);
      ASSERT_TRUE(d.ok());
      if (!d->feasible) continue;
      const double got = drift * PredictSeconds(o.model, table.profile(d->profile), r.kv_bytes,
                                                r.bandwidth * drift);
      ASSERT_NEAR(got, best, 1e-9 * best) << "trial " << trial << " q " << q;
    }
  }
}

ProfileTable TwoProfileTable() {
  ProfileCost fast;  // good at high bandwidth
  fast.spec = "fast";
  fast.compression_ratio = 2.0;
  fast.encode_bytes_per_second = fast.decode_bytes_per_second = 2e10;
  fast.quality = {{"w", 0.99}};
  ProfileCost small;  // good at low bandwidth
  small.spec = "small";
  small.compression_ratio = 8.0;
  small.encode_bytes_per_second = small.decode_bytes_per_second = 4e9;
  small.quality = {{"w", 0.95}};
  return ProfileTable::FromRows({fast, small}).value();
}

// A controller over TwoProfileTable() that cools a profile down for
// `cooldown_seconds` after 2 SLO violations in its last 4 uses.
std::unique_ptr<Controller> CoolingController(FallbackPolicy fallback, double cooldown_seconds) {
  ControllerOptions o;
  o.fallback = fallback;
  o.epsilon = 0.0;
  o.cooldown_violations = 2;
  o.cooldown_window = 4;
  o.cooldown_seconds = cooldown_seconds;
  auto c = Controller::Create(TwoProfileTable(), o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// 1 GB of KV at 0.8 Gbps with floor 0.9, where "small" is the optimum.
ControllerRequest GigabyteAt800Mbps(double slo_seconds) {
  ControllerRequest r;
  r.kv_bytes = 1e9;
  r.bandwidth = 1e8;
  r.quality_min = 0.9;
  r.slo_seconds = slo_seconds;
  return r;
}

TEST(ControllerTest, FallbackWhenNothingMeetsTheSlo) {
  for (FallbackPolicy f : {FallbackPolicy::kRaw, FallbackPolicy::kMostConservative,
                           FallbackPolicy::kRecompute, FallbackPolicy::kFastest}) {
    ControllerOptions o;
    o.fallback = f;
    o.epsilon = 0.0;
    auto c = Controller::Create(TwoProfileTable(), o);
    ASSERT_TRUE(c.ok());
    ControllerRequest r;
    r.kv_bytes = 1e9;
    r.bandwidth = 1e8;
    r.quality_min = 0.9;
    r.slo_seconds = 1e-3;  // impossible
    Result<Decision> d = (*c)->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->feasible);
    switch (f) {
      case FallbackPolicy::kRaw:
        EXPECT_EQ(d->profile, ProfileTable::kRaw);
        EXPECT_EQ(d->action, ControllerAction::kSend);
        break;
      case FallbackPolicy::kMostConservative:
        EXPECT_EQ(d->profile, 1);  // "fast": highest quality >= floor
        break;
      case FallbackPolicy::kRecompute:
        EXPECT_EQ(d->action, ControllerAction::kRecompute);
        break;
      case FallbackPolicy::kFastest:
        EXPECT_EQ(d->profile, 2);  // "small": the optimum at 0.8 Gbps
        EXPECT_EQ(d->action, ControllerAction::kSend);
        break;
    }
    // The most conservative profile still respects the floor.
    r.quality_min = 0.995;
    d = (*c)->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_GE(TwoProfileTable().Quality(d->profile, 0), 0.995);
    // With a generous SLO the decision is feasible again.
    r.slo_seconds = 100.0;
    r.quality_min = 0.9;
    d = (*c)->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d->feasible);
    EXPECT_EQ(d->profile, 2);  // "small" at 0.8 Gbps
  }
}

// kFastest: a request no profile can serve within its SLO gets the profile
// a generous SLO would have got (not raw), marked infeasible; its foreseen
// misses never cool that profile down.
TEST(ControllerTest, FastestFallbackSendsTheOptimumAndItsMissesCoolNothingDown) {
  std::unique_ptr<Controller> c = CoolingController(FallbackPolicy::kFastest, 100.0);
  ASSERT_TRUE(c);
  ControllerRequest r = GigabyteAt800Mbps(100.0);
  Result<Decision> generous = c->Decide(r);
  ASSERT_TRUE(generous.ok());
  ASSERT_TRUE(generous->feasible);
  ASSERT_EQ(generous->profile, 2);  // "small" at 0.8 Gbps
  r.slo_seconds = 1e-3;  // impossible
  for (int i = 0; i < 4; ++i) {
    r.now_seconds = i;
    Result<Decision> d = c->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->feasible);
    EXPECT_EQ(d->action, ControllerAction::kSend);
    EXPECT_EQ(d->profile, generous->profile) << i;
    // As predicted, and so far over the budget: a miss, but a foreseen one.
    ASSERT_TRUE(c->Observe(*d, d->predicted_seconds, r.now_seconds).ok());
  }
}

// kFastest over random tables and requests: an impossible SLO decides as a
// generous one does (same profile, sent), only marked infeasible.
TEST(ControllerTest, FastestFallbackDecidesAsAGenerousSloOnRandomTables) {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 300; ++trial) {
    const ProfileTable table = RandomTable(rng, 1 + static_cast<int>(rng() % 10), 2);
    ControllerOptions o;
    o.fallback = FallbackPolicy::kFastest;
    o.epsilon = 0.0;
    auto generous = Controller::Create(table, o);
    auto tight = Controller::Create(table, o);
    ASSERT_TRUE(generous.ok() && tight.ok());
    ControllerRequest r = RandomRequest(rng, 2);
    r.slo_seconds = 1e9;
    Result<Decision> a = (*generous)->Decide(r);
    r.slo_seconds = 1e-12;
    Result<Decision> b = (*tight)->Decide(r);
    ASSERT_TRUE(a.ok() && b.ok()) << "trial " << trial;
    EXPECT_TRUE(a->feasible);
    EXPECT_FALSE(b->feasible) << "trial " << trial;
    EXPECT_EQ(b->action, ControllerAction::kSend);
    EXPECT_EQ(b->profile, a->profile) << "trial " << trial;
  }
}

TEST(ControllerTest, CooldownAfterKViolationsInMUses) {
  std::unique_ptr<Controller> c = CoolingController(FallbackPolicy::kRaw, 5.0);
  ASSERT_TRUE(c);
  ControllerRequest r = GigabyteAt800Mbps(2.0);
  Result<Decision> d = c->Decide(r);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->profile, 2);
  // Violations of a tight SLO (1.8 s) by a small margin, so the residual
  // stays small and only the cool-down can exclude the profile.
  Decision tight = *d;
  tight.budget_seconds = 1.8;
  // One violation (within the window) does not cool it down.
  ASSERT_TRUE(c->Observe(tight, 1.85, 0.0).ok());
  ASSERT_TRUE(c->Observe(tight, d->predicted_seconds, 0.0).ok());
  r.slo_seconds = 10.0;
  d = c->Decide(r);
  ASSERT_EQ(d->profile, 2);
  // The second violation in the last 4 uses does.
  ASSERT_TRUE(c->Observe(tight, 1.85, 1.0).ok());
  r.now_seconds = 1.0;
  for (double t : {1.0, 3.0, 5.9}) {
    r.now_seconds = t;
    d = c->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_NE(d->profile, 2) << "t=" << t;
    EXPECT_GE(TwoProfileTable().Quality(d->profile, 0), 0.9);
  }
  r.now_seconds = 6.1;  // cool-down over
  d = c->Decide(r);
  EXPECT_EQ(d->profile, 2);
}

TEST(ControllerTest, ResidualCorrectionSwitchesToTheTrulyFasterNeighbour) {
  ControllerOptions o;
  o.epsilon = 0.0;
  auto c = Controller::Create(TwoProfileTable(), o);
  ASSERT_TRUE(c.ok());
  ControllerRequest r;
  r.kv_bytes = 1e9;
  r.bandwidth = GbpsToBytesPerSecond(2.0);
  r.quality_min = 0.9;
  Result<Decision> d = (*c)->Decide(r);
  ASSERT_EQ(d->profile, 2);
  // "small" is really 3x slower than profiled: after a few observations the
  // controller moves to its neighbour.
  for (int i = 0; i < 5 && d->profile == 2; ++i) {
    ASSERT_TRUE((*c)->Observe(*d, d->predicted_seconds * 3.0, i).ok());
    d = (*c)->Decide(r);
  }
  EXPECT_NE(d->profile, 2);
  // Without the bandit the analytical optimum stays.
  o.bandit = false;
  auto plain = Controller::Create(TwoProfileTable(), o);
  EXPECT_EQ((*plain)->Decide(r)->profile, 2);
}

// A controller on a random table of `profiles` rows, and a random request
// of at least `min_kv_bytes` for it (one workload, floor 0.8).
struct RandomCase {
  ProfileTable table;
  ControllerOptions options;
  std::unique_ptr<Controller> controller;
  ControllerRequest request;
};
RandomCase MakeRandomCase(std::mt19937_64& rng, ControllerOptions o, int profiles,
                          double min_kv_bytes, double min_bandwidth) {
  RandomCase c{RandomTable(rng, profiles, 1), o, nullptr, {}};
  c.controller = Controller::Create(c.table, o).value();
  c.request.kv_bytes = LogUniform(rng, min_kv_bytes, 1e9);
  c.request.bandwidth = LogUniform(rng, min_bandwidth, 1e10);
  c.request.quality_min = 0.8;
  return c;
}

// One bad sample (a latency 20x the prediction: a transfer decided on a
// stale bandwidth, or a hiccup) must not shut the optimum out for good.
// With every later observation exact, the optimum is chosen again and then
// stays the choice (300 random tables where it clearly beats raw and the
// other candidates, both models).
TEST(ControllerTest, BanditRecoversFromOneBadSample) {
  std::mt19937_64 rng(91);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const LatencyModelKind kind = trial % 2 ? LatencyModelKind::kStreamed : LatencyModelKind::kSerial;
    ControllerOptions o;
    o.model = {kind, 16};
    o.learn_codec_drift = false;
    RandomCase rc = MakeRandomCase(rng, o, 6, 1e6, 1e8);
    const ProfileTable& table = rc.table;
    Controller* c = rc.controller.get();
    ControllerRequest& r = rc.request;
    // The optimum must beat raw and every other profile by 25%.
    int best = 0;
    const double t_best = BruteForceMin(table, o.model, 0, r.quality_min, r.kv_bytes, r.bandwidth, &best);
    bool clear = best != ProfileTable::kRaw;
    for (int p = 0; p < table.size() && clear; ++p) {
      if (p == best || (p != 0 && !(table.Quality(p, 0) >= r.quality_min))) continue;
      clear = t_best < 0.8 * PredictSeconds(o.model, table.profile(p), r.kv_bytes, r.bandwidth);
    }
    if (!clear) continue;
    Result<Decision> d = c->Decide(r);
    ASSERT_TRUE(d.ok());
    if (d->profile != best) continue;  // an exploration step
    ++checked;
    ASSERT_TRUE(c->Observe(*d, 20.0 * d->predicted_seconds, 0.0).ok());
    int back = -1, last = 0;
    for (int i = 0; i < 80; ++i) {
      d = c->Decide(r);
      ASSERT_TRUE(d.ok());
      const double truth = PredictSeconds(o.model, table.profile(d->profile), r.kv_bytes, r.bandwidth);
      ASSERT_TRUE(c->Observe(*d, truth, 0.0).ok());
      if (d->profile == best && back < 0) back = i;
      if (i >= 60 && d->profile == best) ++last;
    }
    EXPECT_GE(back, 0) << "trial " << trial << ": the optimum was never chosen again";
    EXPECT_LE(back, 40) << "trial " << trial;
    EXPECT_GE(last, 15) << "trial " << trial << ": the optimum did not stay the choice";
  }
  EXPECT_GT(checked, 20);
}

// A request's own frame sizes replace the table's ratios: a profile whose
// frame for this request is larger than the KV (all raw residual) is never
// chosen, and with a frame the table's ratio predicts the choice is the
// same as without sizes (300 random tables and requests, both models).
TEST(ControllerTest, RequestFrameSizesReplaceTheTableRatio) {
  std::mt19937_64 rng(93);
  for (int trial = 0; trial < 300; ++trial) {
    ControllerOptions o;
    o.model = {trial % 2 ? LatencyModelKind::kStreamed : LatencyModelKind::kSerial, 8};
    o.bandit = trial % 3 != 0;
    RandomCase rc = MakeRandomCase(rng, o, 5, 1e5, 1e7);
    const ProfileTable& table = rc.table;
    Controller* c = rc.controller.get();
    ControllerRequest& r = rc.request;
    std::vector<double> frames(table.size(), 0.0);
    for (int p = 1; p < table.size(); ++p) frames[p] = r.kv_bytes / table.profile(p).compression_ratio;
    r.frame_bytes = frames;
    ControllerRequest plain = r;
    plain.frame_bytes = {};
    EXPECT_EQ(c->ModelOptimum(r).value(), c->ModelOptimum(plain).value()) << trial;
    // Every frame larger than the KV: raw, whatever the table says.
    for (int p = 1; p < table.size(); ++p) frames[p] = r.kv_bytes * 1.01;
    auto d = c->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->profile, ProfileTable::kRaw) << trial;
    EXPECT_EQ(c->ModelOptimum(r).value(), ProfileTable::kRaw) << trial;
  }
  auto c = Controller::Create(RandomTable(rng, 3, 1), {});
  ControllerRequest bad;
  bad.kv_bytes = 1e6;
  bad.bandwidth = 1e9;
  std::vector<double> wrong_size(2, 1.0);
  bad.frame_bytes = wrong_size;
  EXPECT_EQ((*c)->Decide(bad).status().code(), StatusCode::kInvalidArgument);
}

// A decision made at the estimator's prior (10 Gbps) on a link that turns
// out to give 0.1 Gbps: with the measured bandwidth in the observation, the
// residual is the model's error at 0.1 Gbps (none here), so the next
// decision, at the measured bandwidth, is the exact optimum there.
TEST(ControllerTest, ResidualIsTakenAtTheMeasuredBandwidth) {
  std::mt19937_64 rng(94);
  int checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    ControllerOptions o;
    o.epsilon = 0.0;
    o.learn_codec_drift = false;
    ProfileTable table = RandomTable(rng, 5, 1);
    auto c = Controller::Create(table, o);
    ASSERT_TRUE(c.ok());
    ControllerRequest r;
    r.kv_bytes = LogUniform(rng, 1e6, 1e9);
    r.bandwidth = GbpsToBytesPerSecond(10.0);
    r.quality_min = 0.8;
    auto first = (*c)->Decide(r);
    ASSERT_TRUE(first.ok());
    const double link = GbpsToBytesPerSecond(0.1);
    Observation obs;
    obs.observed_seconds = PredictSeconds(o.model, table.profile(first->profile), r.kv_bytes, link);
    obs.bandwidth = link;
    ASSERT_TRUE((*c)->Observe(*first, obs).ok());
    r.bandwidth = link;
    int best = 0;
    BruteForceMin(table, o.model, 0, r.quality_min, r.kv_bytes, link, &best);
    auto next = (*c)->Decide(r);
    ASSERT_TRUE(next.ok());
    if (best == ProfileTable::kRaw && first->profile != ProfileTable::kRaw) continue;
    ++checked;
    EXPECT_NEAR(PredictSeconds(o.model, table.profile(next->profile), r.kv_bytes, link),
                PredictSeconds(o.model, table.profile(best), r.kv_bytes, link),
                1e-9 * PredictSeconds(o.model, table.profile(best), r.kv_bytes, link))
        << trial;
  }
  EXPECT_GT(checked, 100);
}

// With a source in front (a prefill producing the layers) the optimum is the
// brute-force minimum of the movement left after the source, over tables
// that mix streamed profiles with whole-frame ones; a decision remembers the
// source it was made for.
TEST(ControllerTest, SourceTimeEntersTheOptimum) {
  std::mt19937_64 rng(95);
  int moved = 0;
  for (int trial = 0; trial < 600; ++trial) {
    ProfileTable base = RandomTable(rng, 2 + static_cast<int>(rng() % 10), 1);
    std::vector<ProfileCost> rows(base.profiles().begin() + 1, base.profiles().end());
    for (ProfileCost& p : rows) p.streamed = rng() % 3 != 0;
    const ProfileTable table = ProfileTable::FromRowsAndWorkloads(rows, base.workloads()).value();
    ControllerOptions o;
    o.model = {LatencyModelKind::kStreamed, 1 + static_cast<int>(rng() % 48)};
    o.bandit = false;
    auto c = Controller::Create(table, o);
    ASSERT_TRUE(c.ok());
    ControllerRequest r = RandomRequest(rng, 1);
    r.source_seconds = LogUniform(rng, 1e-4, 5.0);
    int expect = 0, without = 0;
    const double best = BruteForceMin(table, o.model, 0, r.quality_min, r.kv_bytes, r.bandwidth, &expect,
                                      r.source_seconds);
    BruteForceMin(table, o.model, 0, r.quality_min, r.kv_bytes, r.bandwidth, &without);
    moved += expect != without;
    const int got = (*c)->ModelOptimum(r).value();
    ASSERT_NEAR(PredictSeconds(o.model, table.profile(got), r.kv_bytes, r.bandwidth, r.source_seconds), best,
                1e-9 * best) << trial;
    auto d = (*c)->Decide(r);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source_seconds, r.source_seconds);
    EXPECT_LE(d->predicted_seconds,
              PredictSeconds(o.model, table.profile(ProfileTable::kRaw), r.kv_bytes, r.bandwidth,
                             r.source_seconds) * (1 + 1e-12));
  }
  EXPECT_GT(moved, 20);  // the source changes the choice often enough to be tested
}

TEST(ControllerTest, RejectsBadArguments) {
  ControllerOptions o;
  o.candidates = 4;
  EXPECT_FALSE(Controller::Create(TwoProfileTable(), o).ok());
  o = {};
  o.cooldown_violations = 5;
  o.cooldown_window = 4;
  EXPECT_FALSE(Controller::Create(TwoProfileTable(), o).ok());
  o = {};
  o.risk_sigmas = -1.0;
  EXPECT_FALSE(Controller::Create(TwoProfileTable(), o).ok());
  auto c = Controller::Create(TwoProfileTable(), {});
  ControllerRequest r;
  r.kv_bytes = 0.0;
  r.bandwidth = 1e9;
  EXPECT_EQ((*c)->Decide(r).status().code(), StatusCode::kInvalidArgument);
  r.kv_bytes = 1e6;
  r.workload = 3;
  EXPECT_EQ((*c)->Decide(r).status().code(), StatusCode::kInvalidArgument);
  r.workload = 0;
  EXPECT_EQ((*c)->Observe(*(*c)->Decide(r), -1.0, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->Observe(*(*c)->Decide(r), {1.0, std::nan(""), 0.0}).code(),
            StatusCode::kInvalidArgument);
  r.bandwidth_log_sigma = -0.1;
  EXPECT_EQ((*c)->Decide(r).status().code(), StatusCode::kInvalidArgument);
  r.bandwidth_log_sigma = 0.0;
  r.source_seconds = -1.0;
  EXPECT_EQ((*c)->Decide(r).status().code(), StatusCode::kInvalidArgument);
  r.source_seconds = std::nan("");
  EXPECT_EQ((*c)->Decide(r).status().code(), StatusCode::kInvalidArgument);
}

TEST(ControllerTest, ConcurrentDecideAndObserve) {
  std::mt19937_64 seed_rng(33);
  const ProfileTable table = RandomTable(seed_rng, 12, 2);
  auto c = Controller::Create(table, {});
  ASSERT_TRUE(c.ok());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 5000; ++i) {
        ControllerRequest r = RandomRequest(rng, 2);
        Result<Decision> d = (*c)->Decide(r);
        if (!d.ok() || table.Quality(d->profile, r.workload) < r.quality_min) ++bad;
        if (d.ok() && !(*c)->Observe(*d, d->predicted_seconds * 1.1 + 1e-9, i).ok()) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvserve
