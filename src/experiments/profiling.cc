// Copyright kvserve authors. The profiling runs of `kvserve profile`
// (experiments/profiling.h): searches of the strategy space with a results
// database, recorded ground truth, and the ablation / comparison report.
//
// Quality: with a model directory and an eval workload, the task evaluator
// (TaskEvaluator over kvserve quality's QualityEvaluator); with synthetic or
// KV-file caches, the reconstruction proxy, and every output says so.
#include "experiments/ablation.h"
#include "experiments/profiling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {
namespace {

// The KV cache (and head scores) quality and CR are measured on.
struct KvSource {
  KvCache kv;
  HeadScores scores;
  std::string description;
  std::string sample_set;
};

Result<KvSource> LoadKvSource(const ProfileRunOptions& a, const std::string& workload) {
  KvSource s;
  if (!a.kv.empty()) {
    KvFileMetadata meta;
    auto kv = LoadKvFile(a.kv, &meta);
    if (!kv.ok()) return kv.status();
    s.kv = std::move(*kv);
    s.description = "KV file " + a.kv + (meta["synthetic"] == "true" ? " (synthetic)" : "");
    s.sample_set = "kv:" + a.kv;
  } else {
    auto options = SynthWorkloadOptions(workload);
    if (!options.ok()) {
      return Status::InvalidArgument(
          options.status().message() +
          "; the task evaluator is not built yet: pass --kv FILE (e.g. from `kvserve kv-dump`) "
          "or --ground-truth FILE");
    }
    auto kv = SynthesizeKv(*options);
    if (!kv.ok()) return kv.status();
    s.kv = std::move(*kv);
    s.description = fmt::format("synthetic KV ({}: {} bf16, seed {})", workload,
                                ShapeString(options->shape), options->seed);
    s.sample_set = fmt::format("synth:{}:seed={}", workload, options->seed);
  }
  if (!a.head_scores.empty()) {
    auto scores = HeadScores::Load(a.head_scores);
    if (!scores.ok()) return scores.status();
    s.scores = std::move(*scores);
  } else {
    s.scores = SynthesizeHeadScores(s.kv.shape().layers, s.kv.shape().kv_heads, 1);
  }
  return s;
}

// The table JSON with provenance fields (ignored by ProfileTable::FromJson).
// `row_extras` (spec -> object) adds fields to rows (the controller ignores
// them): the held-out and search qualities behind a row's quality.
std::string LabelledTableJson(const ProfileTable& table, const std::string& quality_kind,
                              const std::string& provenance,
                              const nlohmann::json& row_extras = nlohmann::json::object()) {
  nlohmann::json doc = nlohmann::json::parse(table.ToJson());
  nlohmann::ordered_json out;
  out["format"] = doc["format"];
  out["version"] = doc["version"];
  out["quality_kind"] = quality_kind;
  out["comment"] = provenance;
  out["workloads"] = doc["workloads"];
  for (auto& row : doc["profiles"]) {
    const std::string spec = row.value("spec", "");
    if (row_extras.contains(spec))
      for (const auto& [k, v] : row_extras[spec].items()) row[k] = v;
  }
  out["profiles"] = doc["profiles"];
  return out.dump(2) + "\n";
}

struct SearchOutcome {
  SearchTrace trace;
  std::vector<Candidate> candidates;
  int reused = 0;
};

// Runs one search with live progress and returns the trace.
// `lower_ends`: the search checks the floor against the lower end of each
// evaluation's 95% interval (the database keeps the full estimates).
Result<SearchOutcome> RunSearch(const ProfileRunOptions& a, std::vector<Candidate> candidates,
                                Evaluator& inner, ResultsDb* db, const std::string& workload,
                                const std::string& sample_set, const Progress& progress,
                                bool lower_ends = false) {
  SearchOutcome out;
  out.candidates = std::move(candidates);
  std::unique_ptr<Evaluator> cached, lower;
  Evaluator* evaluator = &inner;
  if (db != nullptr) {
    cached = MakeCachingEvaluator(&inner, db, {a.model, workload, "", sample_set, ""}, &out.reused);
    evaluator = cached.get();
  }
  if (lower_ends) {
    lower = MakeLowerEndEvaluator(evaluator);
    evaluator = lower.get();
  }
  std::unique_ptr<Searcher> searcher;
  if (a.searcher == "bayes") {
    searcher = MakeBayesSearcher();
  } else if (a.searcher == "random") {
    searcher = MakeRandomSearcher();
  } else if (a.searcher == "exhaustive") {
    searcher = MakeExhaustiveSearcher();
  } else {
    return Status::InvalidArgument("--searcher must be bayes, random or exhaustive");
  }
  SearchProblem problem{out.candidates, a.quality_min, a.budget, a.seed};
  const double start = NowSeconds();
  ProgressFn search_progress;
  if (progress) {
    search_progress = [&](const SearchProgress& p) {
      Note(progress,
           "iter {:>3}/{}  q={:.4f} {}  best feasible CR {:.2f}  evaluations saved {}  "
           "remaining {}  {:.1f} s  {}",
           p.iteration, a.budget, p.quality, p.feasible ? "feasible  " : "infeasible",
           p.best_feasible_cr, out.reused, p.remaining, NowSeconds() - start,
           out.candidates[p.candidate].profile.ToString());
    };
  }
  auto trace = searcher->Search(problem, *evaluator, search_progress);
  if (!trace.ok()) return trace.status();
  out.trace = std::move(*trace);
  return out;
}

// Candidates with measured codec metrics, cached in the database, with
// the run's progress lines.
Result<std::vector<Candidate>> MeasureRunCandidates(const ProfileRunOptions& a,
                                                    const StrategySpace& space, const KvView& kv,
                                                    const HeadScores* scores,
                                                    const std::string& sample_set, ResultsDb* db,
                                                    const std::string& workload,
                                                    const Progress& progress) {
  auto meter = MakeKvCodecMeter(kv, scores, 1);
  const double start = NowSeconds();
  MeasureCounts counts;
  auto out = MeasureCandidates(
      space, *meter, *db, {a.model, workload, "", sample_set, ""}, 250,
      [&](int measured, int from_db, size_t done) {
        Note(progress, "codec metrics: {} measured, {} from the database, {} / {} ({:.0f} s)", measured,
             from_db, done, space.size(), NowSeconds() - start);
        return Status::Ok();
      },
      &counts);
  if (!out.ok()) return out.status();
  Note(progress, "codec metrics: {} measured, {} from the database", counts.measured, counts.from_db);
  return out;
}

// Every observation of the search as a table entry (quality as the search saw it),
// feasible or not: BuildParetoTable keeps those at the floor.
std::vector<TableEntry> ObservedEntries(const SearchOutcome& s, const std::string& workload) {
  std::vector<TableEntry> entries;
  for (const SearchObservation& o : s.trace.observations) {
    TableEntry e;
    e.profile = s.candidates[o.candidate].profile;
    e.codec = s.candidates[o.candidate].codec;
    e.quality[workload] = o.quality.quality;
    entries.push_back(std::move(e));
  }
  return entries;
}

// The search of a profiling run: RunSearch with the run's lines around it
// ("... search", "stopped", "best feasible"); *entries receives every row of
// the trace, also when it returns NotFound (no profile meets the floor).
Result<SearchOutcome> SearchFeasible(const ProfileRunOptions& a, std::vector<Candidate> candidates,
                                     Evaluator& evaluator, ResultsDb* db,
                                     const std::string& sample_set, const Progress& progress,
                                     std::vector<TableEntry>* entries, bool lower_ends = false) {
  Note(progress, "{} search, workload {}, quality{} >= {}, budget {}, seed {}, db {}", a.searcher,
       a.workload, lower_ends ? " (lower end of the 95% interval)" : "", a.quality_min, a.budget,
       a.seed, a.db);
  KVSERVE_ASSIGN_OR_RETURN(SearchOutcome outcome, RunSearch(a, std::move(candidates), evaluator, db,
                                                            a.workload, sample_set, progress,
                                                            lower_ends));
  const SearchTrace& trace = outcome.trace;
  Note(progress, "stopped: {}; {} evaluations ({} from the database), {} feasible",
       trace.stop_reason, trace.observations.size(), outcome.reused, trace.Feasible().size());
  // Every evaluated row, also when none meets this floor (a search at a
  // stricter floor still contributes rows that meet a looser one).
  *entries = ObservedEntries(outcome, a.workload);
  if (trace.best_feasible < 0) return Status::NotFound("no feasible profile found");
  const Candidate& best = outcome.candidates[trace.best_feasible];
  Note(progress, "best feasible: {} (CR {:.3f})", best.profile.ToString(),
       best.codec.compression_ratio);
  return outcome;
}

// GenerateGroundTruthRun on synthetic or KV-file caches (proxy quality).
Result<GroundTruth> ProxyGroundTruth(const ProfileRunOptions& a, const Progress& progress) {
  auto space = StrategySpace::Load(a.space);
  if (!space.ok()) return space.status();
  auto source = LoadKvSource(a, a.workload);
  if (!source.ok()) return source.status();
  Note(progress, "ground truth for {}: {} configurations on {}; quality = {}", a.workload,
       space->size(), source->description, kReconstructionProxyLabel);
  const double start = NowSeconds();
  auto truth = GenerateGroundTruth(
      *space, source->kv.view(), &source->scores, a.workload,
      fmt::format("{}; space {}; threads 1; command: kvserve profile --generate-ground-truth",
                  source->description, a.space),
      [&](int done, int total) {
        if (done % 250 == 0 || done == total) {
          Note(progress, "{} / {} ({:.0f} s)", done, total, NowSeconds() - start);
        }
      });
  if (!truth.ok()) return truth.status();
  const int best = truth->BestFeasible(a.quality_min);
  Note(progress, "best at quality >= {}: {} (CR {:.3f})", a.quality_min,
       best >= 0 ? truth->rows[best].spec : "none",
       best >= 0 ? truth->rows[best].codec.compression_ratio : 0.0);
  return std::move(*truth);
}

// --- Task mode: --model is a model directory and --workload an eval set (or
// "unified": the equal mix of --mix). Quality is the task evaluator's.

bool IsModelDir(const std::string& model) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(model) / "config.json", ec);
}

