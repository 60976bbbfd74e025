// Copyright kvserve authors. experiments/load_generator.h.
#include "experiments/load_generator.h"

#include <fmt/format.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/transport.h"

namespace kvserve::lab {

Result<std::vector<ServeRequest>> DrawRequests(const LoadOptions& o) {
  if (o.text_prompt.empty() && o.vocab < 1)
    return Status::InvalidArgument("random prompts need a vocabulary size >= 1");
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int32_t>> sent;
  std::vector<ServeRequest> requests;
  for (int i = 0; i < o.requests; ++i) {
    ServeRequest r;
    r.id = static_cast<uint64_t>(i);
    r.workload = o.workload;
    r.max_new_tokens = o.new_tokens;
    r.slo_seconds = o.slo_ms > 0 ? o.slo_ms / 1e3 : kInfinity;
    r.quality_min = o.quality_min;
    r.method = o.method;
    r.use_pool = o.repeat_fraction > 0;
    r.sampling.seed = rng();
    if (!o.text_prompt.empty()) {
      r.prompt = o.text_prompt;
    } else if (!sent.empty() &&
               std::uniform_real_distribution<double>(0, 1)(rng) < o.repeat_fraction) {
      r.prompt = sent[rng() % sent.size()];
    } else {
      r.prompt.resize(o.prompt_tokens);
      for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % o.vocab);
      sent.push_back(r.prompt);
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

double LoadSummary::throughput() const {
  return wall_seconds > 0 ? static_cast<double>(jct_seconds.size()) / wall_seconds : 0;
}

std::string LoadSummary::SummaryJson() const {
  return fmt::format(
      "{{\"summary\":true,\"requests\":{},\"failed\":{},\"clients\":{},\"wall_s\":{:.4f},"
      "\"throughput_rps\":{:.4f},\"jct_mean_s\":{:.6f},\"jct_p50_s\":{:.6f},"
      "\"jct_p90_s\":{:.6f},\"jct_p99_s\":{:.6f},\"prefix_hits\":{},\"rerouted\":{}}}\n",
      requests, failed, clients, wall_seconds, throughput(), Mean(jct_seconds),
      Percentile(jct_seconds, 0.5), Percentile(jct_seconds, 0.9), Percentile(jct_seconds, 0.99),
      prefix_hits, router.rerouted);
}

std::string ReplyJson(const ServeRequest& r, const RoutedResponse& routed, bool with_text,
                      const std::string& text) {
  const ServeResponse& response = routed.response;
  const RequestTimings& t = response.timings;
  return fmt::format(
      "{{\"id\":{},{}\"worker\":{},\"submissions\":{},\"profile\":\"{}\",\"jct_s\":{:.6f},"
      "\"ttft_s\":{:.6f},\"prefill_s\":{:.6f},\"encode_s\":{:.6f},\"transfer_s\":{:.6f},"
      "\"decode_kv_s\":{:.6f},\"generation_s\":{:.6f},\"kv_s\":{:.6f},\"kv_bytes\":{},"
      "\"frame_bytes\":{},\"bandwidth_gbps\":{:.4f},\"prefix_hit\":{},\"prefix_chunks\":{},"
      "\"attempts\":{}}}\n",
      r.id,
      with_text ? fmt::format("\"text\":{},\"tokens\":{},", nlohmann::json(text).dump(),
                              nlohmann::json(response.tokens).dump())
                : std::string(),
      routed.worker, routed.submissions, t.profile, t.jct_seconds, t.ttft_seconds,
      t.prefill_seconds, t.encode_seconds, t.transfer_seconds, t.decode_kv_seconds,
      t.generation_seconds, t.kv_seconds, t.kv_bytes, t.frame_bytes,
      BytesPerSecondToGbps(t.bandwidth_estimate), t.prefix_hit, t.prefix_chunks, t.attempts);
}

std::string ReplyLine(const ServeRequest& r, const RoutedResponse& routed) {
  const RequestTimings& t = routed.response.timings;
  return fmt::format(
      "request {} on prefill {}: {} JCT {:.1f} ms (prefill {:.1f}, KV {:.1f}, generation {:.1f}) "
      "{}{}",
      r.id, routed.worker, t.profile, t.jct_seconds * 1e3, t.prefill_seconds * 1e3,
      t.kv_seconds * 1e3, t.generation_seconds * 1e3, HumanBytes(t.frame_bytes),
      t.prefix_hit ? fmt::format(" (prefix hit, {} chunks)", t.prefix_chunks) : "");
}

std::string LoadSummary::Text() const {
  const std::vector<double>& jct = jct_seconds;
  std::string per_worker;
  for (size_t i = 0; i < router.served.size(); ++i)
    per_worker += fmt::format("{}{}", i ? " " : "", router.served[i]);
  std::string out = fmt::format("\n{} requests, {} failed, {} prefix hits, {} clients, {:.2f} s\n",
                                requests, failed, prefix_hits, clients, wall_seconds);
  out += fmt::format(
      "throughput {:.2f} requests/s; JCT mean {:.1f} ms, p50 {:.1f} ms, p90 {:.1f} ms, p99 {:.1f} "
      "ms\n",
      throughput(), Mean(jct) * 1e3, Percentile(jct, 0.5) * 1e3, Percentile(jct, 0.9) * 1e3,
      Percentile(jct, 0.99) * 1e3);
  out += fmt::format("served per prefill worker: {}; re-routed {}; prefix-affinity picks {}\n",
                     per_worker, router.rerouted, router.affinity);
  for (const auto& [name, v] : stage_seconds)
    out += fmt::format("  {:<11} mean {:.1f} ms\n", name, Mean(v) * 1e3);
  for (const auto& [spec, n] : profiles) out += fmt::format("  profile {}: {} requests\n", spec, n);
  return out;
}

Result<LoadSummary> RunLoad(
    Router& router, const std::vector<ServeRequest>& requests, int concurrency,
    const std::function<Status(const ServeRequest&, const RoutedResponse&)>& on_reply) {
  LoadSummary out;
  out.requests = static_cast<int>(requests.size());
  out.clients = std::max(1, concurrency);
  std::mutex mu;
  Status fatal;
  size_t next = 0;
  auto client = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= requests.size() || !fatal.ok()) return;
        i = next++;
      }
      const ServeRequest& r = requests[i];
      auto routed = router.Submit(r);
      std::lock_guard<std::mutex> lock(mu);
      if (!routed.ok()) {
        fatal = routed.status();
        return;
      }
      const RequestTimings& t = routed->response.timings;
      if (!routed->response.status.ok()) {
        ++out.failed;
      } else {
        out.jct_seconds.push_back(t.jct_seconds);
        out.profiles[t.profile]++;
        out.prefix_hits += t.prefix_hit;
        for (auto [name, v] : {std::pair{"prefill", t.prefill_seconds},
                               {"encode", t.encode_seconds},
                               {"transfer", t.transfer_seconds},
                               {"decode_kv", t.decode_kv_seconds},
                               {"generation", t.generation_seconds},
                               {"kv", t.kv_seconds},
                               {"ttft", t.ttft_seconds}})
          out.stage_seconds[name].push_back(v);
      }
      if (on_reply) {
        if (Status s = on_reply(r, *routed); !s.ok()) {
          fatal = s;
          return;
        }
      }
    }
  };
  const double start = MonotonicSeconds();
  std::vector<std::thread> threads;
  for (int c = 0; c < out.clients; ++c) threads.emplace_back(client);
  for (auto& t : threads) t.join();
  out.wall_seconds = MonotonicSeconds() - start;
  KVSERVE_RETURN_IF_ERROR(fatal);
  out.router = router.stats();
  return out;
}

}  // namespace kvserve::lab
