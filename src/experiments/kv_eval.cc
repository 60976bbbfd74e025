// Copyright kvserve authors. experiments/kv_eval.h.
#include "experiments/kv_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kvserve/profiler.h"

namespace kvserve::lab {

void ErrorStats::Add(const ErrorStats& o) {
  max_abs = std::max(max_abs, o.max_abs);
  sum_sq_err += o.sum_sq_err;
  sum_sq_signal += o.sum_sq_signal;
  count += o.count;
}

double ErrorStats::Rmse() const { return count ? std::sqrt(sum_sq_err / count) : 0.0; }

double ErrorStats::SnrDb() const {
  if (sum_sq_err == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sum_sq_signal / sum_sq_err);
}

nlohmann::json ErrorStats::Json() const {
  nlohmann::json j{{"max_abs", max_abs}, {"rmse", Rmse()}, {"elements", count}};
  const double snr = SnrDb();
  j["snr_db"] = std::isfinite(snr) ? nlohmann::json(snr) : nlohmann::json("inf");
  return j;
}

std::string FormatSnr(double snr) {
  return std::isfinite(snr) ? fmt::format("{:.2f}", snr) : "inf";
}

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

nlohmann::json ProfileEvaluation::Json() const {
  nlohmann::json j{{"name", name},
                   {"profile", profile},
                   {"input_bytes", input_bytes},
                   {"frame_bytes", frame_bytes},
                   {"compression_ratio", compression_ratio},
                   {"encode_gbps", encode_gbps},
                   {"decode_gbps", decode_gbps},
                   {"round_trip_gbps", round_trip_gbps},
                   {"kept_fraction", kept_fraction},
                   {"bit_exact", bit_exact},
                   {"key", key.Json()},
                   {"value", value.Json()}};
  for (size_t l = 0; l < layers.size() / 2; ++l)
    j["layers"].push_back(
        {{"layer", l}, {"key", layers[l * 2].Json()}, {"value", layers[l * 2 + 1].Json()}});
  return j;
}

std::string ProfileEvaluation::LayerTable() const {
  std::string out = fmt::format(
      "\n{} = {}: CR {:.2f}x, encode {:.2f} GB/s, decode {:.2f} GB/s{}\n", name, profile,
      compression_ratio, encode_gbps, decode_gbps,
      kept_fraction < 1.0 ? fmt::format(", {:.1f}% of token rows kept", 100 * kept_fraction) : "");
  out += fmt::format("{:>5} {:>3} {:>12} {:>12} {:>9}\n", "layer", "K/V", "max|err|", "RMSE",
                     "SNR dB");
  for (size_t i = 0; i < layers.size(); ++i) {
    const ErrorStats& e = layers[i];
    out += fmt::format("{:>5} {:>3} {:>12.5g} {:>12.5g} {:>9}\n", i / 2, i % 2 == 0 ? "K" : "V",
                       e.max_abs, e.Rmse(), FormatSnr(e.SnrDb()));
  }
  return out;
}

std::string EvaluationTable(const std::vector<ProfileEvaluation>& rows) {
  size_t w = 7;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  std::string out =
      fmt::format("{:<{}} {:>8} {:>7} {:>7} {:>7} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>6}\n",
                  "profile", w, "CR", "enc", "dec", "s_p", "K max|e|", "K RMSE", "K SNR",
                  "V max|e|", "V RMSE", "V SNR", "kept");
  for (const auto& r : rows) {
    out += fmt::format(
        "{:<{}} {:>7.2f}x {:>7.2f} {:>7.2f} {:>7.2f} {:>10.4g} {:>10.4g} {:>7} {:>10.4g} {:>10.4g} "
        "{:>7} {:>5.1f}%\n",
        r.name, w, r.compression_ratio, r.encode_gbps, r.decode_gbps, r.round_trip_gbps,
        r.key.max_abs, r.key.Rmse(), FormatSnr(r.key.SnrDb()), r.value.max_abs, r.value.Rmse(),
        FormatSnr(r.value.SnrDb()), 100 * r.kept_fraction);
  }
  return out;
}

Result<ProfileEvaluation> EvaluateProfile(const std::string& name, const Profile& profile,
                                          const KvView& kv, const HeadScores* head_scores,
                                          int threads, int repeat, const Progress& progress) {
  auto run = MeasureProfileCost(
      profile, kv,
      {.threads = threads,
       .repeats = repeat,
       .head_scores = head_scores,
       .keep_output = true,
       .progress = [&](const std::string& phase) { Note(progress, "{}: {}", name, phase); }});
  if (!run.ok()) return run.status().WithContext(name);
  Note(progress, "{}: comparing", name);
  ProfileEvaluation r;
  uint64_t kept_rows = 0;
  r.layers = CompareCaches(kv, run->decoded.view(), run->keep_mask, &kept_rows);
  r.bit_exact = std::memcmp(kv.data, run->decoded.bytes(), run->decoded.size_bytes()) == 0;
  if (profile.IsLossless() && !r.bit_exact) {
    return Status::Internal("lossless profile " + profile.ToString() +
                            " did not reconstruct the input bit-exactly");
  }
  r.name = name;
  r.profile = profile.ToString();
  r.input_bytes = run->input_bytes;
  r.frame_bytes = run->frame_bytes;
  r.compression_ratio = run->codec.compression_ratio;
  r.encode_gbps = GBPerSecond(run->input_bytes, run->encode_seconds);
  r.decode_gbps = GBPerSecond(run->input_bytes, run->decode_seconds);
  r.round_trip_gbps = RoundTripRate(r.encode_gbps, r.decode_gbps);
  const uint64_t rows_total = static_cast<uint64_t>(kv.shape.NumElements() / kv.shape.head_dim);
  r.kept_fraction = static_cast<double>(kept_rows) / rows_total;
  for (int l = 0; l < kv.shape.layers; ++l) {
    r.key.Add(r.layers[static_cast<size_t>(l) * 2]);
    r.value.Add(r.layers[static_cast<size_t>(l) * 2 + 1]);
  }
  return r;
}

}  // namespace kvserve::lab