// One workload of a task search: its evaluator, caching wrapper and the real
// KV its cheap metrics are measured on.
struct TaskPart {
  std::string workload;
  std::unique_ptr<TaskEvaluator> evaluator;
  std::unique_ptr<Evaluator> cached;  // results database in front of `evaluator`
  std::unique_ptr<TaskEvaluator> holdout;  // held-out samples (null without held-out scoring)
  std::unique_ptr<Evaluator> holdout_cached;
  std::vector<Candidate> candidates;
  std::string codec_kv;
};

// quality_min, then the stricter floors of more_floors (those above it) in
// ascending order, without repeats.
std::vector<double> SearchFloors(const ProfileRunOptions& a) {
  std::vector<double> floors{a.quality_min};
  for (double f : a.more_floors)
    if (f > a.quality_min) floors.push_back(f);
  std::sort(floors.begin() + 1, floors.end());
  floors.erase(std::unique(floors.begin(), floors.end()), floors.end());
  return floors;
}

// Scores rows of the search on the held-out evaluators of `parts` (through
// the results database) and returns the table whose quality is the held-out
// figure a floor is checked against (`floor_on`: the interval's lower end or
// the point estimate). The rows scored: every row of the search's Pareto
// table, and the search's other feasible rows (`entries` at
// quality[workload] >= the floor) in descending CR down to the first that
// meets the floor held out, so a Pareto row that fails out of sample gives
// way to the highest-CR search-feasible profile that holds, not to nothing;
// with stricter floors (SearchFloors) the walk runs at each of them.
// `extras` receives per row the held-out point, interval and the search's
// quality, per workload. NotFound when no scored row meets the floor.
Result<ProfileTable> HoldOutTable(const ProfileRunOptions& a, const ProfileTable& searched,
                                  std::span<const TableEntry> entries,
                                  std::vector<TaskPart>& parts, bool unified,
                                  const Progress& progress, nlohmann::json* extras) {
  const bool lower = a.floor_on == "lower";
  struct Row {
    std::string spec;
    CodecMetrics codec;
    std::map<std::string, double, std::less<>> quality;  // the search's
    bool pareto;
  };
  std::vector<Row> rows;
  std::set<std::string> seen;
  for (const ProfileCost& row : searched.profiles()) {
    if (row.spec == "none") continue;  // raw: quality 1 by definition
    seen.insert(row.spec);
    rows.push_back({row.spec,
                    CodecMetrics{row.compression_ratio, row.encode_bytes_per_second,
                                 row.decode_bytes_per_second, row.overhead_seconds},
                    row.quality, true});
  }
  for (const TableEntry& e : entries) {
    auto q = e.quality.find(a.workload);
    const std::string spec = e.profile.ToString();
    if (q == e.quality.end() || q->second < a.quality_min || e.codec.compression_ratio <= 1 ||
        !seen.insert(spec).second)
      continue;
    rows.push_back({spec, e.codec, {e.quality.begin(), e.quality.end()}, false});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return x.codec.compression_ratio > y.codec.compression_ratio;
  });
  std::vector<TableEntry> held_entries;
  std::string rejected;
  // The walk runs at every floor: a feasible row off the Pareto set is
  // scored while some floor its search quality meets has no row that holds.
  const std::vector<double> floors = SearchFloors(a);
  std::vector<char> met(floors.size(), 0);
  for (const Row& row : rows) {
    const auto searched_q = row.quality.find(a.workload);
    const double search_figure = searched_q != row.quality.end() ? searched_q->second : 0.0;
    bool wanted = row.pareto;
    for (size_t i = 0; i < floors.size(); ++i)
      wanted = wanted || (!met[i] && search_figure >= floors[i]);
    if (!wanted) continue;  // below a row that holds at each floor it meets: only the Pareto rows
    auto profile = Profile::Parse(row.spec);
    if (!profile.ok()) return profile.status();
    TableEntry e;
    e.profile = *profile;
    e.codec = row.codec;
    nlohmann::json& x = (*extras)[row.spec];
    std::vector<Evaluator*> held;
    for (TaskPart& part : parts) {
      auto q = part.holdout_cached->Evaluate(*profile);
      if (!q.ok()) return q.status().WithContext("held-out " + part.workload + " " + row.spec);
      e.quality[part.workload] = lower ? q->LowerBound() : q->quality;
      x["quality_holdout"][part.workload] = q->quality;
      x["quality_low"][part.workload] = q->LowerBound();
      x["quality_high"][part.workload] = std::isfinite(q->high) ? q->high : q->quality + q->ci_half_width;
      auto searched_q = row.quality.find(part.workload);
      if (searched_q != row.quality.end()) x["quality_search"][part.workload] = searched_q->second;
      held.push_back(part.holdout_cached.get());
    }
    if (unified) {
      MixedEvaluator mix(held);  // answered by the database: the parts were just scored
      auto q = mix.Evaluate(*profile);
      if (!q.ok()) return q.status();
      e.quality["unified"] = lower ? q->LowerBound() : q->quality;
      x["quality_holdout"]["unified"] = q->quality;
      x["quality_low"]["unified"] = q->LowerBound();
      x["quality_high"]["unified"] = q->quality + q->ci_half_width;
      auto searched_q = row.quality.find("unified");
      if (searched_q != row.quality.end()) x["quality_search"]["unified"] = searched_q->second;
    }
    const double figure = e.quality[a.workload];
    for (size_t i = 0; i < floors.size(); ++i) met[i] = met[i] || figure >= floors[i];
    Note(progress, "held out{}: {} CR {:.2f} quality {} {:.4f} (search {:.4f}){}",
         row.pareto ? "" : " (feasible, not Pareto)", row.spec, row.codec.compression_ratio,
         lower ? "lower end" : "point", figure,
         row.quality.count(a.workload) ? row.quality.at(a.workload) : 0.0,
         figure >= a.quality_min ? "" : "  below the floor");
    if (figure < a.quality_min)
      rejected += fmt::format("{}{} ({:.4f})", rejected.empty() ? "" : ", ", row.spec, figure);
    held_entries.push_back(std::move(e));
  }
  auto table = BuildParetoTable(held_entries, a.workload, a.quality_min);
  if (!table.ok()) {
    return Status::NotFound(fmt::format(
        "no feasible profile of the search meets quality >= {} on the held-out samples "
        "({} of the 95% interval): {}",
        a.quality_min, lower ? "lower end" : "point estimate", rejected));
  }
  return table;
}

