// Copyright kvserve authors. `kvserve replay`: a window of a request trace
// (Mooncake's conversation trace format) sent open-loop to prefill workers
// at its arrival times, with each request's timings and the goodput at a
// TTFT target (experiments/trace_replay.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/lab.h"
#include "experiments/trace_replay.h"
#include "kvserve/router.h"
#include "kvserve/serve.h"
#include "kvserve/transport.h"
#include "serve_cli.h"
#include "transport_cli.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "replay";

struct ReplayArgs {
  std::string trace;
  std::string model;
  lab::ReplayOptions replay;
  int max_in_flight = 256;
  bool no_pool = false;
  RouterFlags router;
  std::string out_json;
  bool json = false;
};

int RunReplay(ReplayArgs& a) {
  auto o = ServeRouterOptions(kCommand, a.router, "replay");
  if (!o.ok()) return ReportError(kCommand, o.status());
  a.replay.use_pool = !a.no_pool;
  if (a.replay.vocab <= 0) {
    auto vocab = ServeModelVocab(kCommand, a.model);
    if (!vocab.ok()) return ReportError(kCommand, vocab.status().WithContext("--vocab 0 reads the model's"));
    a.replay.vocab = *vocab;
  }
  auto trace = lab::ReadTrace(a.trace);
  if (!trace.ok()) return ReportError(kCommand, trace.status());
  auto requests = lab::TraceRequests(*trace, a.replay);
  if (!requests.ok()) return ReportError(kCommand, requests.status());
  Progress(kCommand, "{} requests of {} in the window, over {:.1f} s of replay (time scale {})",
           requests->size(), trace->size(), requests->back().at_seconds, a.replay.time_scale);
  auto transport = MakeTransport(a.router.transport, o->connection.secret);
  if (!transport.ok()) return ReportError(kCommand, transport.status());
  Router router(transport->get(), *o);
  // The pool as the history before the window left it.
  auto history = lab::PoolHistoryRequests(*trace, a.replay, *requests);
  if (!history.ok()) return ReportError(kCommand, history.status());
  std::string history_json;
  RouterStats before;
  if (!history->empty()) {
    Progress(kCommand, "filling the pool as the {:g} trace seconds before the window left it: {} prefixes",
             a.replay.pool_history_seconds, history->size());
    const lab::PoolHistoryRun filled = lab::RunPoolHistory(router, *history, a.replay, a.max_in_flight);
    for (const lab::ReplayRecord& r : filled.summary.records)
      if (!r.ok) Progress(kCommand, "history prefix {} ({} tokens) not stored: {}", r.id, r.prompt_tokens, r.error);
    history_json = filled.Json();
    before = filled.summary.router;
  }
  size_t done = 0;
  lab::ReplaySummary sum =
      lab::RunReplay(router, *requests, a.max_in_flight, [&](const lab::ReplayRecord& r) {
        ++done;
        if (a.json) {
          fmt::print("{}", lab::ReplayRecordJson(r));
          std::fflush(stdout);
        } else if (!r.ok) {
          Progress(kCommand, "request {}: failed: {}", r.id, r.error);
        } else if (done % 50 == 0 || done == requests->size()) {
          Progress(kCommand, "{} of {} answered or failed", done, requests->size());
        }
      });
  lab::SubtractRouterCounts(before, &sum);  // the window's alone
  fmt::print(stderr, "{}", sum.Text());
  if (!a.out_json.empty()) {
    std::string text = "{\"summary\":" + sum.SummaryJson() +
                       (history_json.empty() ? "" : ",\"pool_history\":" + history_json) + ",\"records\":[";
    for (size_t i = 0; i < sum.records.size(); ++i) {
      std::string line = lab::ReplayRecordJson(sum.records[i]);
      line.pop_back();  // the newline
      text += (i ? "," : "") + line;
    }
    text += "]}\n";
    if (Status s = lab::WriteTextFile(a.out_json, text); !s.ok()) return ReportError(kCommand, s);
  }
  return sum.failed() == 0 ? 0 : 1;
}

