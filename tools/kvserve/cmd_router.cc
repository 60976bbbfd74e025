// Copyright kvserve authors. `kvserve router`: a load generator that sends
// labelled requests (workload, SLO, quality floor) to prefill workers and
// reports each request's timings and the JCT distribution.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "command.h"
#include "kvserve/controller.h"
#include "kvserve/router.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "kvserve/transport.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "router";

struct RouterArgs {
  std::string prefill;
  std::string secret_file;
  std::string model;
  std::string prompt, prompt_file;  // text prompts, through the model's tokenizer
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
  int concurrency = 1;
  int pool_chunk_tokens = PrefillWorkerOptions{}.pool_chunk_tokens;
  TransportFlags transport;
  std::string summary_file;
  bool json = false;
};

// The tokenizer of --model and the ids of the text prompt (as `kvserve
// generate` builds them: the tokenizer's template, else the config's bos).
Result<std::pair<std::unique_ptr<Tokenizer>, std::vector<int32_t>>> TextPrompt(const RouterArgs& a) {
  KVSERVE_ASSIGN_OR_RETURN(std::string dir, ServeModelDirectory(kCommand, a.model));
  std::string text = a.prompt;
  if (!a.prompt_file.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(a.prompt_file));
    text.assign(bytes.begin(), bytes.end());
  }
  KVSERVE_ASSIGN_OR_RETURN(auto config_bytes, ReadBinaryFile(dir + "/config.json"));
  KVSERVE_ASSIGN_OR_RETURN(auto config, ParseModelConfig(std::string(config_bytes.begin(), config_bytes.end())));
  KVSERVE_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::Load(dir));
  KVSERVE_ASSIGN_OR_RETURN(auto ids, tokenizer->EncodePrompt(text, config.bos_token_id));
  if (ids.empty()) return Status::InvalidArgument("the prompt has no tokens");
  for (int32_t id : ids) {
    if (id >= config.vocab_size) {
      return Status::InvalidArgument("prompt token " + std::to_string(id) + " is outside the model's vocabulary");
    }
  }
  return std::pair{std::move(tokenizer), std::move(ids)};
}