// What a task-mode run evaluates with: the results database, the model's
// quality evaluator, its head scores and one TaskPart per workload (the
// candidates with codec metrics measured on that workload's real KV).
// Heap-held: the parts' evaluators point into it.
struct TaskSetup {
  std::unique_ptr<ResultsDb> db;
  std::unique_ptr<QualityEvaluator> quality;
  std::optional<HeadScores> scores;
  std::vector<TaskPart> parts;
  bool unified = false;
};

// Builds the TaskSetup of `a` (its workload, or the parts of --mix for
// "unified"); held-out evaluators only when a.holdout_samples > 0.
Result<std::unique_ptr<TaskSetup>> PrepareTask(const ProfileRunOptions& a,
                                               const Progress& progress) {
  if (a.workload.empty()) return Status::InvalidArgument("a workload is required (--workload)");
  auto setup = std::make_unique<TaskSetup>();
  auto db = ResultsDb::Open(a.db);
  if (!db.ok()) return db.status();
  setup->db = std::move(*db);
  auto space = StrategySpace::Load(a.space);
  if (!space.ok()) return space.status();
  auto quality = QualityEvaluator::Create(a.model, RuntimeOptions{a.threads});
  if (!quality.ok()) return quality.status();
  // The BLAS pool too: parallel searches with --threads 1 each must not
  // oversubscribe the cores (OpenBLAS otherwise starts one thread per core).
  if (a.threads > 0) SetBlasThreads(a.threads);
  setup->quality = std::move(*quality);
  const ModelConfig& config = setup->quality->model().config();

  // Head scores for mixhq/duo: --head-scores, else <model>/head_scores.json.
  std::string scores_path = a.head_scores;
  if (scores_path.empty()) {
    const auto fallback = std::filesystem::path(a.model) / "head_scores.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(fallback, ec)) scores_path = fallback.string();
  }
  std::optional<HeadScores>& scores = setup->scores;
  if (!scores_path.empty()) {
    auto s = HeadScores::Load(scores_path);
    if (!s.ok()) return s.status();
    if (s->layers != config.layers || s->kv_heads != config.kv_heads) {
      return Status::InvalidArgument(
          fmt::format("head scores {} are for {} x {} heads, the model has {} x {}", scores_path,
                      s->layers, s->kv_heads, config.layers, config.kv_heads));
    }
    scores = std::move(*s);
  }
  std::vector<Profile> profiles;
  int dropped = 0;
  for (const Profile& p : space->profiles()) {
    if (!scores && NeedsHeadScores(p)) {
      ++dropped;
      continue;
    }
    profiles.push_back(p);
  }
  if (dropped > 0) {
    Note(progress,
         "no head scores ({}/head_scores.json or --head-scores): {} mixhq/duo "
         "configurations left out",
         a.model, dropped);
  }
  auto usable = StrategySpace::FromProfiles(profiles);
  if (!usable.ok()) return usable.status();

  const bool unified = setup->unified = a.workload == "unified";
  const std::vector<std::string> names = unified ? SplitWords(a.mix) : std::vector{a.workload};
  if (names.empty()) return Status::InvalidArgument("--mix is empty");
  if (a.holdout_samples < 0) return Status::InvalidArgument("--holdout-samples must be >= 0");
  if (a.floor_on != "lower" && a.floor_on != "point")
    return Status::InvalidArgument("--floor-on must be lower or point, not " + a.floor_on);
  TaskEvaluatorOptions options;
  options.samples = a.samples;
  options.seed = a.sample_seed;
  options.cache_dir = a.cache_dir;
  options.head_scores = scores ? &*scores : nullptr;
  std::vector<TaskPart>& parts = setup->parts;
  for (const std::string& w : names) {
    auto path = ResolveWorkloadPath(w, a.eval_dir);
    if (!path.ok()) return path.status();
    auto samples = LoadWorkload(*path);
    if (!samples.ok()) return samples.status();
    TaskPart part;
    part.workload = w;
    if (a.holdout_samples > 0) {
      auto held = HeldOutSamples(*samples, a.samples, a.sample_seed);
      if (!held.ok()) {
        return Status::InvalidArgument(fmt::format(
            "workload {}: {}: lower --samples, or pass --holdout-samples 0 (the table then "
            "reports the search's own qualities)",
            w, held.status().message()));
      }
      TaskEvaluatorOptions held_options = options;
      held_options.samples = a.holdout_samples;
      held_options.sample_tag = "holdout";
      auto held_ev = TaskEvaluator::Create(setup->quality.get(), w, std::move(*held), held_options);
      if (!held_ev.ok()) return held_ev.status();
      part.holdout = std::move(*held_ev);
      part.holdout_cached = MakeCachingEvaluator(part.holdout.get(), setup->db.get(),
                                                 {a.model, w, "", part.holdout->sample_set(), ""});
    }
    auto ev = TaskEvaluator::Create(setup->quality.get(), w, std::move(*samples), options);
    if (!ev.ok()) return ev.status();
    part.evaluator = std::move(*ev);
    auto kv = part.evaluator->CodecKv(a.codec_kv_tokens, &part.codec_kv);
    if (!kv.ok()) return kv.status();
    Note(progress, "workload {}: {} ({} samples scored per evaluation); codec metrics on {}", w,
         *path, part.evaluator->samples_scored(), part.codec_kv);
    const std::string codec_set =
        fmt::format("realkv:{}:tokens={}", part.evaluator->sample_set(), kv->shape().tokens);
    auto c = MeasureRunCandidates(a, *usable, kv->view(), options.head_scores, codec_set, setup->db.get(), w,
                               progress);
    if (!c.ok()) return c.status();
    part.candidates = std::move(*c);
    part.cached = MakeCachingEvaluator(part.evaluator.get(), setup->db.get(),
                                       {a.model, w, "", part.evaluator->sample_set(), ""});
    parts.push_back(std::move(part));
  }
  return setup;
}

