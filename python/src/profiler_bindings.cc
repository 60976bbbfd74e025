// Copyright kvserve authors. The offline profiler from Python: the strategy
// space, codec metrics, one Bayesian (or random / exhaustive) search whose
// quality black box is a Python callable, and the Pareto table of evaluated
// rows (kvserve.profile in python/kvserve/profiling.py is the public entry
// point; it runs several searches and the held-out walk over these).
//
// GIL: the search and the codec measurements run with the GIL released; the
// Python callables (evaluate, measure, progress) are called with it held. An
// exception raised by one of them is kept, the search is stopped by an error
// Status, and the exception is raised again (unchanged) in the caller once
// the search has returned. Every evaluation finished before it is in the
// results database.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "kvserve/profiler.h"
#include "tensor.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The first Python exception raised by a callback during a search. Written
// and read with the GIL held.
struct PendingError {
  std::optional<py::error_already_set> error;
  void Keep(py::error_already_set& e) {
    if (!error) error.emplace(std::move(e));
  }
  // Runs `fn` (a call into Python) with the GIL held; a Python exception it
  // raises is kept and becomes an error Status naming `what`.
  template <typename T, typename F>
  Result<T> Call(const std::string& what, F&& fn) {
    py::gil_scoped_acquire gil;
    if (error) return Status::Internal(what + " not called: an earlier Python callback raised");
    try {
      return fn();
    } catch (py::error_already_set& e) {
      Keep(e);
    } catch (const py::builtin_exception& e) {
      e.set_error();
      py::error_already_set kept;
      Keep(kept);
    }
    return Status::Internal(what + " raised a Python exception");
  }
  // Raises the kept exception (call with the GIL held).
  void RaiseIfAny() {
    if (!error) return;
    py::error_already_set e = std::move(*error);
    error.reset();
    throw e;
  }
};

// evaluate(profile) -> quality | (quality, ci_half_width, samples).
QualityEstimate ToEstimate(py::handle value, const Profile& profile) {
  QualityEstimate q;
  const std::string where = "evaluate(" + profile.ToString() + ")";
  if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(value);
    if (s.size() < 1 || s.size() > 3) {
      throw py::type_error(where + " returned a sequence of " + std::to_string(s.size()) +
                           " items; expected quality or (quality, ci_half_width, samples)");
    }
    q.quality = py::float_(s[0]).cast<double>();
    if (s.size() > 1) q.ci_half_width = py::float_(s[1]).cast<double>();
    if (s.size() > 2) q.samples = py::int_(s[2]).cast<int>();
  } else {
    if (PyBool_Check(value.ptr()) || !PyNumber_Check(value.ptr())) {
      throw py::type_error(where + " returned " + std::string(py::str(py::type::of(value).attr("__name__"))) +
                           "; expected a float or (quality, ci_half_width, samples)");
    }
    q.quality = py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
  }
  if (!std::isfinite(q.quality)) throw py::value_error(where + " returned a non-finite quality");
  if (!std::isfinite(q.ci_half_width) || q.ci_half_width < 0)
    throw py::value_error(where + " returned a ci_half_width that is negative or not finite");
  if (q.samples < 0) throw py::value_error(where + " returned a negative sample count");
  return q;
}

// The Evaluator adapter: the user's Python function as the black box.
class PyEvaluator final : public Evaluator {
 public:
  PyEvaluator(py::object fn, std::string name, PendingError* pending)
      : fn_(std::move(fn)), name_(std::move(name)), pending_(pending) {}
  std::string name() const override { return name_; }
  bool is_proxy() const override { return false; }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    return pending_->Call<QualityEstimate>("evaluate(" + profile.ToString() + ")", [&] {
      const double start = Seconds();
      QualityEstimate q = ToEstimate(fn_(profile), profile);
      called_.insert(profile.ToString());
      seconds_[profile.ToString()] = Seconds() - start;
      return q;
    });
  }
  const std::set<std::string>& called() const { return called_; }
  const std::map<std::string, double>& seconds() const { return seconds_; }

 private:
  py::object fn_;
  std::string name_;
  PendingError* pending_;
  std::set<std::string> called_;
  std::map<std::string, double> seconds_;
};

