// Copyright kvserve authors. experiments/trace_replay.h.
#include "experiments/trace_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_set>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/transport.h"

namespace kvserve::lab {
namespace {

// A well-mixed 64-bit value of (seed, key): the block's or request's RNG seed.
uint64_t Mix(uint64_t seed, uint64_t key) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + key + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void AppendRandom(std::vector<int32_t>* out, size_t n, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
}

}  // namespace

Result<std::vector<TraceRecord>> ParseTrace(std::string_view jsonl) {
  std::vector<TraceRecord> out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < jsonl.size();) {
    size_t end = jsonl.find('\n', pos);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("trace line {}: {}", line_no, why));
    };
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    TraceRecord r;
    for (const char* field : {"timestamp", "input_length", "output_length", "hash_ids"})
      if (!j.contains(field)) return bad(fmt::format("no \"{}\"", field));
    if (!j["timestamp"].is_number() || !(j["timestamp"].get<double>() >= 0))
      return bad("timestamp must be a number of milliseconds >= 0");
    if (!j["input_length"].is_number_integer() || j["input_length"].get<int64_t>() < 1 ||
        j["input_length"].get<int64_t>() > (1 << 24))
      return bad("input_length must be an integer in [1, 2^24]");
    if (!j["output_length"].is_number_integer() || j["output_length"].get<int64_t>() < 0 ||
        j["output_length"].get<int64_t>() > (1 << 24))
      return bad("output_length must be an integer in [0, 2^24]");
    if (!j["hash_ids"].is_array()) return bad("hash_ids must be an array");
    r.arrival_seconds = j["timestamp"].get<double>() / 1e3;
    r.input_tokens = static_cast<int>(j["input_length"].get<int64_t>());
    r.output_tokens = static_cast<int>(j["output_length"].get<int64_t>());
    for (const auto& id : j["hash_ids"]) {
      if (!id.is_number_integer()) return bad("hash_ids must hold integers");
      r.block_ids.push_back(id.get<int64_t>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<TraceRecord>> ReadTrace(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  auto trace = ParseTrace(text);
  if (!trace.ok()) return trace.status().WithContext(path);
  return trace;
}

namespace {

// The trace indices of `o`'s window, in arrival order, and every record's
// arrival spread over its tick (TraceRequests' rules and errors).
Result<std::vector<size_t>> WindowOf(const std::vector<TraceRecord>& trace, const ReplayOptions& o,
                                     std::vector<double>* arrival_out) {
  if (o.vocab < 1) return Status::InvalidArgument("prompts need a vocabulary size >= 1");
  if (o.block_tokens < 1) return Status::InvalidArgument("block_tokens must be >= 1");
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale))
    return Status::InvalidArgument("time_scale must be > 0");
  if (o.max_requests < 0 || o.max_output_tokens < 1 || o.max_prompt_tokens < 0)
    return Status::InvalidArgument("max_requests and max_prompt_tokens must be >= 0, max_output_tokens >= 1");
  if (!(o.spread_seconds >= 0) || !std::isfinite(o.spread_seconds))
    return Status::InvalidArgument("spread_seconds must be >= 0");
  // Each record's arrival, spread over its stamp's tick: the k-th of the m
  // records of one stamp (file order, whole trace) at stamp + k * spread / m.
  std::map<double, int> per_stamp;
  for (const TraceRecord& r : trace) ++per_stamp[r.arrival_seconds];
  std::map<double, int> seen;
  std::vector<double>& arrival = *arrival_out;
  arrival.assign(trace.size(), 0.0);
  for (size_t i = 0; i < trace.size(); ++i) {
    const double stamp = trace[i].arrival_seconds;
    arrival[i] = stamp + o.spread_seconds * seen[stamp]++ / per_stamp[stamp];
  }
  std::vector<size_t> window;  // indices into trace
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRecord& r = trace[i];
    if (r.arrival_seconds < o.window_start_seconds) continue;
    if (o.window_seconds > 0 && r.arrival_seconds >= o.window_start_seconds + o.window_seconds) continue;
    window.push_back(i);
  }
  std::stable_sort(window.begin(), window.end(), [&](size_t a, size_t b) { return arrival[a] < arrival[b]; });
  if (o.max_requests > 0 && static_cast<int>(window.size()) > o.max_requests) window.resize(o.max_requests);
  if (window.empty())
    return Status::InvalidArgument(fmt::format("the trace has no request in [{} s, {} s)", o.window_start_seconds,
                                               o.window_seconds > 0 ? o.window_start_seconds + o.window_seconds
                                                                    : kInfinity));
  return window;
}