Result<ProfileRunResult> RunTaskProfile(const ProfileRunOptions& a, const Progress& progress) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<TaskSetup> setup, PrepareTask(a, progress));
  std::vector<TaskPart>& parts = setup->parts;
  const bool unified = setup->unified;
  ResultsDb* db = setup->db.get();
  // Candidates: a unified search sees the mean codec metrics of its parts.
  std::vector<Candidate> candidates = parts.front().candidates;
  if (unified) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      CodecMetrics m{};
      for (const TaskPart& p : parts) {
        m.compression_ratio += p.candidates[i].codec.compression_ratio / parts.size();
        m.encode_bytes_per_second += p.candidates[i].codec.encode_bytes_per_second / parts.size();
        m.decode_bytes_per_second += p.candidates[i].codec.decode_bytes_per_second / parts.size();
      }
      candidates[i].codec = m;
    }
  }
  std::vector<Evaluator*> cached_parts;
  for (TaskPart& p : parts) cached_parts.push_back(p.cached.get());
  MixedEvaluator mixed(cached_parts);
  // A single workload goes straight to its evaluator (RunSearch caches it);
  // the mix reads every part through the database, so evaluations shared
  // with the per-workload searches are never paid twice.
  Evaluator& evaluator = unified ? static_cast<Evaluator&>(mixed) : *parts.front().evaluator;
  const std::string sample_set =
      (unified ? "mix=" + a.mix + ";" : std::string()) + parts.front().evaluator->sample_set();
  const std::string quality_kind = fmt::format(
      "task: relative quality vs none (exact-match ratio; perplexity ratio for perplexity "
      "workloads) on {} samples per workload (seed {}), model {}, 95% paired bootstrap CI",
      parts.front().evaluator->samples_scored(), a.sample_seed, a.model);
  Note(progress, "quality evaluator: {}", evaluator.name());
  std::vector<TableEntry> entries;
  // The search holds its rows to the rule the table is checked by: with
  // --floor-on lower, the lower end of the interval on the search samples.
  const std::vector<double> floors = SearchFloors(a);
  std::vector<Candidate> stricter_candidates;
  if (floors.size() > 1) stricter_candidates = candidates;
  auto outcome = SearchFeasible(a, std::move(candidates), evaluator, db, sample_set,
                                progress, &entries, a.floor_on == "lower");
  if (!outcome.ok()) return outcome.status();
  // Stricter floors: the same search again (same budget and seed; what the
  // earlier ones evaluated is answered by the database), its rows added.
  std::set<std::string> seen;
  for (const TableEntry& e : entries) seen.insert(e.profile.ToString());
  for (size_t i = 1; i < floors.size(); ++i) {
    ProfileRunOptions strict = a;
    strict.quality_min = floors[i];
    std::vector<TableEntry> more;
    auto o = SearchFeasible(strict, stricter_candidates, evaluator, db, sample_set, progress, &more,
                            a.floor_on == "lower");
    if (!o.ok() && o.status().code() != StatusCode::kNotFound) return o.status();
    if (!o.ok()) Note(progress, "no profile meets quality >= {} on the search samples", floors[i]);
    for (TableEntry& e : more)
      if (seen.insert(e.profile.ToString()).second) entries.push_back(std::move(e));
  }
  if (unified) {
    // Every row also carries each part's quality (answered by the database).
    for (TableEntry& e : entries) {
      for (TaskPart& p : parts) {
        auto q = p.cached->Evaluate(e.profile);
        if (!q.ok()) return q.status();
        e.quality[p.workload] = q->quality;
      }
    }
  }
  auto table = BuildParetoTable(entries, a.workload, a.quality_min);
  if (!table.ok()) return table.status();
  nlohmann::json extras = nlohmann::json::object();
  std::string quality_text = quality_kind;
  if (a.holdout_samples > 0) {
    Note(progress,
         "held-out scoring of {} Pareto rows (and higher-CR feasible rows until one holds) on "
         "{} ({} the floor)",
         table->size() - 1, parts.front().holdout->name(),
         a.floor_on == "lower" ? "the lower end of the 95% interval meets" : "the point estimate meets");
    auto held = HoldOutTable(a, *table, entries, parts, unified, progress, &extras);
    if (!held.ok()) return held.status();
    table = std::move(*held);
    quality_text = fmt::format(
        "task: relative quality vs none (exact-match ratio; perplexity ratio for perplexity "
        "workloads) on {} held-out samples per workload, disjoint from the {} the search scored "
        "(seed {}), model {}; quality = the {} of the held-out 95% paired bootstrap CI "
        "(quality_holdout: point estimate, quality_low / quality_high: the interval, "
        "quality_search: on the search samples)",
        parts.front().holdout->samples_scored(), parts.front().evaluator->samples_scored(),
        a.sample_seed, a.model, a.floor_on == "lower" ? "lower end" : "point estimate");
  }
  std::string kv_text;
  for (const TaskPart& p : parts) kv_text += (kv_text.empty() ? "" : "; ") + p.codec_kv;
  const std::string provenance = fmt::format(
      "kvserve profile --model {} --workload {}{}: {} search, quality >= {}{}, budget {}, seed "
      "{}; {} evaluations; quality: {} ({}). CR and codec throughputs: CPU, 1 thread, measured "
      "on real prefilled KV ({}).",
      a.model, a.workload, unified ? " --mix " + a.mix : "", a.searcher, a.quality_min,
      floors.size() > 1
          ? fmt::format(" (then again at {}, budget {} each)",
                        fmt::join(floors.begin() + 1, floors.end(), ", "), a.budget)
          : std::string(),
      a.budget, a.seed, entries.size(), evaluator.name(), quality_text, kv_text);
  return ProfileRunResult{*table, LabelledTableJson(*table, quality_text, provenance, extras)};
}