// measure(profile) -> (compression_ratio, encode_bytes_per_second,
// decode_bytes_per_second): codec metrics measured in Python (the CUDA codec
// on a CUDA tensor).
class PyCodecMeter final : public CodecMeter {
 public:
  PyCodecMeter(py::object fn, PendingError* pending) : fn_(std::move(fn)), pending_(pending) {}
  Result<CodecMetrics> Measure(const Profile& profile) override {
    return pending_->Call<CodecMetrics>("measure(" + profile.ToString() + ")", [&] {
      py::tuple t = py::tuple(fn_(profile));
      if (t.size() != 3) throw py::type_error("measure() must return (cr, encode B/s, decode B/s)");
      CodecMetrics m;
      m.compression_ratio = py::float_(t[0]).cast<double>();
      m.encode_bytes_per_second = py::float_(t[1]).cast<double>();
      m.decode_bytes_per_second = py::float_(t[2]).cast<double>();
      return m;
    });
  }

 private:
  py::object fn_;
  PendingError* pending_;
};

py::dict MetricsDict(const CodecMetrics& m) {
  py::dict d;
  d["compression_ratio"] = m.compression_ratio;
  d["encode_bytes_per_second"] = m.encode_bytes_per_second;
  d["decode_bytes_per_second"] = m.decode_bytes_per_second;
  return d;
}

// Passes every evaluation through to `inner` and keeps, per spec, the
// estimate `inner` returned: in front of the database cache and behind a
// lower-end wrapper it holds the full estimates (point and interval) of the
// figures the search compared. Used from the search thread only; `inner`
// must outlive it.
class RecordingEvaluator final : public Evaluator {
 public:
  explicit RecordingEvaluator(Evaluator* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  bool is_proxy() const override { return inner_->is_proxy(); }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    Result<QualityEstimate> q = inner_->Evaluate(profile);
    if (q.ok()) estimates_[profile.ToString()] = *q;
    return q;
  }
  // The estimate recorded for `spec`; nullptr when it was never evaluated.
  const QualityEstimate* Find(const std::string& spec) const {
    auto it = estimates_.find(spec);
    return it == estimates_.end() ? nullptr : &it->second;
  }

 private:
  Evaluator* inner_;
  std::map<std::string, QualityEstimate> estimates_;
};

// The KV the codec metrics are measured on, owned for the whole search: the
// caller's tensor when it is one strided view, otherwise a contiguous copy.
struct HostKv {
  KvLayout layout;
  std::optional<KvCache> copy;
  KvView view() const { return copy ? copy->view() : layout.whole->AsConst(); }
};

std::unique_ptr<HostKv> ImportHostKv(py::handle kv, py::handle dtype) {
  auto out = std::make_unique<HostKv>();
  out->layout = ImportKv(kv, /*writable=*/false, DTypeFromPython(dtype), "kv");
  if (out->layout.whole) return out;
  const KvLayout& l = out->layout;
  out->copy.emplace(l.dtype, l.shape);
  const size_t elem = DTypeSize(l.dtype);
  const MutableKvView dst = out->copy->mutable_view();
  std::vector<std::byte> layer(static_cast<size_t>(2) * l.shape.kv_heads * l.shape.tokens * l.shape.head_dim * elem);
  for (int i = 0; i < l.shape.layers; ++i) {
    const auto [k, v] = l.layer_pairs[i];
    GatherLayer(l.refs[k], l.refs[v], l.shape, elem, layer.data());
    std::memcpy(dst.At(i, 0, 0, 0, 0), layer.data(), layer.size());  // layer i of a contiguous cache
  }
  return out;
}

struct SearchArgs {
  std::string db, model, workload, sample_set, codec_set, evaluator_name, searcher;
  double quality_min = 0.97;
  int budget = 80, repeats = 1;
  uint64_t seed = 1;
  // The search checks the floor against the lower end of each evaluation's
  // 95% interval (the database keeps the full estimates).
  bool lower_ends = false;
};

std::unique_ptr<Searcher> MakeSearcher(const std::string& name) {
  if (name == "bayes") return MakeBayesSearcher();
  if (name == "random") return MakeRandomSearcher();
  if (name == "exhaustive") return MakeExhaustiveSearcher();
  ThrowInvalid("searcher: '" + name + "' is not 'bayes', 'random' or 'exhaustive'");
}

