// Copyright kvserve authors. `kvserve router`: a load generator that sends
// labelled requests (workload, SLO, quality floor) to prefill workers and
// reports each request's timings and the JCT distribution.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "kvserve/controller.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "kvserve/transport.h"
#include "serve_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "router";

struct RouterArgs {
  std::string prefill;
  std::string secret_file;
  std::string model;
  int vocab = 0;
  int requests = 8;
  int prompt_tokens = 256;
  int new_tokens = 16;
  std::string workload;  // "": the prefill worker's default
  double slo_ms = 0;
  double quality_min = 0.97;
  std::string method = kMethodAdaptive;
  double repeat_fraction = 0;
  uint64_t seed = 1;
  bool json = false;
};

int RunRouter(const RouterArgs& a) {
  ServeClientOptions o;
  o.prefill_addresses = SplitList(a.prefill);
  if (o.prefill_addresses.empty())
    return ReportError(kCommand, Status::InvalidArgument("--prefill HOST:PORT[,...] is required"));
  auto secret = LoadServeSecret(kCommand, a.secret_file);
  if (!secret.ok()) return ReportError(kCommand, secret.status());
  o.connection.secret = *secret;
  o.connection.local_id = "router";
  int vocab = a.vocab;
  if (vocab <= 0) {
    auto dir = ServeModelDirectory(kCommand, a.model);
    if (!dir.ok()) return ReportError(kCommand, dir.status());
    auto text = ReadBinaryFile(*dir + "/config.json");
    if (!text.ok()) return ReportError(kCommand, text.status());
    auto config = ParseModelConfig(std::string(text->begin(), text->end()));
    if (!config.ok()) return ReportError(kCommand, config.status());
    vocab = config->vocab_size;
  }
  auto tcp = NewTcpTransport();
  ServeClient client(tcp.get(), o);
  std::mt19937_64 rng(a.seed);
  std::vector<std::vector<int32_t>> sent;
  std::vector<double> jct;
  std::map<std::string, int> profiles;
  std::map<std::string, std::vector<double>> stages;
  int failed = 0, hits = 0;
  for (int i = 0; i < a.requests; ++i) {
    ServeRequest r;
    r.id = static_cast<uint64_t>(i);
    r.workload = a.workload;
    r.max_new_tokens = a.new_tokens;
    r.slo_seconds = a.slo_ms > 0 ? a.slo_ms / 1e3 : kInfinity;
    r.quality_min = a.quality_min;
    r.method = a.method;
    r.use_pool = a.repeat_fraction > 0;
    r.sampling.seed = rng();
    if (!sent.empty() && std::uniform_real_distribution<double>(0, 1)(rng) < a.repeat_fraction) {
      r.prompt = sent[rng() % sent.size()];
    } else {
      r.prompt.resize(a.prompt_tokens);
      for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % vocab);
      sent.push_back(r.prompt);
    }
    auto response = client.Submit(r);
    if (!response.ok()) return ReportError(kCommand, response.status());
    const RequestTimings& t = response->timings;
    if (!response->status.ok()) {
      ++failed;
      Progress(kCommand, "request {}: failed: {}", r.id, response->status.ToString());
      continue;
    }
    jct.push_back(t.jct_seconds);
    profiles[t.profile]++;
    hits += t.prefix_hit;
    for (auto [name, v] : {std::pair{"prefill", t.prefill_seconds}, {"encode", t.encode_seconds},
                           {"transfer", t.transfer_seconds}, {"decode_kv", t.decode_kv_seconds},
                           {"generation", t.generation_seconds}, {"kv", t.kv_seconds},
                           {"ttft", t.ttft_seconds}})
      stages[name].push_back(v);
    if (a.json) {
      fmt::print(
          "{{\"id\":{},\"profile\":\"{}\",\"jct_s\":{:.6f},\"ttft_s\":{:.6f},\"prefill_s\":{:.6f},"
          "\"encode_s\":{:.6f},\"transfer_s\":{:.6f},\"decode_kv_s\":{:.6f},\"generation_s\":{:.6f},"
          "\"kv_s\":{:.6f},\"kv_bytes\":{},\"frame_bytes\":{},\"bandwidth_gbps\":{:.4f},"
          "\"prefix_hit\":{},\"prefix_chunks\":{},\"attempts\":{}}}\n",
          r.id, t.profile, t.jct_seconds, t.ttft_seconds, t.prefill_seconds, t.encode_seconds,
          t.transfer_seconds, t.decode_kv_seconds, t.generation_seconds, t.kv_seconds, t.kv_bytes,
          t.frame_bytes, BytesPerSecondToGbps(t.bandwidth_estimate), t.prefix_hit, t.prefix_chunks,
          t.attempts);
    } else {
      Progress(kCommand, "request {}: {} JCT {:.1f} ms (prefill {:.1f}, KV {:.1f}, generation {:.1f}) {}{}",
               r.id, t.profile, t.jct_seconds * 1e3, t.prefill_seconds * 1e3, t.kv_seconds * 1e3,
               t.generation_seconds * 1e3, HumanBytes(t.frame_bytes),
               t.prefix_hit ? fmt::format(" (prefix hit, {} chunks)", t.prefix_chunks) : "");
    }
  }
  fmt::print(stderr, "\n{} requests, {} failed, {} prefix hits\n", a.requests, failed, hits);
  fmt::print(stderr, "JCT mean {:.1f} ms, p50 {:.1f} ms, p99 {:.1f} ms\n", Mean(jct) * 1e3,
             Percentile(jct, 0.5) * 1e3, Percentile(jct, 0.99) * 1e3);
  for (const auto& [name, v] : stages) fmt::print(stderr, "  {:<11} mean {:.1f} ms\n", name, Mean(v) * 1e3);
  for (const auto& [spec, n] : profiles) fmt::print(stderr, "  profile {}: {} requests\n", spec, n);
  return failed == 0 ? 0 : 1;
}