// GenerateGroundTruthRun in task mode: every configuration of the space
// scored by the task evaluator (through the results database, so an
// interrupted run resumes), with the codec metrics measured on the
// workload's real KV.
Result<GroundTruth> TaskGroundTruth(const ProfileRunOptions& options, const Progress& progress) {
  if (options.workload == "unified") {
    return Status::InvalidArgument(
        "a ground truth is per workload: generate one for each workload of the mix and pass "
        "them all to --ground-truth");
  }
  ProfileRunOptions a = options;
  a.holdout_samples = 0;  // every configuration is scored on the same samples
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<TaskSetup> setup, PrepareTask(a, progress));
  TaskPart& part = setup->parts.front();
  GroundTruth truth;
  truth.workload = a.workload;
  truth.quality_kind = fmt::format(
      "task: relative quality vs none (exact-match ratio; perplexity ratio for perplexity "
      "workloads) on {} samples (seed {}), model {}",
      part.evaluator->samples_scored(), a.sample_seed, a.model);
  truth.evaluator = part.evaluator->name();
  truth.source = fmt::format(
      "{}; CR and codec throughputs: CPU, 1 thread, on {}; space {}; command: kvserve profile "
      "--model {} --workload {} --space {} --samples {} --sample-seed {} --codec-kv-tokens {} "
      "--generate-ground-truth",
      part.evaluator->name(), part.codec_kv, a.space, a.model, a.workload, a.space, a.samples,
      a.sample_seed, a.codec_kv_tokens);
  const double start = NowSeconds();
  const int total = static_cast<int>(part.candidates.size());
  Note(progress, "ground truth for {}: {} configurations scored by {}", a.workload, total,
       part.evaluator->name());
  for (int i = 0; i < total; ++i) {
    const Candidate& c = part.candidates[i];
    auto q = part.cached->Evaluate(c.profile);
    if (!q.ok()) return q.status().WithContext(c.profile.ToString());
    truth.rows.push_back({c.profile.ToString(), q->quality, c.codec});
    Note(progress, "{} / {}  q={:.4f}  CR {:.2f}  {:.0f} s  {}", i + 1, total, q->quality,
         c.codec.compression_ratio, NowSeconds() - start, c.profile.ToString());
  }
  const int best = truth.BestFeasible(a.quality_min);
  Note(progress, "best at quality >= {}: {} (CR {:.3f})", a.quality_min,
       best >= 0 ? truth.rows[best].spec : "none",
       best >= 0 ? truth.rows[best].codec.compression_ratio : 0.0);
  return truth;
}

}  // namespace

