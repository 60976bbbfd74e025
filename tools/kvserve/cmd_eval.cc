// Copyright kvserve authors. `kvserve eval`: compression ratio, error and
// speed of profiles on a KV file.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "experiments/kv_eval.h"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"

namespace kvserve::cli {
namespace {

struct EvalArgs {
  std::string input;
  std::vector<std::string> profiles{"kivi-2"};
  std::string head_scores;
  int threads = 0;
  int repeat = 3;
  bool json = false;
  bool per_layer = false;
  bool summary = false;
};

int RunEval(const EvalArgs& a) {
  Progress("eval", "reading {}", a.input);
  KvFileMetadata meta;
  auto cache = LoadKvFile(a.input, &meta);
  if (!cache.ok()) return ReportError("eval", cache.status());
  const KvView view = cache->view();
  const int threads = ResolveThreads(a.threads);
  const bool per_layer =
      a.per_layer || (SplitProfileList(a.profiles).size() == 1 && !a.summary);

  nlohmann::json results = nlohmann::json::array();
  std::vector<lab::ProfileEvaluation> rows;
  for (const std::string& spec : SplitProfileList(a.profiles)) {
    auto profile = ResolveProfile(spec);
    if (!profile.ok()) return ReportError("eval", profile.status());
    auto scores = LoadHeadScoresFor(*profile, a.head_scores, view.shape);
    if (!scores.ok()) return ReportError("eval", scores.status());
    auto r = lab::EvaluateProfile(spec, *profile, view, scores->get(), threads, a.repeat,
                                  ProgressTo("eval"));
    if (!r.ok()) return ReportError("eval", r.status());
    results.push_back(r->Json());
    if (!a.json && per_layer) fmt::print("{}", r->LayerTable());
    rows.push_back(std::move(*r));
  }

  if (a.json) {
    nlohmann::json j{{"file", a.input},
                     {"synthetic", meta.count("synthetic") ? meta["synthetic"] : "unknown"},
                     {"dtype", DTypeName(view.dtype)},
                     {"shape", {{"layers", view.shape.layers},
                                {"kv_heads", view.shape.kv_heads},
                                {"tokens", view.shape.tokens},
                                {"head_dim", view.shape.head_dim}}},
                     {"threads", threads},
                     {"repeat", a.repeat},
                     {"results", results}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  fmt::print("\n{} {} {}{}, threads {}, best of {}; GB/s of uncompressed KV\n", a.input,
             DTypeName(view.dtype), ShapeString(view.shape),
             meta.count("synthetic") && meta["synthetic"] == "true" ? " (synthetic)" : "", threads,
             a.repeat);
  fmt::print("{}", lab::EvaluationTable(rows));
  return 0;
}

RunFn SetupEval(CLI::App& sub) {
  auto a = std::make_shared<EvalArgs>();
  sub.description(
      "Compress and decompress a KV file with one or more profiles and report the compression "
      "ratio (every frame byte counted), encode / decode throughput (GB/s of uncompressed KV, "
      "best of --repeat) and the reconstruction error per layer and K/V: max |error|, RMSE, "
      "SNR in dB (10 log10 of signal energy over error energy). Token rows pruned by a duo "
      "profile are excluded from the errors and reported as 'kept'. A lossless profile that "
      "does not reproduce its input bit-exactly is an error.");
  sub.add_option("input", a->input, "KV file to read")->required();
  sub.add_option("-p,--profile", a->profiles,
                 "profile spec or preset; repeat or comma-separate for several")
      ->capture_default_str();
  sub.add_option("--head-scores", a->head_scores,
                 "per-head retrieval scores (JSON), required by mixhq and duo profiles");
  sub.add_option("-t,--threads", a->threads, "worker threads (0 = all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub.add_option("-r,--repeat", a->repeat, "timed runs per direction; the best counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub.add_flag("--per-layer", a->per_layer,
               "print the per-layer table for every profile (default with one profile)");
  sub.add_flag("--summary", a->summary, "print only the summary table");
  sub.add_flag("--json", a->json, "print JSON (per-layer errors included)");
  sub.footer("Example: kvserve eval kv.safetensors -p kivi-2,kivi-4,cachegen --summary");
  return [a] { return RunEval(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(eval, "Measure compression ratio, error and speed of profiles", kvserve::cli::SetupEval);