int RunRouter(const RouterArgs& a) {
  RouterOptions o;
  o.prefill_addresses = SplitList(a.prefill);
  if (o.prefill_addresses.empty())
    return ReportError(kCommand, Status::InvalidArgument("--prefill HOST:PORT[,...] is required"));
  auto secret = LoadServeSecret(kCommand, a.secret_file);
  if (!secret.ok()) return ReportError(kCommand, secret.status());
  o.connection.secret = *secret;
  o.connection.local_id = "router";
  o.pool_chunk_tokens = a.pool_chunk_tokens;
  // A text prompt: tokenized here with the model's tokenizer (as a serving
  // front end does), and the generated ids are printed as text.
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> text_prompt;
  if (!a.prompt.empty() || !a.prompt_file.empty()) {
    if (!a.prompt.empty() && !a.prompt_file.empty()) {
      return ReportError(kCommand, Status::InvalidArgument("give --prompt or --prompt-file, not both"));
    }
    auto prompt = TextPrompt(a);
    if (!prompt.ok()) return ReportError(kCommand, prompt.status());
    tokenizer = std::move(prompt->first);
    text_prompt = std::move(prompt->second);
  }
  int vocab = a.vocab;
  if (vocab <= 0 && text_prompt.empty()) {
    auto dir = ServeModelDirectory(kCommand, a.model);
    if (!dir.ok()) return ReportError(kCommand, dir.status());
    auto text = ReadBinaryFile(*dir + "/config.json");
    if (!text.ok()) return ReportError(kCommand, text.status());
    auto config = ParseModelConfig(std::string(text->begin(), text->end()));
    if (!config.ok()) return ReportError(kCommand, config.status());
    vocab = config->vocab_size;
  }
  auto transport = MakeTransport(a.transport, *secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  Router router(transport->get(), o);
  // The requests, drawn up front so that the sequence does not depend on
  // the concurrency.
  std::mt19937_64 rng(a.seed);
  std::vector<std::vector<int32_t>> sent;
  std::vector<ServeRequest> requests;
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
    if (!text_prompt.empty()) {
      r.prompt = text_prompt;
    } else if (!sent.empty() && std::uniform_real_distribution<double>(0, 1)(rng) < a.repeat_fraction) {
      r.prompt = sent[rng() % sent.size()];
    } else {
      r.prompt.resize(a.prompt_tokens);
      for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % vocab);
      sent.push_back(r.prompt);
    }
    requests.push_back(std::move(r));
  }
  std::mutex mu;
  std::vector<double> jct;
  std::map<std::string, int> profiles;
  std::map<std::string, std::vector<double>> stages;
  int failed = 0, hits = 0;
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
      const ServeResponse& response = routed->response;
      const RequestTimings& t = response.timings;
      if (!response.status.ok()) {
        ++failed;
        Progress(kCommand, "request {}: failed: {}", r.id, response.status.ToString());
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
      std::string text;
      if (tokenizer) {
        auto decoded = tokenizer->Decode(response.tokens);
        if (!decoded.ok()) {
          fatal = decoded.status().WithContext("decoding the reply");
          return;
        }
        text = std::move(*decoded);
      }
      if (a.json) {
        fmt::print(
            "{{\"id\":{},{}\"worker\":{},\"submissions\":{},\"profile\":\"{}\",\"jct_s\":{:.6f},"
            "\"ttft_s\":{:.6f},\"prefill_s\":{:.6f},\"encode_s\":{:.6f},\"transfer_s\":{:.6f},"
            "\"decode_kv_s\":{:.6f},\"generation_s\":{:.6f},\"kv_s\":{:.6f},\"kv_bytes\":{},"
            "\"frame_bytes\":{},\"bandwidth_gbps\":{:.4f},\"prefix_hit\":{},\"prefix_chunks\":{},"
            "\"attempts\":{}}}\n",
            r.id,
            tokenizer ? fmt::format("\"text\":{},\"tokens\":{},", nlohmann::json(text).dump(),
                                    nlohmann::json(response.tokens).dump())
                      : std::string(),
            routed->worker, routed->submissions, t.profile, t.jct_seconds, t.ttft_seconds,
            t.prefill_seconds, t.encode_seconds, t.transfer_seconds, t.decode_kv_seconds,
            t.generation_seconds, t.kv_seconds, t.kv_bytes, t.frame_bytes,
            BytesPerSecondToGbps(t.bandwidth_estimate), t.prefix_hit, t.prefix_chunks, t.attempts);
        std::fflush(stdout);
      } else {
        Progress(kCommand,
                 "request {} on prefill {}: {} JCT {:.1f} ms (prefill {:.1f}, KV {:.1f}, generation "
                 "{:.1f}) {}{}",
                 r.id, routed->worker, t.profile, t.jct_seconds * 1e3, t.prefill_seconds * 1e3,
                 t.kv_seconds * 1e3, t.generation_seconds * 1e3, HumanBytes(t.frame_bytes),
                 t.prefix_hit ? fmt::format(" (prefix hit, {} chunks)", t.prefix_chunks) : "");
        if (tokenizer) fmt::print("{}\n", text);
      }
    }
  };
  const double start = MonotonicSeconds();
  std::vector<std::thread> threads;
  for (int c = 0; c < a.concurrency; ++c) threads.emplace_back(client);
  for (auto& t : threads) t.join();
  const double wall = MonotonicSeconds() - start;
  if (!fatal.ok()) return ReportError(kCommand, fatal);
  const RouterStats rs = router.stats();
  std::string per_worker;
  for (size_t i = 0; i < rs.served.size(); ++i)
    per_worker += fmt::format("{}{}", i ? " " : "", rs.served[i]);
  fmt::print(stderr, "\n{} requests, {} failed, {} prefix hits, {} clients, {:.2f} s\n", a.requests,
             failed, hits, a.concurrency, wall);
  fmt::print(stderr, "throughput {:.2f} requests/s; JCT mean {:.1f} ms, p50 {:.1f} ms, p90 {:.1f} ms, "
             "p99 {:.1f} ms\n",
             static_cast<double>(jct.size()) / wall, Mean(jct) * 1e3, Percentile(jct, 0.5) * 1e3,
             Percentile(jct, 0.9) * 1e3, Percentile(jct, 0.99) * 1e3);
  fmt::print(stderr, "served per prefill worker: {}; re-routed {}; prefix-affinity picks {}\n",
             per_worker, rs.rerouted, rs.affinity);
  for (const auto& [name, v] : stages) fmt::print(stderr, "  {:<11} mean {:.1f} ms\n", name, Mean(v) * 1e3);
  for (const auto& [spec, n] : profiles) fmt::print(stderr, "  profile {}: {} requests\n", spec, n);
  if (!a.summary_file.empty()) {
    std::ofstream out(a.summary_file);
    out << fmt::format("{{\"summary\":true,\"requests\":{},\"failed\":{},\"clients\":{},\"wall_s\":{:.4f},"
               "\"throughput_rps\":{:.4f},\"jct_mean_s\":{:.6f},\"jct_p50_s\":{:.6f},"
               "\"jct_p90_s\":{:.6f},\"jct_p99_s\":{:.6f},\"prefix_hits\":{},\"rerouted\":{}}}\n",
               a.requests, failed, a.concurrency, wall, static_cast<double>(jct.size()) / wall,
               Mean(jct), Percentile(jct, 0.5), Percentile(jct, 0.9), Percentile(jct, 0.99), hits,
               rs.rerouted);
    if (!out) return ReportError(kCommand, Status::IOError("cannot write " + a.summary_file));
  }
  return failed == 0 ? 0 : 1;
}