// The prompt tokens of a trace record under `o`: max_prompt_tokens applied.
int PromptTokens(const TraceRecord& r, const ReplayOptions& o) {
  return o.max_prompt_tokens > 0 ? std::min(r.input_tokens, o.max_prompt_tokens) : r.input_tokens;
}

// Whole blocks of a record's prompt prefix (every token but the last): the
// blocks a pool holds after it ran.
size_t StoredBlocks(const TraceRecord& r, const ReplayOptions& o) {
  return std::min(r.block_ids.size(), static_cast<size_t>(std::max(0, PromptTokens(r, o) - 1) / o.block_tokens));
}

// Hash of a run of leading blocks, extended one block at a time.
uint64_t ExtendRun(uint64_t run, int64_t block) { return Mix(run, static_cast<uint64_t>(block)); }
constexpr uint64_t kEmptyRun = 0x243f6a8885a308d3ULL;

}  // namespace

Result<std::vector<TimedRequest>> TraceRequests(const std::vector<TraceRecord>& trace,
                                                const ReplayOptions& o) {
  std::vector<double> arrival;
  KVSERVE_ASSIGN_OR_RETURN(std::vector<size_t> window, WindowOf(trace, o, &arrival));
  std::vector<TimedRequest> out;
  std::mt19937_64 sampling(Mix(o.seed, 0x5eed));
  for (size_t i = 0; i < window.size(); ++i) {
    const TraceRecord& t = trace[window[i]];
    const int tokens = PromptTokens(t, o);
    TimedRequest timed;
    ServeRequest& r = timed.request;
    r.id = i;
    for (int64_t block : t.block_ids) {
      if (static_cast<int>(r.prompt.size()) >= tokens) break;
      AppendRandom(&r.prompt, static_cast<size_t>(o.block_tokens), Mix(o.seed, static_cast<uint64_t>(block)),
                   o.vocab);
    }
    if (static_cast<int>(r.prompt.size()) < tokens)  // beyond its blocks: this request's own tokens
      AppendRandom(&r.prompt, static_cast<size_t>(tokens) - r.prompt.size(), Mix(~o.seed, i), o.vocab);
    r.prompt.resize(static_cast<size_t>(tokens));
    r.max_new_tokens = std::clamp(t.output_tokens, 1, o.max_output_tokens);
    r.workload = o.workload;
    r.method = o.method;
    r.quality_min = o.quality_min;
    r.use_pool = o.use_pool;
    r.sampling.seed = sampling();
    timed.ttft_slo_seconds = o.slo_base_seconds + o.slo_per_1k_tokens_seconds * tokens / 1000.0;
    r.slo_seconds = timed.ttft_slo_seconds;
    timed.at_seconds = (arrival[window[i]] - arrival[window.front()]) * o.time_scale;
    out.push_back(std::move(timed));
  }
  return out;
}

