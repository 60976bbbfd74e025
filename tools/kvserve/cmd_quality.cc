// Copyright kvserve authors. `kvserve quality`: task quality of compression
// profiles through the real prefill -> encode -> decode -> decode-steps path,
// relative to the uncompressed ("none") run on the same samples.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "experiments/quality_report.h"
#include "kvserve/quality.h"
#include "kvserve/runtime.h"

namespace kvserve::cli {
namespace {

struct QualityArgs {
  std::string model, workload, eval_dir = "data/eval";  // under the data directory
  bool eval_dir_given = false;
  std::vector<std::string> profiles;
  QualityOptions o = [] { QualityOptions q; q.cache_dir = ".cache/kvserve-quality"; return q; }();
  std::string head_scores;
  std::string wire_dtype = "f16";
  int threads = 0;
  int holdout_of = 0;  // score the samples a search of this many did not use
  bool json = false, per_sample = false, quiet = false;
};

int RunQuality(const QualityArgs& a) {
  constexpr const char* kCmd = "quality";
  auto eval_dir = DefaultDataFile(a.eval_dir, a.eval_dir_given);
  if (!eval_dir.ok()) return ReportError("quality", eval_dir.status());
  auto path = ResolveWorkloadPath(a.workload, *eval_dir);
  if (!path.ok()) return ReportError(kCmd, path.status());
  auto samples = LoadWorkload(*path);
  if (!samples.ok()) return ReportError(kCmd, samples.status());
  if (a.holdout_of > 0) {
    auto held = HeldOutSamples(*samples, a.holdout_of, a.o.seed);
    if (!held.ok()) return ReportError(kCmd, held.status().WithContext("--holdout-of"));
    *samples = std::move(*held);
  }
  auto dtype = ParseDType(a.wire_dtype);
  if (!dtype.ok()) return ReportError(kCmd, dtype.status());
  std::vector<Profile> profiles;
  for (const std::string& spec : SplitProfileList(a.profiles)) {
    auto p = ResolveProfile(spec);
    if (!p.ok()) return ReportError(kCmd, p.status());
    profiles.push_back(*p);
  }
  if (profiles.empty()) return ReportError(kCmd, Status::InvalidArgument("no --profile given"));
  const double t0 = NowSeconds();
  auto ev = QualityEvaluator::Create(a.model, RuntimeOptions{a.threads});
  if (a.threads > 0) SetBlasThreads(a.threads);  // parallel runs: no oversubscription
  if (!ev.ok()) return ReportError(kCmd, ev.status());
  const ModelConfig& c = (*ev)->model().config();
  if (!a.quiet) {
    Progress(kCmd, "loaded {} ({} layers) in {:.2f} s; workload {} ({} samples)", a.model,
             c.layers, NowSeconds() - t0, *path, samples->size());
  }
  QualityOptions o = a.o;
  o.wire_dtype = *dtype;
  if (!a.quiet) o.progress = [](const std::string& line) { Progress(kCmd, "{}", line); };
  nlohmann::json out = nlohmann::json::array();
  for (const Profile& profile : profiles) {
    auto r = lab::EvaluateQualityProfile(**ev, *samples, profile, a.head_scores, o);
    if (!r.ok()) return ReportError(kCmd, r.status());
    if (a.json) {
      out.push_back(nlohmann::json::parse(r->ToJson(a.per_sample)));
      continue;
    }
    fmt::print("{}", lab::QualityReportText(*r, *dtype));
  }
  if (a.json) fmt::print("{}\n", out.size() == 1 ? out[0].dump(2) : out.dump(2));
  return 0;
}

RunFn SetupQuality(CLI::App& sub) {
  auto a = std::make_shared<QualityArgs>();
  sub.description(
      "Task quality of compression profiles on an eval workload, through the real PD path: "
      "prefill once per sample (KV cached on disk under --cache-dir), cast to the wire dtype, "
      "encode, decode, import (pruned tokens masked from attention), then score the answer "
      "teacher-forced (exact match = greedy decode reproduces the answer; token accuracy; "
      "perplexity for prose). Quality is relative to the 'none' profile on the same samples, "
      "with a 95% paired-bootstrap CI. Workloads: a JSONL file or a name in --eval-dir "
      "(qa, math, code, prose, multihop, unseen and the harder qa-hard, multihop-hard, "
      "code-hard; built by scripts/data/build_all.sh, about 5 min).");
  sub.add_option("-m,--model", a->model, "model directory")->required();
  sub.add_option("-w,--workload", a->workload, "workload file or name")->required();
  sub.add_option("-p,--profile", a->profiles, "profile spec(s) or preset name(s), comma-separated")
      ->required();
  sub.add_option("-n,--samples", a->o.samples, "random subset of N samples (0 = all)")
      ->capture_default_str();
  sub.add_option("--seed", a->o.seed, "subset and bootstrap seed")->capture_default_str();
  sub.add_option("--holdout-of", a->holdout_of,
                 "score only samples a `kvserve profile --samples N --sample-seed <seed>` search "
                 "did not use (its held-out set; 0 = every sample is eligible)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--cache-dir", a->o.cache_dir, "prefill KV cache directory ('' = none)")
      ->capture_default_str();
  sub.add_option("--head-scores", a->head_scores, "head-score JSON (mixhq, duo)");
  sub.add_option("--eval-dir", a->eval_dir,
                 "where workload names are looked up (default: <data>/data/eval, written by "
                 "scripts/data/)")
      ->each([a](const std::string&) { a->eval_dir_given = true; });
  sub.add_option("--wire-dtype", a->wire_dtype, "dtype the KV is sent in (f16, bf16, f32)")
      ->capture_default_str();
  sub.add_option("--threads", a->threads, "runtime and BLAS threads (0 = all cores)")->capture_default_str();
  sub.add_option("--codec-threads", a->o.codec_threads, "encoder/decoder threads")
      ->capture_default_str();
  sub.add_option("--bootstrap", a->o.bootstrap_resamples, "bootstrap resamples")->capture_default_str();
  sub.add_flag("--json", a->json, "print the report as JSON");
  sub.add_flag("--per-sample", a->per_sample, "with --json: include per-sample scores");
  sub.add_flag("-q,--quiet", a->quiet, "no progress lines");
  return [a] { return RunQuality(*a); };
}

}  // namespace

KVSERVE_COMMAND(quality, "Task quality of profiles on an eval workload (relative to none)",
                SetupQuality);

}  // namespace kvserve::cli
