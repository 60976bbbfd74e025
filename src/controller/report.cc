// Copyright kvserve authors. Rendering of simulation reports: a Markdown
// table and a hand-written SVG latency-over-time plot (paper Fig. 16 right).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// Centered-free trailing rolling mean over `window` samples.
std::vector<double> RollingMean(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size());
  double sum = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

std::string EscapeXml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string SimulationReport::ToMarkdown() const {
  const PolicyResult* oracle = Find("oracle");
  std::string out =
      "| policy | mean (ms) | p99 (ms) | regret vs oracle (ms) | vs oracle | SLO violations "
      "| slower than raw (> " + Format("%.0f", raw_tolerance * 100.0) +
      "%) | slower than raw (any) | worst vs raw | below floor |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const PolicyResult& p : policies) {
    const double rel = oracle && oracle->mean_seconds > 0.0
                           ? p.mean_seconds / oracle->mean_seconds - 1.0
                           : 0.0;
    out += "| " + p.name + " | " + Format("%.2f", p.mean_seconds * 1e3) + " | " +
           Format("%.2f", p.p99_seconds * 1e3) + " | " +
           Format("%.2f", p.regret_seconds * 1e3) + " | " + Format("%+.1f%%", rel * 100.0) +
           " | " + std::to_string(p.slo_violations) + " | " +
           std::to_string(p.slower_than_raw) + " | " + std::to_string(p.slower_than_raw_any) +
           " | " + Format("%+.1f%%", p.worst_vs_raw * 100.0) +
           " | " + std::to_string(p.floor_violations) +
           " |\n";
  }
  return out;
}

std::string SimulationReport::ToSvg() const {
  const double width = 960, height = 440, left = 70, right = 70, top = 30, bottom = 50;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const char* names[] = {"raw", "no-controller", "no-bandit", "full", "oracle"};
  const char* colors[] = {"#999999", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"};
  const size_t n = arrival_seconds.size();
  const size_t window = std::max<size_t>(1, n / 100);
  const double t_max = n ? arrival_seconds.back() : 1.0;
  std::vector<std::vector<double>> series;
  double y_max = 0.0;
  for (const char* name : names) {
    const PolicyResult* p = Find(name);
    series.push_back(p ? RollingMean(p->latency_seconds, window) : std::vector<double>());
    for (double v : series.back()) y_max = std::max(y_max, v * 1e3);
  }
  y_max = y_max > 0.0 ? y_max * 1.05 : 1.0;
  double bw_max = 0.0;
  for (double b : bandwidth) bw_max = std::max(bw_max, BytesPerSecondToGbps(b));
  bw_max = bw_max > 0.0 ? bw_max * 1.1 : 1.0;
  auto X = [&](double t) { return left + plot_w * t / std::max(t_max, 1e-9); };
  auto Y = [&](double ms) { return top + plot_h * (1.0 - ms / y_max); };
  auto YB = [&](double gbps) { return top + plot_h * (1.0 - gbps / bw_max); };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    Format("%.0f", width) + "\" height=\"" + Format("%.0f", height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Shade periods of codec slowdown.
  for (size_t i = 0; i < n;) {
    if (codec_slowdown.size() == n && codec_slowdown[i] != 1.0) {
      size_t j = i;
      while (j < n && codec_slowdown[j] == codec_slowdown[i]) ++j;
      const double x0 = X(arrival_seconds[i]);
      const double x1 = X(j < n ? arrival_seconds[j] : t_max);
      svg += "<rect x=\"" + Format("%.1f", x0) + "\" y=\"" + Format("%.1f", top) +
             "\" width=\"" + Format("%.1f", x1 - x0) + "\" height=\"" +
             Format("%.1f", plot_h) + "\" fill=\"#f3e8ff\"/>\n";
      svg += "<text x=\"" + Format("%.1f", x0 + 4) + "\" y=\"" + Format("%.1f", top + 14) +
             "\" fill=\"#7b4fa0\">codec " + Format("%.2g", codec_slowdown[i]) +
             "x slower</text>\n";
      i = j;
    } else {
      ++i;
    }
  }
  // Axes and ticks.
  svg += "<line x1=\"" + Format("%.1f", left) + "\" y1=\"" + Format("%.1f", top + plot_h) +
         "\" x2=\"" + Format("%.1f", left + plot_w) + "\" y2=\"" +
         Format("%.1f", top + plot_h) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + Format("%.1f", left) + "\" y1=\"" + Format("%.1f", top) +
         "\" x2=\"" + Format("%.1f", left) + "\" y2=\"" + Format("%.1f", top + plot_h) +
         "\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 5; ++k) {
    const double ms = y_max * k / 5.0, t = t_max * k / 5.0, gb = bw_max * k / 5.0;
    svg += "<text x=\"" + Format("%.1f", left - 6) + "\" y=\"" + Format("%.1f", Y(ms) + 4) +
           "\" text-anchor=\"end\">" + Format("%.0f", ms) + "</text>\n";
    svg += "<text x=\"" + Format("%.1f", X(t)) + "\" y=\"" +
           Format("%.1f", top + plot_h + 16) + "\" text-anchor=\"middle\">" +
           Format("%.0f", t) + "</text>\n";
    svg += "<text x=\"" + Format("%.1f", left + plot_w + 6) + "\" y=\"" +
           Format("%.1f", YB(gb) + 4) + "\" fill=\"#555\">" + Format("%.0f", gb) +
           "</text>\n";
  }
  svg += "<text x=\"" + Format("%.1f", left + plot_w / 2) + "\" y=\"" +
         Format("%.1f", height - 12) + "\" text-anchor=\"middle\">time (s)</text>\n";
  svg += "<text transform=\"translate(18," + Format("%.1f", top + plot_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">KV latency, rolling mean of " +
         std::to_string(window) + " requests (ms)</text>\n";
  svg += "<text transform=\"translate(" + Format("%.1f", width - 16) + "," +
         Format("%.1f", top + plot_h / 2) +
         ") rotate(90)\" text-anchor=\"middle\" fill=\"#555\">bandwidth (Gbps, dashed)</text>\n";
  // Bandwidth (dashed), then policies.
  std::string pts;
  for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 2000)) {
    pts += Format("%.1f", X(arrival_seconds[i])) + "," +
           Format("%.1f", YB(BytesPerSecondToGbps(bandwidth[i]))) + " ";
  }
  svg += "<polyline fill=\"none\" stroke=\"#555\" stroke-dasharray=\"4 3\" points=\"" + pts +
         "\"/>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    if (series[s].empty()) continue;
    pts.clear();
    for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 2000)) {
      pts += Format("%.1f", X(arrival_seconds[i])) + "," +
             Format("%.1f", Y(series[s][i] * 1e3)) + " ";
    }
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(colors[s]) +
           "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    svg += "<rect x=\"" + Format("%.1f", left + 10 + 130.0 * static_cast<double>(s)) +
           "\" y=\"" + Format("%.1f", top - 22) + "\" width=\"12\" height=\"12\" fill=\"" +
           colors[s] + "\"/>\n";
    svg += "<text x=\"" + Format("%.1f", left + 26 + 130.0 * static_cast<double>(s)) +
           "\" y=\"" + Format("%.1f", top - 12) + "\">" + EscapeXml(names[s]) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kvserve
