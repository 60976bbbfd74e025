// Copyright kvserve authors. experiments/policy_report.h.
#include "experiments/policy_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvserve::lab {
namespace {

std::string Gbps(double bytes_per_second) {
  if (std::isinf(bytes_per_second)) return "inf";
  return fmt::format("{:.3g}", BytesPerSecondToGbps(bytes_per_second));
}

}  // namespace

std::string PolicyReportText(const ProfileTable& table, int w, const std::string& workload,
                             double quality_min, const LatencyModel& model,
                             const std::string& model_name, double kv_bytes,
                             const std::vector<PolicyInterval>& policy) {
  int eligible = 0;
  for (int p = 1; p < table.size(); ++p) eligible += table.Quality(p, w) >= quality_min;
  std::string out = fmt::format(
      "workload {}, quality floor {}: {} of {} profiles eligible; {} model{}; ", workload,
      quality_min, eligible, table.size() - 1, model_name,
      model.kind == LatencyModelKind::kStreamed ? fmt::format(" ({} layers)", model.layers) : "");
  out += std::isinf(kv_bytes) ? std::string("t0 ignored (pass --kv-mib to include it)\n\n")
                              : fmt::format("V = {} MiB, t0 included\n\n", kv_bytes / 1048576.0);
  size_t spec_w = 7;
  for (const PolicyInterval& iv : policy)
    spec_w = std::max(spec_w, table.profile(iv.profile).spec.size());
  out += fmt::format("{:<22}  {:<{}}  {:>6}  {:>9}  {:>11}  {:>8}\n", "bandwidth (Gbps)", "profile",
                     spec_w, "cr", "B* (Gbps)", "B*(V) (Gbps)", "quality");
  for (const PolicyInterval& iv : policy) {
    const ProfileCost& c = table.profile(iv.profile);
    const bool raw = iv.profile == ProfileTable::kRaw;
    out += fmt::format("{:<22}  {:<{}}  {:>6.2f}  {:>9}  {:>11}  {:>8.4f}\n",
                       fmt::format("[{}, {})", Gbps(iv.min_bandwidth), Gbps(iv.max_bandwidth)),
                       raw ? "none (raw)" : c.spec, spec_w, c.compression_ratio,
                       raw ? "-" : Gbps(BenefitThreshold(c)),
                       raw ? "-" : Gbps(BenefitThresholdForSize(model, c, kv_bytes)),
                       table.Quality(iv.profile, w));
  }
  return out;
}

}  // namespace kvserve::lab
