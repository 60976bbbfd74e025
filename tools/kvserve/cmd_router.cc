// Copyright kvserve authors. `kvserve router`: a load generator that sends
// labelled requests (workload, SLO, quality floor) to prefill workers and
// reports each request's timings and the JCT distribution.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>


#include "cli_util.h"
#include "command.h"
#include "experiments/load_generator.h"
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
  RouterFlags router;
  std::string summary_file;
  bool json = false;
};

// The reply of a successful request: a JSON line with --json, else a
// progress line (and the generated text, with a text prompt).
Status PrintReply(const RouterArgs& a, const Tokenizer* tokenizer, const ServeRequest& r,
                  const RoutedResponse& routed) {
  const ServeResponse& response = routed.response;
  if (!response.status.ok()) {
    Progress(kCommand, "request {}: failed: {}", r.id, response.status.ToString());
    return Status::Ok();
  }
  std::string text;
  if (tokenizer) {
    auto decoded = tokenizer->Decode(response.tokens);
    if (!decoded.ok()) return decoded.status().WithContext("decoding the reply");
    text = std::move(*decoded);
  }
  if (a.json) {
    fmt::print("{}", lab::ReplyJson(r, routed, tokenizer != nullptr, text));
    std::fflush(stdout);
  } else {
    Progress(kCommand, "{}", lab::ReplyLine(r, routed));
    if (tokenizer) fmt::print("{}\n", text);
  }
  return Status::Ok();
}

int RunRouter(const RouterArgs& a) {
  auto options = ServeRouterOptions(kCommand, a.router, "router");
  if (!options.ok()) return ReportError(kCommand, options.status());
  const RouterOptions& o = *options;
  lab::LoadOptions load{.requests = a.requests, .prompt_tokens = a.prompt_tokens,
                        .vocab = a.vocab, .new_tokens = a.new_tokens, .workload = a.workload,
                        .slo_ms = a.slo_ms, .quality_min = a.quality_min, .method = a.method,
                        .repeat_fraction = a.repeat_fraction, .seed = a.seed};
  // A text prompt: tokenized here with the model's tokenizer (as a serving
  // front end does), and the generated ids are printed as text.
  lab::TextPrompt prompt;
  if (!a.prompt.empty() || !a.prompt_file.empty()) {
    if (!a.prompt.empty() && !a.prompt_file.empty())
      return ReportError(kCommand, Status::InvalidArgument("give --prompt or --prompt-file, not both"));
    auto dir = ServeModelDirectory(kCommand, a.model);
    if (!dir.ok()) return ReportError(kCommand, dir.status());
    auto text = a.prompt_file.empty() ? Result<std::string>(a.prompt) : lab::ReadTextFile(a.prompt_file);
    auto loaded = text.ok() ? lab::LoadTextPrompt(*dir, *text) : Result<lab::TextPrompt>(text.status());
    if (!loaded.ok()) return ReportError(kCommand, loaded.status());
    prompt = std::move(*loaded);
    load.text_prompt = prompt.ids;
  } else if (load.vocab <= 0) {
    auto vocab = ServeModelVocab(kCommand, a.model);
    if (!vocab.ok()) return ReportError(kCommand, vocab.status());
    load.vocab = *vocab;
  }
  auto requests = lab::DrawRequests(load);
  if (!requests.ok()) return ReportError(kCommand, requests.status());
  auto transport = MakeTransport(a.router.transport, o.connection.secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  Router router(transport->get(), o);
  auto run = lab::RunLoad(router, *requests, a.concurrency,
                          [&](const ServeRequest& r, const RoutedResponse& routed) {
                            return PrintReply(a, prompt.tokenizer.get(), r, routed);
                          });
  if (!run.ok()) return ReportError(kCommand, run.status());
  const lab::LoadSummary& sum = *run;
  fmt::print(stderr, "{}", sum.Text());
  if (!a.summary_file.empty()) {
    if (Status s = lab::WriteTextFile(a.summary_file, sum.SummaryJson()); !s.ok())
      return ReportError(kCommand, s);
  }
  return sum.failed == 0 ? 0 : 1;
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
  AddRouterFlags(&sub, &a->router);
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
  sub.add_flag("--json", a->json, "one JSON line per request on stdout");
  sub.add_option("--summary", a->summary_file,
                 "write throughput and JCT percentiles as one JSON object to this file");
  return [a] { return RunRouter(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(router, "Send labelled requests to prefill workers and report JCT",
                kvserve::cli::SetupRouter);