// One profiling search (see kvserve.profile). Returns a dict: "rows" (one
// per evaluation, in order), "best" (row index or -1), "stop_reason",
// "reused", "codec_measured", "codec_from_db", "table_json" (None when
// nothing is feasible) and "evaluator". Each row carries the evaluation's
// full estimate ("quality", "ci_half_width", "samples": what the database
// holds), "search_quality" (the figure the search checked against the floor:
// the lower end of the interval with a.lower_ends, else the point estimate),
// "feasible" (search_quality >= the floor) and "codec" (with
// "overhead_seconds"). The table is the Pareto set of the search figures.
py::dict ProfileSearch(const StrategySpace& space, py::object evaluate, py::object kv, py::object dtype,
                       py::object measure, std::shared_ptr<HeadScores> head_scores, const SearchArgs& a,
                       py::object progress, py::object note) {
  if (space.size() == 0) ThrowInvalid("space: no profiles to search");
  if (a.budget < 1) ThrowInvalid("budget: must be >= 1 evaluation (got " + std::to_string(a.budget) + ")");
  if (!std::isfinite(a.quality_min)) ThrowInvalid("quality_min: must be finite");
  if (a.repeats < 1) ThrowInvalid("repeats: must be >= 1");
  if (!PyCallable_Check(evaluate.ptr())) throw py::type_error("evaluate: expected a callable evaluate(profile)");
  std::unique_ptr<Searcher> searcher = MakeSearcher(a.searcher);
  PendingError pending;
  std::unique_ptr<HostKv> host_kv;
  std::unique_ptr<CodecMeter> meter;
  if (!measure.is_none()) {
    meter = std::make_unique<PyCodecMeter>(measure, &pending);
  } else {
    if (kv.is_none()) ThrowInvalid("kv: required (the KV cache CR and codec speed are measured on)");
    host_kv = ImportHostKv(kv, dtype);
    meter = MakeKvCodecMeter(host_kv->view(), head_scores.get(), a.repeats);
  }
  auto db = ValueOrThrow(ResultsDb::Open(a.db));
  PyEvaluator inner(evaluate, a.evaluator_name, &pending);
  int reused = 0, measured = 0, from_db = 0;
  auto cached = MakeCachingEvaluator(&inner, db.get(), {a.model, a.workload, "", a.sample_set, ""}, &reused);
  // The search's evaluator: the cache, recorded, then (lower ends) the lower
  // end of each estimate -- outside the cache, so the database keeps the
  // full estimates.
  RecordingEvaluator recorded(cached.get());
  std::unique_ptr<Evaluator> lower;
  Evaluator* search_evaluator = &recorded;
  if (a.lower_ends) {
    lower = MakeLowerEndEvaluator(&recorded);
    search_evaluator = lower.get();
  }

  MeasureCounts counts;
  Result<std::vector<Candidate>> measured_candidates = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    // Every 64 measurements: Ctrl-C, and a note on the way.
    measured_candidates = MeasureCandidates(
        space, *meter, *db, {a.model, a.workload, "", a.codec_set, ""}, 64,
        [&](int made, int stored, size_t done) {
          return pending
              .Call<bool>("codec metrics",
                          [&] {
                            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                            if (!note.is_none()) {
                              note("codec metrics: " + std::to_string(made) + " measured, " +
                                   std::to_string(stored) + " from the database, " +
                                   std::to_string(done) + " / " + std::to_string(space.size()));
                            }
                            return true;
                          })
              .status();
        },
        &counts);
  }
  measured = counts.measured;
  from_db = counts.from_db;
  pending.RaiseIfAny();
  ThrowIfError(measured_candidates.status());
  std::vector<Candidate> candidates = std::move(*measured_candidates);
  SearchProblem problem{candidates, a.quality_min, a.budget, a.seed};
  ProgressFn on_progress;
  if (!progress.is_none()) {
    on_progress = [&](const SearchProgress& p) {
      py::gil_scoped_acquire gil;
      if (pending.error) return;
      try {
        py::dict d;
        d["iteration"] = p.iteration;
        d["budget"] = a.budget;
        d["spec"] = candidates[p.candidate].profile.ToString();
        d["quality"] = p.quality;
        d["feasible"] = p.feasible;
        d["best_feasible_cr"] = p.best_feasible_cr;
        d["remaining"] = p.remaining;
        d["reused"] = reused;
        progress(d);
      } catch (py::error_already_set& e) {
        pending.Keep(e);
      }
    };
  }
  Result<SearchTrace> trace = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    trace = searcher->Search(problem, *search_evaluator, on_progress);
  }
  pending.RaiseIfAny();
  ThrowIfError(trace.status());

  py::list rows;
  std::vector<TableEntry> entries;
  for (const SearchObservation& o : trace->observations) {
    const Candidate& c = candidates[o.candidate];
    const std::string spec = c.profile.ToString();
    const QualityEstimate* full = recorded.Find(spec);
    if (full == nullptr) ThrowIfError(Status::Internal("no recorded estimate for " + spec));
    py::dict r;
    r["spec"] = spec;
    r["quality"] = full->quality;
    r["ci_half_width"] = full->ci_half_width;
    r["samples"] = full->samples;
    r["search_quality"] = o.quality.quality;
    r["feasible"] = o.feasible;
    py::dict codec = MetricsDict(c.codec);
    codec["overhead_seconds"] = c.codec.overhead_seconds;
    r["codec"] = codec;
    const bool fresh = inner.called().count(spec) > 0;
    r["from_db"] = !fresh;
    r["seconds"] = fresh ? py::object(py::float_(inner.seconds().at(spec))) : py::object(py::none());
    rows.append(r);
    TableEntry e;
    e.profile = c.profile;
    e.codec = c.codec;
    e.quality[a.workload] = o.quality.quality;
    entries.push_back(std::move(e));
  }
  int best_row = -1;
  for (size_t i = 0; i < trace->observations.size(); ++i)
    if (trace->observations[i].candidate == trace->best_feasible) best_row = static_cast<int>(i);
  py::dict out;
  out["rows"] = rows;
  out["best"] = best_row;
  out["stop_reason"] = trace->stop_reason;
  out["reused"] = reused;
  out["codec_measured"] = measured;
  out["codec_from_db"] = from_db;
  out["evaluator"] = a.evaluator_name;
  out["table_json"] = py::none();
  out["table_error"] = py::none();
  if (best_row >= 0) {
    auto table = BuildParetoTable(entries, a.workload, a.quality_min);
    if (table.ok()) {
      out["table_json"] = table->ToJson();
    } else {
      out["table_error"] = table.status().message();
    }
  }
  return out;
}

}  // namespace

