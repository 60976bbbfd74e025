// Copyright kvserve authors. `kvserve pareto`: show a profile table's 3D
// Pareto frontier (quality up, CR up, codec seconds per byte down) per
// workload, and write the points scripts/plots.py draws (CR on x, quality
// on y, colour = codec time).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/lab.h"
#include "experiments/pareto_report.h"
#include "kvserve/controller.h"

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
  const std::vector<lab::WorkloadFront> fronts = lab::ParetoFronts(*table);
  fmt::print("{}", lab::ParetoText(*table, fronts));
  if (!a.plot_data.empty()) {
    const auto j = lab::ParetoPlotJson(*table, a.table, plot_workload, fronts[plot_workload].front);
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