Result<std::vector<TimedRequest>> PoolHistoryRequests(const std::vector<TraceRecord>& trace,
                                                      const ReplayOptions& o,
                                                      const std::vector<TimedRequest>& window_requests) {
  if (!(o.pool_history_seconds >= 0) || std::isnan(o.pool_history_seconds))
    return Status::InvalidArgument("pool_history_seconds must be >= 0");
  std::vector<double> arrival;
  KVSERVE_ASSIGN_OR_RETURN(std::vector<size_t> window, WindowOf(trace, o, &arrival));
  if (window.size() != window_requests.size())
    return Status::InvalidArgument("the window's requests are not TraceRequests(trace, options)'");
  std::vector<TimedRequest> out;
  if (o.pool_history_seconds == 0 || !o.use_pool) return out;
  // Every run of leading blocks the history's prompts stored.
  std::unordered_set<uint64_t> stored;
  for (const TraceRecord& r : trace) {
    if (r.arrival_seconds >= o.window_start_seconds ||
        r.arrival_seconds < o.window_start_seconds - o.pool_history_seconds)
      continue;
    uint64_t run = kEmptyRun;
    for (size_t b = 0; b < StoredBlocks(r, o); ++b) stored.insert(run = ExtendRun(run, r.block_ids[b]));
  }
  // Each window request's longest stored run (blocks, request), longest first.
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < window.size(); ++i) {
    const TraceRecord& r = trace[window[i]];
    size_t k = 0;
    uint64_t run = kEmptyRun;
    while (k < StoredBlocks(r, o) && stored.count(run = ExtendRun(run, r.block_ids[k])) > 0) ++k;
    if (k > 0) runs.emplace_back(k, i);
  }
  std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::unordered_set<uint64_t> covered;
  for (const auto& [k, i] : runs) {
    const TraceRecord& r = trace[window[i]];
    std::vector<uint64_t> prefixes;
    uint64_t run = kEmptyRun;
    for (size_t b = 0; b < k; ++b) prefixes.push_back(run = ExtendRun(run, r.block_ids[b]));
    if (covered.count(prefixes.back()) > 0) continue;
    covered.insert(prefixes.begin(), prefixes.end());
    TimedRequest timed = window_requests[i];
    ServeRequest& q = timed.request;
    q.id = window_requests.size() + out.size();
    q.prompt.resize(k * static_cast<size_t>(o.block_tokens) + 1);
    q.max_new_tokens = 1;
    q.use_pool = true;
    q.store_before_reply = true;  // in the pool when the window starts
    timed.at_seconds = 0;
    timed.ttft_slo_seconds = o.slo_base_seconds + o.slo_per_1k_tokens_seconds * q.prompt.size() / 1000.0;
    q.slo_seconds = timed.ttft_slo_seconds;
    out.push_back(std::move(timed));
  }
  return out;
}

std::string PoolHistoryRun::Json() const {
  nlohmann::json j = {{"seconds", history_seconds},
                      {"requests", summary.records.size()},
                      {"answered", summary.answered()},
                      {"prompt_tokens", prompt_tokens},
                      {"span_s", summary.span_seconds}};
  return j.dump();
}

void SubtractRouterCounts(const RouterStats& before, ReplaySummary* window) {
  for (size_t w = 0; w < before.served.size() && w < window->router.served.size(); ++w)
    window->router.served[w] -= before.served[w];
  window->router.rerouted -= before.rerouted;
  window->router.affinity -= before.affinity;
}

int ReplaySummary::answered() const {
  return static_cast<int>(std::count_if(records.begin(), records.end(), [](const ReplayRecord& r) { return r.ok; }));
}
int ReplaySummary::failed() const { return static_cast<int>(records.size()) - answered(); }
double ReplaySummary::goodput() const {
  const auto met = std::count_if(records.begin(), records.end(), [](const ReplayRecord& r) { return r.met_slo(); });
  return span_seconds > 0 ? static_cast<double>(met) / span_seconds : 0;
}

namespace {

struct Stats {
  std::vector<double> ttft, jct, kv_bytes;
  // Requests decided on a shared link: the transfers on it, and the
  // controller's estimate over the link's rate / transfers (1 = it had
  // learnt its fair share).
  std::vector<double> link_transfers, estimate_vs_share;
  int hits = 0, met = 0;
  std::map<std::string, int> profiles;
};

// A shared decode link's rate over the transfers on it at the decision
// (bytes/s); 0 without one.
double FairShare(const RequestTimings& t) {
  return t.link_transfers > 0 ? t.link_bytes_per_second / t.link_transfers : 0.0;
}

Stats Collect(const std::vector<ReplayRecord>& records) {
  Stats s;
  for (const ReplayRecord& r : records) {
    if (!r.ok) continue;
    s.ttft.push_back(r.ttft_seconds);
    s.jct.push_back(r.jct_seconds);
    s.kv_bytes.push_back(static_cast<double>(r.timings.frame_bytes));
    s.hits += r.timings.prefix_hit;
    s.met += r.met_slo();
    s.profiles[r.timings.profile.empty() ? std::string("none") : r.timings.profile]++;
    const RequestTimings& t = r.timings;
    if (FairShare(t) > 0 && t.bandwidth_estimate > 0) {
      s.link_transfers.push_back(t.link_transfers);
      s.estimate_vs_share.push_back(t.bandwidth_estimate / FairShare(t));
    }
  }
  return s;
}

}  // namespace

