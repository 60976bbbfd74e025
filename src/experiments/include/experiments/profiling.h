// Copyright kvserve authors. The profiling runs of `kvserve profile` (paper
// §5.2): a Bayesian (or random, exhaustive) search of the strategy space for
// the profiles with the highest compression ratio under a quality floor on
// one workload, every evaluation stored in a results database (a rerun
// resumes); recorded ground truth; and the ablation / baseline report.
// docs/profiling.md explains the engine and the outputs.
#ifndef KVSERVE_EXPERIMENTS_PROFILING_H_
#define KVSERVE_EXPERIMENTS_PROFILING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/profiler.h"

namespace kvserve::lab {

struct ProfileRunOptions {
  // A model directory (task quality through the real prefill/decode path)
  // or a name (the results database's key for proxy runs).
  std::string model = "synthetic";
  // With a model directory: an eval set name or file, or "unified" (the
  // mix of `mix`). Otherwise synth-smooth, synth-outlier or synth-unseen.
  std::string workload;
  double quality_min = 0.97;
  int budget = 80;
  std::string space;                      // strategy space JSON
  std::string db = "kvserve-profile.db";  // SQLite results database
  std::string kv;                         // a KV file to measure CR and proxy quality on
  std::string head_scores;                // head scores JSON for mixhq/duo
  std::vector<std::string> ground_truth;  // recorded ground truth files
  std::string searcher = "bayes";         // bayes | random | exhaustive
  uint64_t seed = 1;
  // Report (RunProfilingReport).
  std::string tables_dir;  // named in the report's text
  std::string unseen = "synth-unseen";
  int seeds = 10;
  // Task mode (model is a model directory).
  int samples = 100;
  uint64_t sample_seed = 0;
  std::string cache_dir = ".cache/kvserve-quality";
  std::string eval_dir;
  std::string mix = "qa,math,code,prose";
  int codec_kv_tokens = 1024;
  int threads = 0;
  // Held-out scoring (task mode): the search's Pareto rows are scored again
  // on this many samples of each workload disjoint from the `samples` the
  // search scored (HeldOutSamples), and the table's quality is the held-out
  // figure; the search's own stays in each row as quality_search. 0: the
  // table carries the search's qualities (re-scored on the data they were
  // chosen on; the table's quality_kind says so).
  int holdout_samples = 100;
  // The held-out figure a floor is checked against: "lower" (the lower end
  // of the held-out 95% bootstrap interval: a profile meets q_min only when
  // its interval lies above it) or "point" (the point estimate).
  std::string floor_on = "lower";
  // Task mode: stricter floors searched after quality_min (each with the
  // same budget, through the same database), so the table also holds the
  // highest-CR rows a request with such a floor can be served from. The
  // table is the Pareto set of every search's rows; the held-out walk runs
  // at each floor. Floors <= quality_min are ignored.
  std::vector<double> more_floors;
};

// A search's Pareto profile table, also as labelled JSON (the controller's
// format plus quality_kind and a provenance comment).
struct ProfileRunResult {
  ProfileTable table;
  std::string table_json;
};

// Searches the space (or the candidates of recorded ground truth) and builds
// the Pareto table. Errors: unreadable inputs, an evaluator's error,
// NotFound when no profile meets the floor.
Result<ProfileRunResult> RunProfileSearch(const ProfileRunOptions& options,
                                          const Progress& progress);

// Scores every configuration of the space: the ground truth the searchers
// are scored against. With a model directory (task mode) quality is the task
// evaluator's on `samples` samples of the workload (seed `sample_seed`),
// each evaluation through the results database `db` (an interrupted run
// resumes; searches on the same samples find them there), and CR / codec
// speed are measured on the workload's real KV; InvalidArgument for
// "unified" (one ground truth per workload; a mix passes several). Otherwise
// the reconstruction proxy on the synthetic or --kv cache.
Result<GroundTruth> GenerateGroundTruthRun(const ProfileRunOptions& options,
                                           const Progress& progress);

// The ablation over seeds, per-workload and unified tables and the
// comparison with kivi-2 and cachegen (analog of the paper's Table 1), from
// `ground_truth` files: the Markdown and one labelled table JSON per
// workload plus "unified". From task ground truths (quality_kind "task:
// ..."), only the ground-truth and ablation sections and no tables (task
// tables come from held-out searches); InvalidArgument when task and proxy
// ground truths are mixed.
struct ProfilingReport {
  std::string markdown;
  std::vector<std::pair<std::string, std::string>> tables;  // workload -> table JSON
};
Result<ProfilingReport> RunProfilingReport(const ProfileRunOptions& options,
                                           const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_PROFILING_H_
