// Copyright kvserve authors. Decision latency of the online controller
// (issue 6: p99 <= 5 us). Each iteration is one Decide() (plus, for the
// bandit, one Observe() with latency and codec time) on a request drawn from
// a fixed seeded pool, with a bandwidth uncertainty (risk guard on), over
// the example profile table and over random 32-profile tables. The
// *_Distribution benchmarks time every call individually and report p50 and
// p99 in microseconds as counters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

double LogUniform(std::mt19937_64& rng, double lo, double hi) {
  return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
}

ProfileTable MakeTable(int profiles) {
  if (profiles == 0) {
    const std::string f = __FILE__;
    Result<ProfileTable> t =
        ProfileTable::Load(f.substr(0, f.rfind("/bench/")) + "/configs/profile_table.example.json");
    if (t.ok()) return *t;
    profiles = 9;
  }
  std::mt19937_64 rng(7);
  std::vector<ProfileCost> rows;
  for (int i = 0; i < profiles; ++i) {
    ProfileCost p;
    p.spec = "p" + std::to_string(i);
    p.compression_ratio = LogUniform(rng, 1.2, 16.0);
    p.encode_bytes_per_second = LogUniform(rng, 5e8, 5e10);
    p.decode_bytes_per_second = LogUniform(rng, 5e8, 5e10);
    p.overhead_seconds = LogUniform(rng, 1e-5, 3e-3);
    for (const char* w : {"chat", "retrieval", "code"}) {
      p.quality[w] = std::round(LogUniform(rng, 0.9, 1.0) * 1000) / 1000;
    }
    rows.push_back(p);
  }
  return ProfileTable::FromRows(rows).value();
}

std::vector<ControllerRequest> MakeRequests(int workloads) {
  std::mt19937_64 rng(8);
  std::vector<ControllerRequest> out(4096);
  for (ControllerRequest& r : out) {
    r.workload = static_cast<int>(rng() % static_cast<uint64_t>(workloads));
    r.kv_bytes = LogUniform(rng, 1e6, 1e9);
    r.bandwidth = LogUniform(rng, GbpsToBytesPerSecond(1), GbpsToBytesPerSecond(100));
    r.quality_min = 0.95 + 0.01 * static_cast<double>(rng() % 5);
    r.slo_seconds = 2.0;
    // The spread a BandwidthEstimator reports: exercises the risk guard.
    r.bandwidth_log_sigma = LogUniform(rng, 0.02, 0.2);
  }
  return out;
}

std::unique_ptr<Controller> MakeController(const benchmark::State& state) {
  ControllerOptions o;
  o.bandit = state.range(1) != 0;
  if (state.range(2) != 0) o.model = {LatencyModelKind::kStreamed, 32};
  return std::move(Controller::Create(MakeTable(static_cast<int>(state.range(0))), o).value());
}

// Observed latency 5% over the prediction, codec time reported (half of it),
// so the residuals and the codec-drift estimate are updated on every call.
Observation Feedback(const Decision& d, double now) {
  return {d.predicted_seconds * 1.05 + 1e-9, d.predicted_seconds * 0.5, now};
}

// args: profiles (0 = example table), bandit, streamed
void BM_Decide(benchmark::State& state) {
  auto c = MakeController(state);
  const auto requests = MakeRequests(static_cast<int>(c->table().workloads().size()));
  size_t i = 0;
  for (auto _ : state) {
    ControllerRequest r = requests[i++ % requests.size()];
    r.now_seconds = static_cast<double>(i) * 1e-3;
    Result<Decision> d = c->Decide(r);
    benchmark::DoNotOptimize(d);
    if (d.ok()) (void)c->Observe(*d, Feedback(*d, r.now_seconds));
  }
}

void BM_DecideDistribution(benchmark::State& state) {
  auto c = MakeController(state);
  const auto requests = MakeRequests(static_cast<int>(c->table().workloads().size()));
  std::vector<double> ns;
  ns.reserve(1 << 20);
  size_t i = 0;
  for (auto _ : state) {
    ControllerRequest r = requests[i++ % requests.size()];
    r.now_seconds = static_cast<double>(i) * 1e-3;
    const auto start = std::chrono::steady_clock::now();
    Result<Decision> d = c->Decide(r);
    const auto stop = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(d);
    if (ns.size() < ns.capacity()) {
      ns.push_back(std::chrono::duration<double, std::nano>(stop - start).count());
    }
    if (d.ok()) (void)c->Observe(*d, Feedback(*d, r.now_seconds));
  }
  if (ns.empty()) return;
  std::sort(ns.begin(), ns.end());
  state.counters["p50_us"] = ns[ns.size() / 2] / 1e3;
  state.counters["p99_us"] = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)] / 1e3;
  state.counters["max_us"] = ns.back() / 1e3;
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"profiles", "bandit", "streamed"});
  for (int profiles : {0, 32}) {
    b->Args({profiles, 1, 0});
    b->Args({profiles, 0, 0});
    b->Args({profiles, 1, 1});
  }
}

BENCHMARK(BM_Decide)->Apply(Args);
BENCHMARK(BM_DecideDistribution)->Apply(Args)->Iterations(200000);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