std::string ReplaySummary::SummaryJson() const {
  const Stats s = Collect(records);
  nlohmann::json j = {{"requests", records.size()},
                      {"answered", answered()},
                      {"failed", failed()},
                      {"met_slo", s.met},
                      {"span_s", span_seconds},
                      {"offered_s", offered_seconds},
                      {"offered_rps", offered_seconds > 0 ? (records.size() - 1) / offered_seconds : 0.0},
                      {"goodput_rps", goodput()},
                      {"ttft_mean_s", Mean(s.ttft)},
                      {"ttft_p50_s", Percentile(s.ttft, 0.5)},
                      {"ttft_p99_s", Percentile(s.ttft, 0.99)},
                      {"jct_mean_s", Mean(s.jct)},
                      {"jct_p50_s", Percentile(s.jct, 0.5)},
                      {"jct_p99_s", Percentile(s.jct, 0.99)},
                      {"kv_bytes_mean", Mean(s.kv_bytes)},
                      {"prefix_hit_rate", s.ttft.empty() ? 0.0 : static_cast<double>(s.hits) / s.ttft.size()},
                      {"link_transfers_mean", Mean(s.link_transfers)},
                      {"estimate_vs_fair_share_p50", Percentile(s.estimate_vs_share, 0.5)},
                      {"estimate_vs_fair_share_mean", Mean(s.estimate_vs_share)},
                      {"profiles", s.profiles},
                      {"rerouted", router.rerouted},
                      {"served_per_worker", router.served}};
  return j.dump() + "\n";
}

std::string ReplaySummary::Text() const {
  const Stats s = Collect(records);
  std::string out = fmt::format(
      "\n{} requests over {:.1f} s: {} answered, {} failed, {} met their TTFT target; goodput {:.3f} "
      "requests/s\n",
      records.size(), span_seconds, answered(), failed(), s.met, goodput());
  out += fmt::format("TTFT mean {:.1f} ms, p50 {:.1f} ms, p99 {:.1f} ms; JCT mean {:.1f} ms, p50 {:.1f} ms, "
                     "p99 {:.1f} ms\n",
                     Mean(s.ttft) * 1e3, Percentile(s.ttft, 0.5) * 1e3, Percentile(s.ttft, 0.99) * 1e3,
                     Mean(s.jct) * 1e3, Percentile(s.jct, 0.5) * 1e3, Percentile(s.jct, 0.99) * 1e3);
  out += fmt::format("KV bytes per request {}; prefix hits {} of {}; re-routed {}\n",
                     HumanBytes(static_cast<uint64_t>(Mean(s.kv_bytes))), s.hits, s.ttft.size(), router.rerouted);
  if (!s.estimate_vs_share.empty())
    out += fmt::format("shared decode link: {:.2f} transfers on it at a decision (mean); the controller's "
                       "estimate / the link's rate over them: p50 {:.2f}, mean {:.2f}\n",
                       Mean(s.link_transfers), Percentile(s.estimate_vs_share, 0.5), Mean(s.estimate_vs_share));
  for (const auto& [spec, n] : s.profiles) out += fmt::format("  profile {}: {} requests\n", spec, n);
  return out;
}

