// Copyright kvserve authors. `kvserve eval`: compression ratio, error and
// speed of profiles on a KV file.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "command.h"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"

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

// Error accumulator over a set of elements.
struct ErrorStats {
  double max_abs = 0;
  double sum_sq_err = 0;
  double sum_sq_signal = 0;
  uint64_t count = 0;

  void Add(const ErrorStats& o) {
    max_abs = std::max(max_abs, o.max_abs);
    sum_sq_err += o.sum_sq_err;
    sum_sq_signal += o.sum_sq_signal;
    count += o.count;
  }
  double Rmse() const { return count ? std::sqrt(sum_sq_err / count) : 0.0; }
  // Signal-to-noise ratio in dB; +inf when reconstruction is exact.
  double SnrDb() const {
    if (sum_sq_err == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(sum_sq_signal / sum_sq_err);
  }
  nlohmann::json Json() const {
    nlohmann::json j{{"max_abs", max_abs}, {"rmse", Rmse()}, {"elements", count}};
    const double snr = SnrDb();
    j["snr_db"] = std::isfinite(snr) ? nlohmann::json(snr) : nlohmann::json("inf");
    return j;
  }
};

std::string FormatSnr(double snr) { return std::isfinite(snr) ? fmt::format("{:.2f}", snr) : "inf"; }

// Errors per (layer, kind), skipping token rows the keep mask marks pruned.
std::vector<ErrorStats> CompareCaches(const KvView& ref, const KvView& got,
                                      const std::vector<uint8_t>& keep_mask, uint64_t* kept_rows) {
  const KvShape& s = ref.shape;
  std::vector<ErrorStats> out(static_cast<size_t>(s.layers) * 2);
  *kept_rows = 0;
  size_t row = 0;
  for (int l = 0; l < s.layers; ++l) {
    for (int k = 0; k < 2; ++k) {
      ErrorStats& e = out[static_cast<size_t>(l) * 2 + k];
      for (int h = 0; h < s.kv_heads; ++h) {
        for (int t = 0; t < s.tokens; ++t, ++row) {
          if (!keep_mask.empty() && keep_mask[row] == 0) continue;
          ++*kept_rows;
          for (int d = 0; d < s.head_dim; ++d) {
            const double x = LoadAsFloat(ref.At(l, k, h, t, d), ref.dtype);
            const double y = LoadAsFloat(got.At(l, k, h, t, d), got.dtype);
            const double err = y - x;
            e.max_abs = std::max(e.max_abs, std::fabs(err));
            e.sum_sq_err += err * err;
            e.sum_sq_signal += x * x;
          }
          e.count += s.head_dim;
        }
      }
    }
  }
  return out;
}

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
  struct Row {
    std::string name;
    double cr, enc, dec, sp, kept;
    ErrorStats key, value;
    bool exact;
  };
  std::vector<Row> rows;
  for (const std::string& spec : SplitProfileList(a.profiles)) {
    auto profile = ResolveProfile(spec);
    if (!profile.ok()) return ReportError("eval", profile.status());
    auto scores = LoadHeadScoresFor(*profile, a.head_scores, view.shape);
    if (!scores.ok()) return ReportError("eval", scores.status());
    auto run = MeasureProfileCost(
        *profile, view,
        {.threads = threads,
         .repeats = a.repeat,
         .head_scores = scores->get(),
         .keep_output = true,
         .progress = [&](const std::string& phase) { Progress("eval", "{}: {}", spec, phase); }});
    if (!run.ok()) return ReportError("eval", run.status().WithContext(spec));
    Progress("eval", "{}: comparing", spec);
    uint64_t kept_rows = 0;
    const std::vector<ErrorStats> errors =
        CompareCaches(view, run->decoded.view(), run->keep_mask, &kept_rows);
    const bool exact = std::memcmp(cache->bytes(), run->decoded.bytes(), cache->size_bytes()) == 0;
    if (profile->IsLossless() && !exact) {
      return ReportError("eval", Status::Internal("lossless profile " + profile->ToString() +
                                                  " did not reconstruct the input bit-exactly"));
    }
    Row r;
    r.name = spec;
    r.cr = run->codec.compression_ratio;
    r.enc = GBPerSecond(run->input_bytes, run->encode_seconds);
    r.dec = GBPerSecond(run->input_bytes, run->decode_seconds);
    r.sp = RoundTripRate(r.enc, r.dec);
    const uint64_t rows_total = static_cast<uint64_t>(view.shape.NumElements() / view.shape.head_dim);
    r.kept = static_cast<double>(kept_rows) / rows_total;
    r.exact = exact;
    for (int l = 0; l < view.shape.layers; ++l) {
      r.key.Add(errors[static_cast<size_t>(l) * 2]);
      r.value.Add(errors[static_cast<size_t>(l) * 2 + 1]);
    }
    nlohmann::json j{{"name", spec},
                     {"profile", profile->ToString()},
                     {"input_bytes", run->input_bytes},
                     {"frame_bytes", run->frame_bytes},
                     {"compression_ratio", r.cr},
                     {"encode_gbps", r.enc},
                     {"decode_gbps", r.dec},
                     {"round_trip_gbps", r.sp},
                     {"kept_fraction", r.kept},
                     {"bit_exact", exact},
                     {"key", r.key.Json()},
                     {"value", r.value.Json()}};
    for (int l = 0; l < view.shape.layers; ++l)
      j["layers"].push_back({{"layer", l},
                             {"key", errors[static_cast<size_t>(l) * 2].Json()},
                             {"value", errors[static_cast<size_t>(l) * 2 + 1].Json()}});
    results.push_back(j);

    if (!a.json && per_layer) {
      fmt::print("\n{} = {}: CR {:.2f}x, encode {:.2f} GB/s, decode {:.2f} GB/s{}\n", spec,
                 profile->ToString(), r.cr, r.enc, r.dec,
                 r.kept < 1.0 ? fmt::format(", {:.1f}% of token rows kept", 100 * r.kept) : "");
      fmt::print("{:>5} {:>3} {:>12} {:>12} {:>9}\n", "layer", "K/V", "max|err|", "RMSE", "SNR dB");
      for (int l = 0; l < view.shape.layers; ++l) {
        for (int k = 0; k < 2; ++k) {
          const ErrorStats& e = errors[static_cast<size_t>(l) * 2 + k];
          fmt::print("{:>5} {:>3} {:>12.5g} {:>12.5g} {:>9}\n", l, k == 0 ? "K" : "V", e.max_abs,
                     e.Rmse(), FormatSnr(e.SnrDb()));
        }
      }
    }
    rows.push_back(std::move(r));
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
  size_t w = 7;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  fmt::print("\n{} {} {}{}, threads {}, best of {}; GB/s of uncompressed KV\n", a.input,
             DTypeName(view.dtype), ShapeString(view.shape),
             meta.count("synthetic") && meta["synthetic"] == "true" ? " (synthetic)" : "", threads,
             a.repeat);
  fmt::print("{:<{}} {:>8} {:>7} {:>7} {:>7} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>6}\n",
             "profile", w, "CR", "enc", "dec", "s_p", "K max|e|", "K RMSE", "K SNR", "V max|e|",
             "V RMSE", "V SNR", "kept");
  for (const auto& r : rows) {
    fmt::print(
        "{:<{}} {:>7.2f}x {:>7.2f} {:>7.2f} {:>7.2f} {:>10.4g} {:>10.4g} {:>7} {:>10.4g} {:>10.4g} "
        "{:>7} {:>5.1f}%\n",
        r.name, w, r.cr, r.enc, r.dec, r.sp, r.key.max_abs, r.key.Rmse(), FormatSnr(r.key.SnrDb()),
        r.value.max_abs, r.value.Rmse(), FormatSnr(r.value.SnrDb()), 100 * r.kept);
  }
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