RunFn SetupReplay(CLI::App& sub) {
  auto a = std::make_shared<ReplayArgs>();
  sub.description(
      "Replay a window of a request trace (JSON lines: timestamp ms, input_length, output_length, "
      "hash_ids; e.g. ../shared/data/traces/mooncake-conversation.jsonl) against `kvserve serve` "
      "prefill workers: each request goes out at its arrival time (scaled by --time-scale), "
      "concurrently with those in flight; its prompt is one fixed block of random ids per hash id "
      "(shared ids = shared prefixes, prefix hits through the workers' pool), its output capped at "
      "--max-output-tokens. Prints failures and a summary (goodput: requests/s whose TTFT met "
      "--slo-base-s + --slo-per-1k-s per 1K prompt tokens; TTFT and JCT mean / p50 / p99); --json "
      "prints one JSON line per request, --out-json writes the summary and every record. Exits 1 "
      "when any request failed.");
  sub.add_option("--trace", a->trace, "the trace (JSON lines)")->required();
  AddRouterFlags(&sub, &a->router);
  sub.add_option("--model,-m", a->model, "model directory (its vocabulary size, unless --vocab)");
  sub.add_option("--vocab", a->replay.vocab, "vocabulary size of the prompts (0 = from --model)");
  sub.add_option("--window-start", a->replay.window_start_seconds, "trace seconds where the window starts")
      ->capture_default_str();
  sub.add_option("--window-seconds", a->replay.window_seconds, "trace seconds in the window (0 = to the end)")
      ->capture_default_str();
  sub.add_option("--max-requests", a->replay.max_requests, "at most this many requests (0 = all)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--time-scale", a->replay.time_scale,
                 "replay seconds per trace second (0.5 = twice the trace's load)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--spread-ticks", a->replay.spread_seconds,
                 "the trace clock's tick, trace seconds: requests of one timestamp arrive evenly over it "
                 "(Mooncake's trace stamps about ten at a time every 3 s; 0 = all at their stamp)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_option("--max-output-tokens", a->replay.max_output_tokens, "cap on each request's output")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub.add_option("--max-prompt-tokens", a->replay.max_prompt_tokens,
                 "cap on each prompt (the model's context; 0 = the trace's lengths)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--block-tokens", a->replay.block_tokens, "tokens per hash id")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub.add_option("--seed", a->replay.seed, "seed of the blocks' tokens and of sampling");
  sub.add_option("--workload", a->replay.workload, "workload label (default: the worker's)");
  sub.add_option("--method", a->replay.method, "adaptive (controller) or a profile spec / preset to force")
      ->capture_default_str();
  sub.add_option("--quality-min", a->replay.quality_min, "quality floor q_min")->capture_default_str();
  sub.add_option("--slo-base-s", a->replay.slo_base_seconds, "TTFT target: this plus --slo-per-1k-s per 1K tokens")
      ->capture_default_str();
  sub.add_option("--slo-per-1k-s", a->replay.slo_per_1k_tokens_seconds, "TTFT target per 1K prompt tokens")
      ->capture_default_str();
  sub.add_flag("--no-pool", a->no_pool, "requests do not use the prefix pool");
  sub.add_option("--pool-history", a->replay.pool_history_seconds,
                 "before the window, store in the pool the prefixes the window's requests share with the "
                 "requests of this many trace seconds before it (one request per prefix, unrecorded; "
                 "0 = the pool starts empty)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_option("--max-in-flight", a->max_in_flight, "requests in flight at most (later ones wait)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  sub.add_flag("--json", a->json, "one JSON line per request on stdout");
  sub.add_option("--out-json", a->out_json, "write the summary and every request's record to this file");
  return [a] { return RunReplay(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(replay, "Replay a request trace against prefill workers: goodput at a TTFT target",
                kvserve::cli::SetupReplay);