RunFn SetupRouter(CLI::App& sub) {
  auto a = std::make_shared<RouterArgs>();
  sub.description(
      "Router and load generator for `kvserve serve`: --concurrency clients send --requests "
      "requests with random prompts of --prompt-tokens tokens (or the text of --prompt / "
      "--prompt-file, whose replies are printed as text), a workload label, an SLO and a "
      "quality floor to the N prefill workers (the least loaded; for pool requests the one that "
      "served the prompt's first chunk; a failed worker's requests are re-routed), prints each "
      "request's stage timings (or JSON lines with --json, then a summary line) and the "
      "throughput and JCT mean / p50 / p90 / p99. "
      "--repeat-fraction re-sends earlier prompts with the prefix pool on (prefix hits). Exits 1 "
      "when any request failed.");
  sub.add_option("--prefill", a->prefill, "prefill worker addresses HOST:PORT[,...]")->required();
  sub.add_option("--secret-file", a->secret_file, "shared secret (else $KVSERVE_SECRET)");
  sub.add_option("--model,-m", a->model,
                 "model directory: its vocabulary size for random prompts, its tokenizer for --prompt");
  sub.add_option("--vocab", a->vocab, "vocabulary size for random prompts (0 = from the model)");
  sub.add_option("--prompt", a->prompt,
                 "send this text as every request's prompt (tokenized with --model's tokenizer.json "
                 "or tokenizer.model) and print the generated text");
  sub.add_option("--prompt-file", a->prompt_file, "like --prompt, the text of this file");
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
  sub.add_option("--concurrency,-k", a->concurrency, "concurrent clients")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub.add_option("--pool-chunk-tokens", a->pool_chunk_tokens,
                 "the prefill workers' pool chunk (prefix affinity key)")
      ->check(CLI::Range(1, 1 << 20));
  AddTransportFlags(&sub, &a->transport);
  sub.add_flag("--json", a->json, "one JSON line per request on stdout");
  sub.add_option("--summary", a->summary_file,
                 "write throughput and JCT percentiles as one JSON object to this file");
  return [a] { return RunRouter(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(router, "Send labelled requests to prefill workers and report JCT",
                kvserve::cli::SetupRouter);
