// Copyright kvserve authors. `kvserve profile`: the offline profiler (paper
// §5.2; experiments/profiling.h runs it). Writes the Pareto profile table
// the controller reads (--out), recorded ground truth
// (--generate-ground-truth) or the ablation / comparison report (--report).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "experiments/profiling.h"

namespace kvserve::cli {
namespace {

constexpr std::string_view kCommand = "profile";

struct ProfileCommand {
  lab::ProfileRunOptions o;
  std::string out;
  std::string generate_ground_truth;
  std::string report;
  CLI::Option* space_option = nullptr;
  CLI::Option* eval_dir_option = nullptr;
};

int RunProfileCommand(ProfileCommand& a) {
  auto space = DefaultDataFile(a.o.space.empty() ? "configs/strategy_space.json" : a.o.space,
                               a.space_option->count() > 0);
  if (!space.ok()) return ReportError(kCommand, space.status());
  a.o.space = *space;
  if (a.eval_dir_option->count() > 0) {
    // as given
  } else if (auto data = DataDirectory(); data.ok()) {
    a.o.eval_dir = lab::DataPath(*data, "data/eval");
  } else {
    a.o.eval_dir = "data/eval";
  }
  const lab::Progress progress = [](const std::string& line) { Progress(kCommand, "{}", line); };
  if (!a.generate_ground_truth.empty()) {
    auto truth = lab::GenerateGroundTruthRun(a.o, progress);
    if (!truth.ok()) return ReportError(kCommand, truth.status());
    if (Status s = lab::WriteTextFile(a.generate_ground_truth, truth->ToJson()); !s.ok())
      return ReportError(kCommand, s);
    Progress(kCommand, "wrote {}", a.generate_ground_truth);
    return 0;
  }
  if (!a.report.empty()) {
    auto report = lab::RunProfilingReport(a.o, progress);
    if (!report.ok()) return ReportError(kCommand, report.status());
    const std::filesystem::path dir(a.o.tables_dir.empty() ? "." : a.o.tables_dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    for (const auto& [workload, json] : report->tables) {
      const std::string path = (dir / (workload + ".json")).string();
      if (Status s = lab::WriteTextFile(path, json); !s.ok()) return ReportError(kCommand, s);
    }
    if (Status s = lab::WriteTextFile(a.report, report->markdown); !s.ok())
      return ReportError(kCommand, s);
    Progress(kCommand, "wrote {} and {} tables in {}", a.report, report->tables.size(),
             dir.string());
    return 0;
  }
  if (a.o.workload.empty() || a.out.empty())
    return ReportError(kCommand, Status::InvalidArgument("--workload and --out are required"));
  auto result = lab::RunProfileSearch(a.o, progress);
  if (!result.ok()) return ReportError(kCommand, result.status());
  if (Status s = lab::WriteTextFile(a.out, result->table_json); !s.ok())
    return ReportError(kCommand, s);
  Progress(kCommand, "wrote {} ({} Pareto profiles)", a.out, result->table.size() - 1);
  return 0;
}

RunFn SetupProfile(CLI::App& sub) {
  auto a = std::make_shared<ProfileCommand>();
  sub.description(
      "Offline profiler (paper §5.2): Bayesian search of the strategy space for the profiles "
      "with the highest compression ratio at quality >= --quality-min on a workload; every "
      "evaluation is stored in --db (rerun the same command to resume; nothing is evaluated "
      "twice); writes the Pareto profile table (controller format) to --out. With --model DIR "
      "and an eval workload, quality is task quality relative to uncompressed (kvserve "
      "quality's evaluator); otherwise it is the reconstruction proxy of a KV cache (labelled "
      "as such everywhere). docs/profiling.md explains the engine and the outputs.");
  sub.add_option("--model", a->o.model,
                 "model directory (task quality through the real prefill/decode path) or a name "
                 "(key of the results database for proxy runs)");
  sub.add_option("--workload", a->o.workload,
                 "workload. With --model DIR (a model directory): an eval set name or file "
                 "(data/eval/<name>.jsonl; task quality), or 'unified' (the mix of --mix). "
                 "Otherwise, without --kv/--ground-truth: synth-smooth, synth-outlier or "
                 "synth-unseen (synthetic KV, proxy quality)");
  sub.add_option("--quality-min", a->o.quality_min, "quality floor (relative to uncompressed)");
  sub.add_option("--budget", a->o.budget, "maximum evaluations")->check(CLI::Range(1, 1000000));
  sub.add_option("--out", a->out, "profile table JSON to write");
  a->space_option = sub.add_option(
      "--space", a->o.space, "strategy space JSON (default: <data>/configs/strategy_space.json)");
  sub.add_option("--db", a->o.db, "SQLite results database (created if missing)");
  sub.add_option("--kv", a->o.kv, "KV file to measure CR and proxy quality on");
  sub.add_option("--head-scores", a->o.head_scores, "head scores JSON for mixhq/duo");
  sub.add_option("--ground-truth", a->o.ground_truth,
                 "recorded ground truth JSON (repeat for a mixed/unified workload)");
  sub.add_option("--searcher", a->o.searcher, "bayes | random | exhaustive");
  sub.add_option("--seed", a->o.seed, "search seed");
  sub.add_option("--generate-ground-truth", a->generate_ground_truth,
                 "score every configuration of --space and write the ground truth JSON here (no "
                 "search): with --model DIR, task quality on --samples samples of the eval "
                 "workload (through --db: resumable, and shared with later searches); otherwise "
                 "the reconstruction proxy on the workload's KV");
  sub.add_option("--report", a->report,
                 "write the ablation and baseline comparison (Markdown) here, from --ground-truth "
                 "files");
  sub.add_option("--tables-dir", a->o.tables_dir, "with --report: where the profile tables go");
  sub.add_option("--unseen", a->o.unseen, "with --report: synthetic workload never profiled");
  sub.add_option("--samples", a->o.samples,
                 "task mode: eval samples per workload and evaluation (random subset; 0 = all)")
      ->capture_default_str();
  sub.add_option("--sample-seed", a->o.sample_seed, "task mode: subset and bootstrap seed")
      ->capture_default_str();
  sub.add_option("--holdout-samples", a->o.holdout_samples,
                 "task mode: score the search's Pareto rows again on N samples disjoint from the "
                 "search's and write those qualities into the table (0 = keep the search's own)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--floor-on", a->o.floor_on,
                 "task mode: a profile meets the floor when the 'lower' end of its 95% interval "
                 "does (on the search samples during the search, and on the held-out samples for "
                 "the table), or its 'point' estimate")
      ->capture_default_str()
      ->check(CLI::IsMember({"lower", "point"}));
  sub.add_option("--more-floors", a->o.more_floors,
                 "task mode: stricter quality floors searched after --quality-min, each with the "
                 "same budget through the same --db (what an earlier search evaluated costs "
                 "nothing), so the table also holds the best rows for requests with those floors "
                 "(e.g. 0.99,0.995); the held-out walk runs at every floor")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.5));
  sub.add_option("--cache-dir", a->o.cache_dir, "task mode: prefill KV cache directory ('' = none)")
      ->capture_default_str();
  a->eval_dir_option = sub.add_option("--eval-dir", a->o.eval_dir,
                                      "task mode: where <workload>.jsonl eval sets live (default: "
                                      "<data>/data/eval, written by scripts/data/)");
  sub.add_option("--mix", a->o.mix,
                 "task mode, --workload unified: the workloads averaged with equal weights")
      ->capture_default_str();
  sub.add_option("--codec-kv-tokens", a->o.codec_kv_tokens,
                 "task mode: CR/codec speed are measured on the first N tokens of one prefilled "
                 "sample's KV (the median-length one; 0 = all its tokens)")
      ->capture_default_str();
  sub.add_option("--threads", a->o.threads, "task mode: runtime and BLAS threads (0 = all cores)")
      ->capture_default_str();
  sub.add_option("--seeds", a->o.seeds, "with --report: seeds per ablation variant")
      ->check(CLI::Range(1, 1000));
  return [a] { return RunProfileCommand(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(profile, "Search the strategy space for the best profiles of a workload",
                kvserve::cli::SetupProfile);
