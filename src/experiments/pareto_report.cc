// Copyright kvserve authors. experiments/pareto_report.h.
#include "experiments/pareto_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kvserve/profiler.h"

namespace kvserve::lab {

std::vector<WorkloadFront> ParetoFronts(const ProfileTable& table) {
  std::vector<WorkloadFront> out;
  for (int w = 0; w < static_cast<int>(table.workloads().size()); ++w) {
    WorkloadFront f;
    std::vector<ParetoPoint> points;
    for (int p = 1; p < table.size(); ++p) {
      const double q = table.Quality(p, w);
      if (!std::isfinite(q)) continue;
      f.rows.push_back(p);
      points.push_back(
          {q, table.profile(p).compression_ratio, table.profile(p).CodecSecondsPerByte()});
    }
    for (int i : NonDominated(points)) f.front.push_back(f.rows[i]);
    out.push_back(std::move(f));
  }
  return out;
}

std::string ParetoText(const ProfileTable& table, const std::vector<WorkloadFront>& fronts) {
  std::string out;
  for (int w = 0; w < static_cast<int>(fronts.size()); ++w) {
    out += fmt::format(
        "workload {}: {} profiles, {} on the Pareto front (quality up, CR up, codec s/B down)\n",
        table.workloads()[w], fronts[w].rows.size(), fronts[w].front.size());
    out += fmt::format("  {:>8} {:>6} {:>9} {:>9} {:>10}  {}\n", "quality", "CR", "enc GB/s",
                       "dec GB/s", "codec ns/B", "spec");
    for (int p : fronts[w].front) {
      const ProfileCost& c = table.profile(p);
      out += fmt::format("  {:>8.4f} {:>6.2f} {:>9.3f} {:>9.3f} {:>10.3f}  {}\n",
                         table.Quality(p, w), c.compression_ratio, c.encode_bytes_per_second / 1e9,
                         c.decode_bytes_per_second / 1e9, c.CodecSecondsPerByte() * 1e9, c.spec);
    }
  }
  return out;
}

nlohmann::ordered_json ParetoPlotJson(const ProfileTable& table, const std::string& table_path,
                                      int workload, const std::vector<int>& front) {
  nlohmann::ordered_json j{{"format", "kvserve-pareto-plot"},
                           {"version", 1},
                           {"table", table_path},
                           {"workload", table.workloads()[workload]}};
  j["points"] = nlohmann::json::array();
  for (int p = 1; p < table.size(); ++p) {
    const double q = table.Quality(p, workload);
    if (!std::isfinite(q)) continue;
    const ProfileCost& c = table.profile(p);
    j["points"].push_back({{"spec", c.spec},
                           {"quality", q},
                           {"compression_ratio", c.compression_ratio},
                           {"codec_ns_per_byte", c.CodecSecondsPerByte() * 1e9},
                           {"on_front", std::find(front.begin(), front.end(), p) != front.end()}});
  }
  return j;
}

}  // namespace kvserve::lab
