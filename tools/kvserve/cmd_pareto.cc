// Copyright kvserve authors. `kvserve pareto`: show a profile table's 3D
// Pareto frontier (quality up, CR up, codec seconds per byte down) per
// workload, and write the points scripts/plots.py draws (CR on x, quality
// on y, colour = codec time).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/profiler.h"

namespace kvserve::cli {
namespace {

struct ParetoArgs {
  std::string table;
  std::string plot_data;
  std::string workload;
};

int RunPareto(const ParetoArgs& a) {
  auto table = ProfileTable::Load(a.table);
  if (!table.ok()) return ReportError("pareto", table.status());
  if (table->workloads().empty()) {
    return ReportError("pareto", Status::InvalidArgument("table has no workloads"));
  }
  int plot_workload = 0;
  if (!a.workload.empty()) {
    auto w = table->WorkloadIndex(a.workload);
    if (!w.ok()) return ReportError("pareto", w.status());
    plot_workload = *w;
  }
  std::vector<int> plot_front;
  for (int w = 0; w < static_cast<int>(table->workloads().size()); ++w) {
    std::vector<int> rows;
    std::vector<ParetoPoint> points;
    for (int p = 1; p < table->size(); ++p) {
      const double q = table->Quality(p, w);
      if (!std::isfinite(q)) continue;
      rows.push_back(p);
      points.push_back({q, table->profile(p).compression_ratio,
                        table->profile(p).CodecSecondsPerByte()});
    }
    std::vector<int> front;
    for (int i : NonDominated(points)) front.push_back(rows[i]);
    if (w == plot_workload) plot_front = front;
    fmt::print("workload {}: {} profiles, {} on the Pareto front (quality up, CR up, codec s/B "
               "down)\n",
               table->workloads()[w], rows.size(), front.size());
    fmt::print("  {:>8} {:>6} {:>9} {:>9} {:>10}  {}\n", "quality", "CR", "enc GB/s", "dec GB/s",
               "codec ns/B", "spec");
    for (int p : front) {
      const ProfileCost& c = table->profile(p);
      fmt::print("  {:>8.4f} {:>6.2f} {:>9.3f} {:>9.3f} {:>10.3f}  {}\n", table->Quality(p, w),
                 c.compression_ratio, c.encode_bytes_per_second / 1e9,
                 c.decode_bytes_per_second / 1e9, c.CodecSecondsPerByte() * 1e9, c.spec);
    }
  }
  if (!a.plot_data.empty()) {
    nlohmann::ordered_json j{{"format", "kvserve-pareto-plot"},
                             {"version", 1},
                             {"table", a.table},
                             {"workload", table->workloads()[plot_workload]}};
    j["points"] = nlohmann::json::array();
    for (int p = 1; p < table->size(); ++p) {
      const double q = table->Quality(p, plot_workload);
      if (!std::isfinite(q)) continue;
      const ProfileCost& c = table->profile(p);
      j["points"].push_back(
          {{"spec", c.spec}, {"quality", q}, {"compression_ratio", c.compression_ratio},
           {"codec_ns_per_byte", c.CodecSecondsPerByte() * 1e9},
           {"on_front", std::find(plot_front.begin(), plot_front.end(), p) != plot_front.end()}});
    }
    if (Status s = lab::WriteTextFile(a.plot_data, j.dump(1) + "\n"); !s.ok())
      return ReportError("pareto", s);
    fmt::print("wrote {}\n", a.plot_data);
  }
  return 0;
}

RunFn SetupPareto(CLI::App& sub) {
  auto a = std::make_shared<ParetoArgs>();
  sub.description(
      "Print the 3D Pareto frontier (quality, CR, codec seconds per byte 1/s_p) of a profile "
      "table per workload, and optionally write one workload's points as JSON for the plot "
      "(scripts/plots.py pareto).");
  sub.add_option("table", a->table, "profile table JSON (docs/controller.md)")->required();
  sub.add_option("--plot-data", a->plot_data, "JSON file of the plotted workload's points to write");
  sub.add_option("--workload", a->workload, "workload to plot (default: the first)");
  AddMovedOption(sub, "--plot",
                 "the plot is drawn from JSON now: --plot-data P.json, then scripts/plots.py "
                 "pareto P.json OUT.svg");
  return [a] { return RunPareto(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(pareto, "Show the Pareto frontier of a profile table (and its plot data)",
                kvserve::cli::SetupPareto);