RunFn SetupRouter(CLI::App& sub) {
  auto a = std::make_shared<RouterArgs>();
  sub.description(
      "Load generator for `kvserve serve`: sends --requests requests with random prompts of "
      "--prompt-tokens tokens, a workload label, an SLO and a quality floor to the prefill "
      "workers (round-robin; a failed worker's requests are re-submitted to the next), prints "
      "each request's stage timings (or JSON lines with --json) and the JCT mean / p50 / p99. "
      "--repeat-fraction re-sends earlier prompts with the prefix pool on (prefix hits). Exits 1 "
      "when any request failed.");
  sub.add_option("--prefill", a->prefill, "prefill worker addresses HOST:PORT[,...]")->required();
  sub.add_option("--secret-file", a->secret_file, "shared secret (else $KVSERVE_SECRET)");
  sub.add_option("--model,-m", a->model, "model directory, only to read the vocabulary size");
  sub.add_option("--vocab", a->vocab, "vocabulary size for random prompts (0 = from the model)");
  sub.add_option("--requests,-n", a->requests, "number of requests")->check(CLI::Range(1, 1000000));
  sub.add_option("--prompt-tokens", a->prompt_tokens, "prompt length")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--new-tokens", a->new_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--workload", a->workload,
                 "workload label, a workload of the prefill worker's table (default: the "
                 "worker's default workload)");
  sub.add_option("--slo-ms", a->slo_ms, "SLO for prefill + KV movement in ms (0 = none)");
  sub.add_option("--quality-min", a->quality_min, "quality floor q_min");
  sub.add_option("--method", a->method, "adaptive (controller) or a profile spec / preset to force");
  sub.add_option("--repeat-fraction", a->repeat_fraction,
                 "fraction of requests repeating an earlier prompt (prefix pool on)");
  sub.add_option("--seed", a->seed, "seed of prompts and sampling");
  sub.add_flag("--json", a->json, "one JSON line per request on stdout");
  return [a] { return RunRouter(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(router, "Send labelled requests to prefill workers and report JCT",
                kvserve::cli::SetupRouter);