std::string ReplayRecordJson(const ReplayRecord& r) {
  const RequestTimings& t = r.timings;
  nlohmann::json j = {{"id", r.id},
                      {"arrival_s", r.arrival_seconds},
                      {"send_delay_s", r.send_delay_seconds},
                      {"ttft_s", r.ttft_seconds},
                      {"jct_s", r.jct_seconds},
                      {"ttft_slo_s", r.ttft_slo_seconds},
                      {"met_slo", r.met_slo()},
                      {"prompt_tokens", r.prompt_tokens},
                      {"ok", r.ok},
                      {"error", r.error},
                      {"worker", r.worker},
                      {"submissions", r.submissions},
                      {"profile", t.profile},
                      {"queue_s", t.queue_seconds},
                      {"prefill_s", t.prefill_seconds},
                      {"kv_s", t.kv_seconds},
                      {"pool_fetch_s", t.pool_fetch_seconds},
                      {"decode_kv_s", t.decode_kv_seconds},
                      {"connection_wait_s", t.connection_wait_seconds},
                      {"streamed", t.streamed},
                      {"generation_s", t.generation_seconds},
                      // The decode worker's call to its first token (a batch row's wait and the KV import
                      // included).
                      {"first_token_s", std::max(0.0, t.generation_seconds - t.after_first_token_seconds)},
                      {"kv_bytes", t.kv_bytes},
                      {"frame_bytes", t.frame_bytes},
                      {"bandwidth_gbps", BytesPerSecondToGbps(t.bandwidth_estimate)},
                      // A shared decode link: its rate over the transfers on it at the decision.
                      {"fair_share_gbps", BytesPerSecondToGbps(FairShare(t))},
                      {"link_transfers", t.link_transfers},
                      {"prefix_hit", t.prefix_hit},
                      {"prefix_chunks", t.prefix_chunks}};
  return j.dump() + "\n";
}

PoolHistoryRun RunPoolHistory(Router& router, const std::vector<TimedRequest>& history,
                              const ReplayOptions& options, int max_in_flight) {
  PoolHistoryRun run;
  run.history_seconds = options.pool_history_seconds;
  for (const TimedRequest& t : history) run.prompt_tokens += t.request.prompt.size();
  run.summary = RunReplay(router, history, max_in_flight, nullptr);
  return run;
}

ReplaySummary RunReplay(Router& router, const std::vector<TimedRequest>& requests, int max_in_flight,
                        const std::function<void(const ReplayRecord&)>& on_reply) {
  ReplaySummary out;
  out.records.resize(requests.size());
  std::mutex mu;
  std::condition_variable ready_cv;
  std::deque<size_t> ready;  // due, not yet taken by a sender
  bool closed = false;
  const double start = MonotonicSeconds();
  auto serve_one = [&](size_t i) {
    const TimedRequest& t = requests[i];
    const double due = start + t.at_seconds;
    ReplayRecord rec;
    rec.id = t.request.id;
    rec.arrival_seconds = t.at_seconds;
    rec.ttft_slo_seconds = t.ttft_slo_seconds;
    rec.prompt_tokens = static_cast<int>(t.request.prompt.size());
    rec.send_delay_seconds = std::max(0.0, MonotonicSeconds() - due);
    auto routed = router.Submit(t.request);
    rec.jct_seconds = MonotonicSeconds() - due;
    if (!routed.ok()) {
      rec.error = routed.status().ToString();
    } else {
      rec.worker = routed->worker;
      rec.submissions = routed->submissions;
      rec.timings = routed->response.timings;
      rec.ok = routed->response.status.ok();
      if (!rec.ok) rec.error = routed->response.status.ToString();
      // From the scheduled arrival to the first token: everything before the
      // reply except the decode worker's time after its first token
      // (earlier submissions to a failed worker and every wait included).
      rec.ttft_seconds = std::max(0.0, rec.jct_seconds - rec.timings.after_first_token_seconds);
    }
    std::lock_guard<std::mutex> lock(mu);
    out.records[i] = rec;
    if (on_reply) on_reply(rec);
  };
  // max_in_flight senders take requests as they fall due; one that falls due
  // while every sender is busy waits for the first to finish.
  const size_t senders = std::min(requests.size(), static_cast<size_t>(std::max(1, max_in_flight)));
  std::vector<std::thread> threads;
  for (size_t k = 0; k < senders; ++k) {
    threads.emplace_back([&] {
      for (;;) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(mu);
          ready_cv.wait(lock, [&] { return !ready.empty() || closed; });
          if (ready.empty()) return;
          i = ready.front();
          ready.pop_front();
        }
        serve_one(i);
      }
    });
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (const double wait = start + requests[i].at_seconds - MonotonicSeconds(); wait > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(i);
    ready_cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  ready_cv.notify_all();
  for (auto& t : threads) t.join();
  out.span_seconds = MonotonicSeconds() - start;
  out.offered_seconds = requests.empty() ? 0 : requests.back().at_seconds - requests.front().at_seconds;
  out.router = router.stats();
  return out;
}

}  // namespace kvserve::lab
