// Copyright kvserve authors. Service-condition traces for the simulator.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> SplitCommas(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(Trim(line.substr(start, comma == std::string_view::npos
                                              ? std::string_view::npos
                                              : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool ParseDouble(std::string_view s, double* out) {
  const std::string text(s);
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(*out);
}

// Index of the point in effect at t.
size_t PointAt(const std::vector<TracePoint>& points, double t) {
  auto it = std::upper_bound(points.begin(), points.end(), t,
                             [](double v, const TracePoint& p) { return v < p.time_seconds; });
  return it == points.begin() ? 0 : static_cast<size_t>(it - points.begin()) - 1;
}

// Ensures a point starts exactly at t (splitting the one in effect).
void SplitAt(std::vector<TracePoint>& points, double t) {
  const size_t i = PointAt(points, t);
  if (points[i].time_seconds == t) return;
  TracePoint p = points[i];
  p.time_seconds = t;
  points.insert(points.begin() + static_cast<std::ptrdiff_t>(i) + 1, p);
}

}  // namespace

Result<Trace> Trace::FromCsv(std::string_view csv) {
  Trace trace;
  bool header = false;
  bool has_slowdown = false;
  int line_no = 0;
  std::istringstream in{std::string(csv)};
  std::string raw_line;
  while (std::getline(in, raw_line)) {
    ++line_no;
    const std::string_view line = Trim(raw_line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string_view> cols = SplitCommas(line);
    const std::string where = "trace line " + std::to_string(line_no) + ": ";
    if (!header) {
      if (cols.size() < 2 || cols[0] != "time_s" || cols[1] != "bandwidth_gbps" ||
          cols.size() > 3 || (cols.size() == 3 && cols[2] != "codec_slowdown")) {
        return Status::Corruption(where +
                                  "header must be time_s,bandwidth_gbps[,codec_slowdown]");
      }
      has_slowdown = cols.size() == 3;
      header = true;
      continue;
    }
    if (cols.size() != (has_slowdown ? 3u : 2u)) {
      return Status::Corruption(where + "wrong number of columns");
    }
    TracePoint p;
    double gbps = 0.0;
    if (!ParseDouble(cols[0], &p.time_seconds) || !ParseDouble(cols[1], &gbps) ||
        (has_slowdown && !ParseDouble(cols[2], &p.codec_slowdown))) {
      return Status::Corruption(where + "not a number");
    }
    if (!(gbps > 0.0) || !(p.codec_slowdown > 0.0) || p.time_seconds < 0.0) {
      return Status::Corruption(where + "bandwidth and slowdown must be > 0, time >= 0");
    }
    if (trace.points_.empty() ? p.time_seconds != 0.0
                              : !(p.time_seconds > trace.points_.back().time_seconds)) {
      return Status::Corruption(where + "times must start at 0 and increase");
    }
    p.bandwidth = GbpsToBytesPerSecond(gbps);
    trace.points_.push_back(p);
  }
  if (trace.points_.size() < 2) {
    return Status::Corruption("trace needs a header and at least two rows");
  }
  return trace;
}

Result<Trace> Trace::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  Result<Trace> t = FromCsv(text.str());
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

Trace Trace::Steps(const std::vector<double>& gbps, double period_seconds,
                   double duration_seconds) {
  Trace t;
  for (int k = 0; k * period_seconds < duration_seconds; ++k) {
    t.points_.push_back({k * period_seconds,
                         GbpsToBytesPerSecond(gbps[static_cast<size_t>(k) % gbps.size()]),
                         1.0});
  }
  TracePoint end = t.points_.back();
  end.time_seconds = duration_seconds;
  t.points_.push_back(end);
  return t;
}

Trace Trace::RandomWalk(double start_gbps, double min_gbps, double max_gbps,
                        double sigma_per_step, double step_seconds,
                        double duration_seconds, uint64_t seed) {
  Trace t;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma_per_step);
  double log_gbps = std::log(start_gbps);
  for (int k = 0; k * step_seconds <= duration_seconds; ++k) {
    const double time = std::min(k * step_seconds, duration_seconds);
    if (!t.points_.empty() && time <= t.points_.back().time_seconds) break;
    t.points_.push_back({time, GbpsToBytesPerSecond(std::exp(log_gbps)), 1.0});
    log_gbps = std::clamp(log_gbps + normal(rng), std::log(min_gbps), std::log(max_gbps));
  }
  if (t.points_.back().time_seconds < duration_seconds) {
    TracePoint end = t.points_.back();
    end.time_seconds = duration_seconds;
    t.points_.push_back(end);
  }
  return t;
}

Trace Trace::WithCodecSlowdown(double from_seconds, double slowdown) const {
  Trace t = *this;
  SplitAt(t.points_, from_seconds);
  for (TracePoint& p : t.points_) {
    if (p.time_seconds >= from_seconds) p.codec_slowdown = slowdown;
  }
  return t;
}

Trace Trace::WithBandwidthDrop(double from_seconds, double to_seconds,
                               double gbps) const {
  Trace t = *this;
  SplitAt(t.points_, from_seconds);
  SplitAt(t.points_, to_seconds);
  for (TracePoint& p : t.points_) {
    if (p.time_seconds >= from_seconds && p.time_seconds < to_seconds) {
      p.bandwidth = GbpsToBytesPerSecond(gbps);
    }
  }
  return t;
}

double Trace::BandwidthAt(double t) const { return points_[PointAt(points_, t)].bandwidth; }
double Trace::SlowdownAt(double t) const {
  return points_[PointAt(points_, t)].codec_slowdown;
}
double Trace::duration_seconds() const {
  return points_.empty() ? 0.0 : points_.back().time_seconds;
}

std::string Trace::ToCsv() const {
  std::string out = "time_s,bandwidth_gbps,codec_slowdown\n";
  char buf[96];
  for (const TracePoint& p : points_) {
    std::snprintf(buf, sizeof(buf), "%.10g,%.10g,%.10g\n", p.time_seconds,
                  BytesPerSecondToGbps(p.bandwidth), p.codec_slowdown);
    out += buf;
  }
  return out;
}

}  // namespace kvserve