Result<ProfileRunResult> RunProfileSearch(const ProfileRunOptions& a, const Progress& progress) {
  if (a.kv.empty() && a.ground_truth.empty() && IsModelDir(a.model))
    return RunTaskProfile(a, progress);
  if (a.workload.empty()) return Status::InvalidArgument("a workload is required (--workload)");
  if (!a.more_floors.empty())
    return Status::InvalidArgument(
        "--more-floors applies to task quality (--model DIR with an eval workload), not to the "
        "proxy or a recorded ground truth: search each floor with its own --quality-min");
  auto db = ResultsDb::Open(a.db);
  if (!db.ok()) return db.status();

  std::vector<GroundTruth> truths;
  for (const std::string& path : a.ground_truth) {
    auto t = GroundTruth::Load(path);
    if (!t.ok()) return t.status();
    truths.push_back(std::move(*t));
  }
  std::vector<Candidate> candidates;
  std::vector<std::unique_ptr<Evaluator>> owned_parts;  // before `evaluator`: it points at them
  std::unique_ptr<Evaluator> evaluator;
  std::string quality_kind, sample_set, source_text;
  std::optional<KvSource> source;
  if (!truths.empty()) {
    auto c = truths.front().Candidates();
    if (!c.ok()) return c.status();
    candidates = std::move(*c);
    quality_kind = truths.front().quality_kind;
    if (truths.size() == 1) {
      evaluator = truths.front().MakeEvaluator();
      sample_set = "ground-truth:" + truths.front().workload;
    } else {
      // Mixed workload: average quality; codec metrics averaged too.
      for (const GroundTruth& t : truths) owned_parts.push_back(t.MakeEvaluator());
      std::vector<Evaluator*> parts;
      for (auto& p : owned_parts) parts.push_back(p.get());
      evaluator = std::make_unique<MixedEvaluator>(std::move(parts));
      sample_set = "ground-truth-mix";
      for (size_t i = 0; i < candidates.size(); ++i) {
        CodecMetrics m{};
        for (const GroundTruth& t : truths) {
          if (t.rows.size() != candidates.size() || t.rows[i].spec != truths.front().rows[i].spec) {
            return Status::InvalidArgument("ground truths cover different spaces");
          }
          m.compression_ratio += t.rows[i].codec.compression_ratio / truths.size();
          m.encode_bytes_per_second += t.rows[i].codec.encode_bytes_per_second / truths.size();
          m.decode_bytes_per_second += t.rows[i].codec.decode_bytes_per_second / truths.size();
        }
        candidates[i].codec = m;
      }
    }
    source_text = "recorded ground truth " + fmt::format("{}", fmt::join(a.ground_truth, ", "));
  } else {
    auto space = StrategySpace::Load(a.space);
    if (!space.ok()) return space.status();
    auto s = LoadKvSource(a, a.workload);
    if (!s.ok()) return s.status();
    source = std::move(*s);
    Note(progress, "space {}: {} configurations; KV: {}", a.space, space->size(),
         source->description);
    auto c = MeasureRunCandidates(a, *space, source->kv.view(), &source->scores, source->sample_set,
                               db->get(), a.workload, progress);
    if (!c.ok()) return c.status();
    candidates = std::move(*c);
    evaluator = MakeReconstructionProxyEvaluator(source->kv.view(), &source->scores);
    quality_kind = std::string(kReconstructionProxyLabel);
    sample_set = source->sample_set;
    source_text = source->description;
  }
  if (evaluator->is_proxy()) {
    Note(progress, "quality evaluator: {} ({}) -- NOT task quality", evaluator->name(),
         quality_kind);
  }
  std::vector<TableEntry> entries;
  auto outcome = SearchFeasible(a, std::move(candidates), *evaluator, db->get(), sample_set,
                                progress, &entries);
  if (!outcome.ok()) return outcome.status();
  const SearchTrace& trace = outcome->trace;
  auto table = BuildParetoTable(entries, a.workload, a.quality_min);
  if (!table.ok()) return table.status();
  const std::string provenance = fmt::format(
      "kvserve profile: {} search, quality >= {}, budget {}, seed {}; {} evaluations; source: {}. "
      "Quality: {}. Codec throughputs: CPU, 1 thread.",
      a.searcher, a.quality_min, a.budget, a.seed, trace.observations.size(), source_text,
      quality_kind);
  return ProfileRunResult{*table, LabelledTableJson(*table, quality_kind, provenance)};
}

