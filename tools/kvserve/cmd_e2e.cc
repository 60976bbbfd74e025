// Copyright kvserve authors. `kvserve e2e`: the end-to-end benchmark of
// disaggregated serving (experiments/e2e.h runs it). Writes the report, the
// calibrated table and the results JSON the plots are drawn from
// (scripts/plots.py).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/e2e.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "e2e";

struct E2eOutputs {
  std::string markdown;
  std::string results;
  std::string table_out;
  // The plots the report links, drawn next to it from --results by
  // scripts/plots.py e2e.
  std::string plot_jct = "e2e_jct.svg";
  std::string plot_switch = "e2e_switch.svg";
};

int RunE2eCommand(lab::E2eOptions options, const E2eOutputs& out) {
  auto data = DataDirectory();
  if (!data.ok()) return ReportError(kCommand, data.status());
  options.data_dir = *data;
  auto report =
      lab::RunE2e(options, [](const std::string& line) { Progress(kCommand, "{}", line); });
  if (!report.ok()) return ReportError(kCommand, report.status());
  report->table_path = out.table_out.empty() ? "(not written)" : out.table_out;
  report->plot_jct_path = out.plot_jct;
  report->plot_switch_path = out.plot_switch;
  const std::string markdown = lab::E2eMarkdown(*report);
  for (const auto& [path, text] : {std::pair{out.table_out, report->table.ToJson()},
                                   {out.results, lab::E2eResultsJson(*report).dump(1) + "\n"},
                                   {out.markdown, markdown}}) {
    if (path.empty()) continue;
    if (Status s = lab::WriteTextFile(path, text); !s.ok()) return ReportError(kCommand, s);
    Progress(kCommand, "wrote {}", path);
  }
  fmt::print("{}", markdown);
  return 0;
}

RunFn SetupE2e(CLI::App& sub) {
  auto a = std::make_shared<lab::E2eOptions>();
  auto out = std::make_shared<E2eOutputs>();
  sub.description(
      "End-to-end benchmark of disaggregated serving (paper §7.2). Starts a decode worker "
      "process (`kvserve serve --role decode`) and a prefill worker in this process, joined by "
      "authenticated TCP on localhost whose rate a token bucket sets. It first calibrates every "
      "profile of --table on this machine and on the real KV of the model (CR, encode/decode "
      "throughput, fixed overhead; qualities stay the table's), picks the bandwidth range from "
      "the latency model (around the largest break-even bandwidth B*, from transfer-bound to "
      "compute-bound), then at each bandwidth sends --requests requests per method: raw, kivi-2, "
      "cachegen, the best static profile and kvserve adaptive (the controller with its bandit), "
      "recording prefill, encode, transfer, decode-of-KV and generation times and the JCT. Then "
      "TTFT of prefix-pool hits vs recompute, and a run where the link rate changes mid-run. "
      "Prints the report (Markdown); --markdown, --results and --table-out also write it, the "
      "results JSON (scripts/plots.py e2e draws the plots from it) and the calibrated table. "
      "scripts/e2e_report.sh runs the recorded configuration into docs/. Default run: about a "
      "minute on two cores.");
  sub.add_option("--model,-m", a->model,
                 "HF model directory (default: the first under <data>/models/; none there is an "
                 "error), or `random` for a random-weight Qwen2 model (meaningless output)");
  sub.add_option("--table", a->table,
                 "profile table whose profiles (and qualities) to use (default: "
                 "<data>/configs/profiles/<model>-<workload>.json, the model's measured table; none "
                 "is an error)");
  sub.add_option(
      "--quality-report", a->quality_report,
      "`kvserve quality` results whose pipelines join the candidates with their measured "
      "quality: the lower end of each 95% interval, as in the tables (default with the model's "
      "task table: the held-out scores <data>/docs/results/profiling/<workload>.baselines.json, "
      "else <data>/docs/results/quality/<workload>.json)");
  sub.add_option("--prompts", a->prompts,
                 "JSONL of {\"prompt_ids\": [...]} prompts (default: "
                 "<data>/configs/e2e/<model>-<workload>.jsonl, else random token ids)");
  sub.add_option("--workload", a->workload, "workload label of every request");
  sub.add_option("--quality-min", a->quality_min, "quality floor of every request");
  sub.add_option("--prompt-tokens", a->prompt_tokens,
                 "prompt length (file prompts: their last N tokens)")
      ->check(CLI::Range(16, 1 << 20));
  sub.add_option("--new-tokens", a->new_tokens, "tokens generated per request")
      ->check(CLI::Range(1, 4096));
  sub.add_option("--requests", a->requests, "requests per method and bandwidth")
      ->check(CLI::Range(1, 10000));
  sub.add_option("--points", a->points, "bandwidths in the sweep")->check(CLI::Range(1, 100));
  sub.add_option("--min-gbps", a->min_gbps, "lowest bandwidth (default: from the latency model)");
  sub.add_option("--max-gbps", a->max_gbps, "highest bandwidth (default: from the latency model)");
  sub.add_option("--switch-requests", a->switch_requests, "requests in the bandwidth-change run");
  sub.add_option("--prefix-prompts", a->prefix_prompts,
                 "prompts per bandwidth in the prefix-pool run");
  sub.add_option("--seed", a->seed, "seed of the random prompts and of the method order");
  sub.add_flag(
      "--pin", a->pin,
      "pin the prefill worker (with its codec threads) to CPU 0 and the decode worker to CPU "
      "1, when there are two or more (default: the scheduler places them)");
  sub.add_flag("!--no-overlap", a->overlap_prefill,
               "send the KV after the prefill instead of streaming it while the prefill runs");
  sub.add_option("--threads", a->threads,
                 "prefill worker model threads, BLAS included (the decode process uses 1)");
  sub.add_option("--markdown", out->markdown, "also write the report here");
  sub.add_option(
      "--results,--samples-out", out->results,
      "write the results (plot data and every sweep request's stage timings) as JSON here");
  for (const char* moved : {"--svg", "--switch-svg"})
    AddMovedOption(sub, moved,
                   "the plots are drawn from JSON now: --results R.json, then scripts/plots.py e2e "
                   "R.json JCT.svg SWITCH.svg (scripts/e2e_report.sh does both)");
  sub.add_option("--table-out", out->table_out, "write the calibrated profile table here");
  return [a, out, &sub] {
    a->command_line = "kvserve e2e";
    for (const auto* option : sub.get_options()) {
      if (option->count() == 0 || option->get_name() == "--help") continue;
      for (const auto& value : option->results())
        a->command_line += " " + option->get_name() + " " + value;
    }
    return RunE2eCommand(*a, *out);
  };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(e2e, "End-to-end benchmark of disaggregated serving (JCT sweep, prefix pool)",
                kvserve::cli::SetupE2e);