void RegisterProfiler(py::module_& m) {
  py::class_<StrategySpace>(m, "StrategySpace", "A finite set of valid, distinct candidate profiles.")
      .def_static("load", [](const std::string& path) { return ValueOrThrow(StrategySpace::Load(path)); },
                  py::arg("path"))
      .def_static("from_json", [](const std::string& json) { return ValueOrThrow(StrategySpace::FromJson(json)); },
                  py::arg("json"))
      .def_static("from_profiles",
                  [](std::vector<Profile> profiles) { return ValueOrThrow(StrategySpace::FromProfiles(std::move(profiles))); },
                  py::arg("profiles"))
      .def_property_readonly("profiles", &StrategySpace::profiles)
      .def_property_readonly("rejected", &StrategySpace::rejected)
      .def("index_of", &StrategySpace::IndexOf, py::arg("profile"))
      .def("__len__", &StrategySpace::size)
      .def("__repr__", [](const StrategySpace& s) {
        return "<kvserve.StrategySpace of " + std::to_string(s.size()) + " profiles>";
      });

  m.def("measure_codec", [](const Profile& profile, py::object kv, py::object dtype,
                            std::shared_ptr<HeadScores> head_scores, int repeats) {
    if (repeats < 1) ThrowInvalid("repeats: must be >= 1");
    std::unique_ptr<HostKv> host = ImportHostKv(kv, dtype);
    Result<CodecMetrics> m = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      m = MakeKvCodecMeter(host->view(), head_scores.get(), repeats)->Measure(profile);
    }
    return MetricsDict(ValueOrThrow(std::move(m)));
  }, py::arg("profile"), py::arg("kv"), py::arg("dtype") = py::none(), py::arg("head_scores") = nullptr,
     py::arg("repeats") = 1);

  m.def("_profile_search",
        [](const StrategySpace& space, py::object evaluate, py::object kv, py::object dtype, py::object measure,
           std::shared_ptr<HeadScores> head_scores, std::string db, std::string model, std::string workload,
           std::string sample_set, std::string codec_set, std::string evaluator_name, double quality_min,
           int budget, uint64_t seed, std::string searcher, int repeats, py::object progress,
           py::object note, bool lower_ends) {
          SearchArgs a{std::move(db), std::move(model), std::move(workload), std::move(sample_set),
                       std::move(codec_set), std::move(evaluator_name), std::move(searcher)};
          a.quality_min = quality_min;
          a.budget = budget;
          a.seed = seed;
          a.repeats = repeats;
          a.lower_ends = lower_ends;
          return ProfileSearch(space, std::move(evaluate), std::move(kv), std::move(dtype), std::move(measure),
                               std::move(head_scores), a, std::move(progress), std::move(note));
        },
        py::arg("space"), py::arg("evaluate"), py::arg("kv"), py::arg("dtype"), py::arg("measure"),
        py::arg("head_scores"), py::arg("db"), py::arg("model"), py::arg("workload"), py::arg("sample_set"),
        py::arg("codec_set"), py::arg("evaluator"), py::arg("quality_min"), py::arg("budget"), py::arg("seed"),
        py::arg("searcher"), py::arg("repeats"), py::arg("progress"), py::arg("note") = py::none(),
        py::arg("lower_ends") = false);

  // BuildParetoTable over entries given as dicts ({"spec", "quality":
  // {workload: q}, "codec": {compression_ratio, encode_bytes_per_second,
  // decode_bytes_per_second[, overhead_seconds]}}, the shape of
  // _profile_search's rows): the table's JSON, or None when no entry with
  // CR > 1 reaches quality_min on `workload`. ValueError for an entry that
  // lacks a field, a spec that does not parse or a non-finite quality_min.
  m.def("_pareto_table", [](py::list entries, const std::string& workload, double quality_min) -> py::object {
    if (!std::isfinite(quality_min)) ThrowInvalid("quality_min: must be finite");
    std::vector<TableEntry> table_entries;
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string where = "entries[" + std::to_string(i) + "]";
      if (!py::isinstance<py::dict>(entries[i])) ThrowInvalid(where + ": expected a dict");
      py::dict d = entries[i].cast<py::dict>();
      for (const char* key : {"spec", "quality", "codec"})
        if (!d.contains(key)) ThrowInvalid(where + ": no \"" + std::string(key) + "\"");
      if (!py::isinstance<py::dict>(d["quality"]) || !py::isinstance<py::dict>(d["codec"]))
        ThrowInvalid(where + ": \"quality\" and \"codec\" must be dicts");
      TableEntry e;
      e.profile = ValueOrThrow(Profile::Parse(d["spec"].cast<std::string>()));
      e.quality = d["quality"].cast<std::map<std::string, double>>();
      py::dict codec = d["codec"].cast<py::dict>();
      for (const char* key : {"compression_ratio", "encode_bytes_per_second", "decode_bytes_per_second"})
        if (!codec.contains(key)) ThrowInvalid(where + ": codec has no \"" + std::string(key) + "\"");
      e.codec.compression_ratio = codec["compression_ratio"].cast<double>();
      e.codec.encode_bytes_per_second = codec["encode_bytes_per_second"].cast<double>();
      e.codec.decode_bytes_per_second = codec["decode_bytes_per_second"].cast<double>();
      if (codec.contains("overhead_seconds")) e.codec.overhead_seconds = codec["overhead_seconds"].cast<double>();
      table_entries.push_back(std::move(e));
    }
    Result<ProfileTable> table = BuildParetoTable(table_entries, workload, quality_min);
    if (!table.ok()) {
      if (table.status().code() == StatusCode::kInvalidArgument) return py::none();  // nothing feasible
      ThrowIfError(table.status());
    }
    return py::str(table->ToJson());
  }, py::arg("entries"), py::arg("workload"), py::arg("quality_min"));

  // The C++ quality evaluator's sample subset and relative quality, so that
  // Python task evaluators score the same samples the same way.
  m.def("choose_subset", &ChooseSubset, py::arg("total"), py::arg("n"), py::arg("seed"));
  m.def("relative_quality", [](std::vector<double> profile, std::vector<double> baseline, const std::string& metric,
                               int resamples, uint64_t seed) {
    if (profile.size() != baseline.size() || profile.empty())
      ThrowInvalid("relative_quality: profile and baseline need the same, non-zero number of scores");
    if (metric != "exact_match" && metric != "perplexity")
      ThrowInvalid("relative_quality: metric '" + metric + "' is not 'exact_match' or 'perplexity'");
    const bool ppl = metric == "perplexity";
    auto stat = [&](const std::vector<int>& idx) {
      double num = 0, den = 0;
      for (int i : idx) {
        if (ppl) {
          num += std::exp(baseline[i] - profile[i]);  // ppl_none / ppl_profile from per-sample nll
        } else {
          num += profile[i];
          den += baseline[i];
        }
      }
      if (ppl) return num / idx.size();
      if (den == 0) return num == 0 ? std::nan("") : INFINITY;
      return num / den;
    };
    std::vector<int> all(profile.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    const Interval ci = BootstrapInterval(static_cast<int>(all.size()), stat, resamples, seed);
    return py::make_tuple(stat(all), ci.low, ci.high);
  }, py::arg("profile"), py::arg("baseline"), py::arg("metric") = "exact_match", py::arg("resamples") = 1000,
     py::arg("seed") = 0);
  m.def("load_workload", [](const std::string& path) {
    py::list out;
    for (const EvalSample& s : ValueOrThrow(LoadWorkload(path))) {
      py::dict d;
      d["id"] = s.id;
      d["workload"] = s.workload;
      d["metric"] = s.metric == QualityMetric::kPerplexity ? "perplexity" : "exact_match";
      d["prompt_ids"] = s.prompt_ids;
      d["answer_ids"] = s.answer_ids;
      out.append(d);
    }
    return out;
  }, py::arg("path"));
}

}  // namespace kvserve::python
