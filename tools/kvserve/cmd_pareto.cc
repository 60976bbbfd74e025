// Copyright kvserve authors. `kvserve pareto`: show a profile table's 3D
// Pareto frontier (quality up, CR up, codec seconds per byte down) per
// workload, and plot it as SVG (CR on x, quality on y, colour = codec time).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/controller.h"
#include "kvserve/profiler.h"

namespace kvserve::cli {
namespace {

struct ParetoArgs {
  std::string table;
  std::string plot;
  std::string workload;
};

std::string Svg(const ProfileTable& table, int w, const std::vector<int>& front) {
  const double width = 720, height = 480, left = 70, right = 20, top = 40, bottom = 60;
  double cr_min = 1e300, cr_max = 0, q_min = 1e300, q_max = -1e300, t_min = 1e300, t_max = 0;
  for (int p = 1; p < table.size(); ++p) {
    const double q = table.Quality(p, w);
    if (!std::isfinite(q)) continue;
    cr_min = std::min(cr_min, table.profile(p).compression_ratio);
    cr_max = std::max(cr_max, table.profile(p).compression_ratio);
    q_min = std::min(q_min, q);
    q_max = std::max(q_max, q);
    t_min = std::min(t_min, table.profile(p).CodecSecondsPerByte());
    t_max = std::max(t_max, table.profile(p).CodecSecondsPerByte());
  }
  if (cr_max <= cr_min) cr_max = cr_min + 1;
  if (q_max <= q_min) q_max = q_min + 1e-3;
  auto x = [&](double cr) { return left + (cr - cr_min) / (cr_max - cr_min) * (width - left - right); };
  auto y = [&](double q) { return height - bottom - (q - q_min) / (q_max - q_min) * (height - top - bottom); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"14\">Pareto profiles, workload {} (colour: codec s/byte, "
      "blue fast, red slow)</text>\n",
      width, height, left, table.workloads()[w]);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n",
                     left, height - bottom, width - right);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n",
                     left, top, height - bottom);
  for (int i = 0; i <= 4; ++i) {
    const double cr = cr_min + (cr_max - cr_min) * i / 4, q = q_min + (q_max - q_min) * i / 4;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.2f}</text>\n", x(cr),
                       height - bottom + 18, cr);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.4f}</text>\n", left - 6,
                       y(q) + 4, q);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">compression ratio</text>\n",
                     (left + width - right) / 2, height - 15);
  svg += fmt::format("<text x=\"15\" y=\"{}\" transform=\"rotate(-90 15 {})\" "
                     "text-anchor=\"middle\">quality (relative)</text>\n",
                     (top + height - bottom) / 2, (top + height - bottom) / 2);
  for (int p = 1; p < table.size(); ++p) {
    const double q = table.Quality(p, w);
    if (!std::isfinite(q)) continue;
    const double t = table.profile(p).CodecSecondsPerByte();
    const double f = t_max > t_min ? std::log(t / t_min) / std::log(t_max / t_min) : 0.0;
    const bool on_front = std::find(front.begin(), front.end(), p) != front.end();
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"rgb({},{},{})\" stroke=\"black\" "
        "stroke-width=\"{}\"><title>{} CR {:.2f} q {:.4f}</title></circle>\n",
        x(table.profile(p).compression_ratio), y(q), on_front ? 6 : 4, int(255 * f), 60,
        int(255 * (1 - f)), on_front ? 1.5 : 0.3, table.profile(p).spec,
        table.profile(p).compression_ratio, q);
  }
  svg += "</svg>\n";
  return svg;
}

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
  if (!a.plot.empty()) {
    const std::string svg = Svg(*table, plot_workload, plot_front);
    if (Status s = WriteBinaryFile(a.plot, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()});
        !s.ok()) {
      return ReportError("pareto", s);
    }
    fmt::print("wrote {}\n", a.plot);
  }
  return 0;
}

RunFn SetupPareto(CLI::App& sub) {
  auto a = std::make_shared<ParetoArgs>();
  sub.description(
      "Print the 3D Pareto frontier (quality, CR, codec seconds per byte 1/s_p) of a profile "
      "table per workload, and optionally plot it as SVG.");
  sub.add_option("table", a->table, "profile table JSON (docs/controller.md)")->required();
  sub.add_option("--plot", a->plot, "SVG file to write");
  sub.add_option("--workload", a->workload, "workload to plot (default: the first)");
  return [a] { return RunPareto(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(pareto, "Show and plot the Pareto frontier of a profile table",
                kvserve::cli::SetupPareto);