// --report: ablation over seeds, per-workload and unified tables, and the
// comparison with kivi-2 and cachegen (the analog of the paper's Table 1).
Result<ProfilingReport> RunProfilingReport(const ProfileRunOptions& a, const Progress& progress) {
  ProfilingReport report;
  std::vector<GroundTruth> truths;
  for (const std::string& path : a.ground_truth) {
    auto t = GroundTruth::Load(path);
    if (!t.ok()) return t.status();
    truths.push_back(std::move(*t));
  }
  if (truths.empty()) {
    return Status::InvalidArgument("--report needs --ground-truth files");
  }
  const double start = NowSeconds();
  // Task ground truths (the real evaluator on eval workloads) get the
  // ground-truth and ablation sections only: their profile tables and
  // Table-1 analog come from held-out searches (RunTaskProfile).
  const bool task = truths.front().quality_kind.rfind("task:", 0) == 0;
  for (const GroundTruth& t : truths) {
    if ((t.quality_kind.rfind("task:", 0) == 0) != task)
      return Status::InvalidArgument("--report: mixes task and proxy ground truths");
  }
  std::string md;
  if (task) {
    md += fmt::format(
        "Generated by `kvserve profile --report` from task ground truths, quality floor {}, "
        "budget {}, seeds 1..{}. Quality is **{}** (the real evaluator); CR and codec speed are "
        "measured on each workload's real prefilled KV (sources below).\n\n",
        a.quality_min, a.budget, a.seeds, truths.front().quality_kind);
  } else {
    md += fmt::format(
        "Generated by `scripts/profiling_report.sh` (`kvserve profile --report`), quality floor "
        "{}, budget {}, seeds 1..{}. Quality is **{}** on synthetic KV caches (not task "
        "accuracy); CR and codec speed are measured by encoding those caches.\n\n",
        a.quality_min, a.budget, a.seeds, truths.front().quality_kind);
  }
  md +=
      "### Ground truth\n\n| workload | configurations | feasible | optimum (max CR feasible) | CR "
      "|\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const GroundTruth& t : truths) {
    int feasible = 0;
    for (const auto& r : t.rows) feasible += r.quality >= a.quality_min;
    const int best = t.BestFeasible(a.quality_min);
    md += fmt::format("| {} | {} | {} | `{}` | {:.3f} |\n", t.workload, t.rows.size(), feasible,
                      best >= 0 ? t.rows[best].spec : "-",
                      best >= 0 ? t.rows[best].codec.compression_ratio : 0.0);
  }
  Note(progress, "ablation: {} workloads x {} seeds", truths.size(), a.seeds);
  const auto variants = StandardAblationVariants();
  auto cells = RunAblation(truths, variants, a.quality_min, a.budget, a.seeds);
  if (!cells.ok()) return cells.status();
  md += "\n### Ablation (paper Fig. 16 left)\n\n" + AblationMarkdown(*cells, a.budget);
  Note(progress, "ablation done ({:.0f} s)", NowSeconds() - start);
  if (task) {
    md += "\nGround truth sources:\n\n";
    for (const GroundTruth& t : truths) md += fmt::format("* {}: {}\n", t.workload, t.source);
    report.markdown = std::move(md);
    return report;
  }

  // Per-workload (aware) and unified tables from the full engine, seed 1.
  std::vector<std::vector<TableEntry>> all_entries;
  std::map<std::string, std::string> chosen;  // workload -> max-CR feasible spec
  std::vector<std::string> workloads;
  ProfileRunOptions search_args = a;
  search_args.seed = 1;
  for (const GroundTruth& t : truths) {
    auto c = t.Candidates();
    if (!c.ok()) return c.status();
    auto e = t.MakeEvaluator();
    auto s = RunSearch(search_args, std::move(*c), *e, nullptr, t.workload, "", nullptr);
    if (!s.ok()) return s.status();
    auto entries = ObservedEntries(*s, t.workload);
    auto table = BuildParetoTable(entries, t.workload, a.quality_min);
    if (!table.ok()) return table.status();
    chosen[t.workload] = s->candidates[s->trace.best_feasible].profile.ToString();
    const std::string provenance = fmt::format(
        "kvserve profile --report: full engine, seed 1, quality >= {}, budget {}, {} evaluations "
        "on recorded ground truth ({}). Quality: {}.",
        a.quality_min, a.budget, s->trace.observations.size(), t.source, t.quality_kind);
    report.tables.emplace_back(t.workload, LabelledTableJson(*table, t.quality_kind, provenance));
    workloads.push_back(t.workload);
  }
  // Unified: search the mixed workload (mean quality over the truths).
  {
    auto c = truths.front().Candidates();
    if (!c.ok()) return c.status();
    std::vector<std::unique_ptr<Evaluator>> owned_parts;
    std::vector<Evaluator*> parts;
    for (const GroundTruth& t : truths) {
      owned_parts.push_back(t.MakeEvaluator());
      parts.push_back(owned_parts.back().get());
    }
    for (size_t i = 0; i < c->size(); ++i) {
      CodecMetrics m{};
      for (const GroundTruth& t : truths) {
        m.compression_ratio += t.rows[i].codec.compression_ratio / truths.size();
        m.encode_bytes_per_second += t.rows[i].codec.encode_bytes_per_second / truths.size();
        m.decode_bytes_per_second += t.rows[i].codec.decode_bytes_per_second / truths.size();
      }
      (*c)[i].codec = m;
    }
    MixedEvaluator mixed(std::move(parts));
    auto s = RunSearch(search_args, std::move(*c), mixed, nullptr, "unified", "", nullptr);
    if (!s.ok()) return s.status();
    std::vector<TableEntry> entries;
    for (const SearchObservation& o : s->trace.observations) {
      TableEntry e;
      e.profile = s->candidates[o.candidate].profile;
      e.codec = s->candidates[o.candidate].codec;
      e.quality["unified"] = o.quality.quality;
      for (const GroundTruth& t : truths) e.quality[t.workload] = t.rows[o.candidate].quality;
      entries.push_back(std::move(e));
    }
    auto table = BuildParetoTable(entries, "unified", a.quality_min);
    if (!table.ok()) return table.status();
    chosen["unified"] = s->candidates[s->trace.best_feasible].profile.ToString();
    const std::string provenance = fmt::format(
        "kvserve profile --report: full engine on the equal mix of {} (mean quality), seed 1, "
        "quality >= {}, budget {}, {} evaluations. Quality: {}.",
        fmt::join(workloads, ", "), a.quality_min, a.budget, s->trace.observations.size(),
        truths.front().quality_kind);
    report.tables.emplace_back("unified",
                               LabelledTableJson(*table, truths.front().quality_kind, provenance));
  }

  // Table 1 analog.
  md += "\n### Max-CR profile at quality >= " + fmt::format("{}", a.quality_min) +
        " vs baselines (analog of paper Table 1; proxy quality)\n\n"
        "| workload | profile | which | quality | CR | CR / kivi-2 CR |\n"
        "| --- | --- | --- | --- | --- | --- |\n";
  auto row_of = [](const GroundTruth& t, const std::string& spec) -> const GroundTruthRow* {
    for (const auto& r : t.rows) {
      if (r.spec == spec) return &r;
    }
    return nullptr;
  };
  auto canonical = [](const char* preset) { return Profile::Parse(preset)->ToString(); };
  for (const GroundTruth& t : truths) {
    const GroundTruthRow* kivi = row_of(t, canonical("kivi-2"));
    const double kivi_cr = kivi ? kivi->codec.compression_ratio : 0.0;
    auto add = [&](const std::string& label, const std::string& spec) {
      const GroundTruthRow* r = row_of(t, spec);
      if (r == nullptr) return;
      md += fmt::format("| {} | `{}` | {} | {:.4f} | {:.2f} | {:.2f} |\n", t.workload, spec, label,
                        r->quality, r->codec.compression_ratio,
                        kivi_cr > 0 ? r->codec.compression_ratio / kivi_cr : 0.0);
    };
    add("kvserve-aware (engine, seed 1)", chosen[t.workload]);
    add("kvserve-unified", chosen["unified"]);
    add("kivi-2", canonical("kivi-2"));
    add("cachegen", canonical("cachegen"));
  }
  // Unseen workload: measured directly with the proxy evaluator.
  if (!a.unseen.empty()) {
    auto options = SynthWorkloadOptions(a.unseen);
    if (!options.ok()) return options.status();
    auto kv = SynthesizeKv(*options);
    if (!kv.ok()) return kv.status();
    const HeadScores scores = SynthesizeHeadScores(kv->shape().layers, kv->shape().kv_heads, 1);
    auto kivi = MeasureOnKv(*Profile::Parse("kivi-2"), kv->view(), &scores);
    if (!kivi.ok()) return kivi.status();
    auto add = [&](const std::string& label, const std::string& spec) -> Status {
      auto m = MeasureOnKv(*Profile::Parse(spec), kv->view(), &scores);
      if (!m.ok()) return m.status();
      md += fmt::format("| {} (unseen) | `{}` | {} | {:.4f} | {:.2f} | {:.2f} |\n", a.unseen, spec,
                        label, m->proxy_quality, m->codec.compression_ratio,
                        m->codec.compression_ratio / kivi->codec.compression_ratio);
      return Status::Ok();
    };
    for (const auto& [label, spec] : std::vector<std::pair<std::string, std::string>>{
             {"kvserve-unified", chosen["unified"]},
             {"kvserve-aware (" + workloads.front() + " profile)", chosen[workloads.front()]},
             {"kivi-2", canonical("kivi-2")},
             {"cachegen", canonical("cachegen")}}) {
      if (Status s = add(label, spec); !s.ok()) return s;
    }
  }
  md += fmt::format("\nProfile tables: `{}/<workload>.json` and `{}/unified.json`.\n",
                    a.tables_dir.empty() ? "." : a.tables_dir,
                    a.tables_dir.empty() ? "." : a.tables_dir);
  Note(progress, "report done ({:.0f} s)", NowSeconds() - start);
  report.markdown = std::move(md);
  return report;
}

Result<GroundTruth> GenerateGroundTruthRun(const ProfileRunOptions& a, const Progress& progress) {
  if (a.kv.empty() && IsModelDir(a.model)) return TaskGroundTruth(a, progress);
  return ProxyGroundTruth(a, progress);
}

}  // namespace kvserve::lab
