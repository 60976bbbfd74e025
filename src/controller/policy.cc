// Copyright kvserve authors. The piecewise policy (Theorem 6.2) as bandwidth
// intervals, for inspection and `kvserve policy`.
#include <algorithm>
#include <cmath>

#include "controller/envelope.h"
#include "kvserve/controller.h"

namespace kvserve {
namespace {

using controller_internal::EnvelopeLine;
using controller_internal::LowerEnvelope;

// Intervals over x = 1/B, ascending in x, as (x_start, profile).
using XPolicy = std::vector<std::pair<double, int>>;

XPolicy SerialPolicy(const ProfileTable& table, const std::vector<int>& members,
                     double u) {
  std::vector<EnvelopeLine> lines = {{0.0, 1.0, ProfileTable::kRaw}};
  for (int p : members) {
    const ProfileCost& c = table.profile(p);
    if (!(c.compression_ratio > 1.0)) continue;
    lines.push_back({c.overhead_seconds * u + c.CodecSecondsPerByte(),
                     1.0 / c.compression_ratio, p});
  }
  const LowerEnvelope env = LowerEnvelope::Build(std::move(lines));
  XPolicy out;
  for (size_t k = 0; k < env.segments().size(); ++k) {
    out.push_back({k == 0 ? 0.0 : env.breakpoints()[k - 1], env.segments()[k].id});
  }
  return out;
}

// Streamed time per byte is max(codec-bound line, network-bound line) per
// profile; the argmin can only change where two such pieces cross or at a
// kink, so evaluating between consecutive critical points is exact.
XPolicy StreamedPolicy(const ProfileTable& table, const LatencyModel& model,
                       const std::vector<int>& members, double u) {
  const double l = static_cast<double>(model.layers);
  struct Piece { double a, b; };
  std::vector<Piece> pieces;
  std::vector<double> critical;
  std::vector<int> all = {ProfileTable::kRaw};
  all.insert(all.end(), members.begin(), members.end());
  for (int p : all) {
    const ProfileCost& c = table.profile(p);
    const double e = 1.0 / c.encode_bytes_per_second;
    const double d = 1.0 / c.decode_bytes_per_second;
    const double b = 1.0 / c.compression_ratio;
    const double m = std::max(e, d);
    const double base = c.overhead_seconds * u + (e + d) / l;
    pieces.push_back({base + (l - 1.0) * m / l, b / l});
    pieces.push_back({base, b});
    if (m > 0.0) critical.push_back(m / b);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (size_t j = i + 1; j < pieces.size(); ++j) {
      if (pieces[i].b == pieces[j].b) continue;
      const double x = (pieces[j].a - pieces[i].a) / (pieces[i].b - pieces[j].b);
      if (x > 0.0 && std::isfinite(x)) critical.push_back(x);
    }
  }
  critical.push_back(0.0);
  std::sort(critical.begin(), critical.end());
  critical.erase(std::unique(critical.begin(), critical.end()), critical.end());
  auto per_byte = [&](int p, double x) {
    const ProfileCost& c = table.profile(p);
    ProfileCost scaled = c;
    scaled.overhead_seconds = c.overhead_seconds * u;  // V = 1 byte, t0 scaled
    return StreamedSeconds(scaled, 1.0, 1.0 / x, model.layers);
  };
  XPolicy out;
  for (size_t k = 0; k < critical.size(); ++k) {
    const double x = k + 1 < critical.size() ? 0.5 * (critical[k] + critical[k + 1])
                                             : critical[k] * 2.0 + 1e-12;
    int best = ProfileTable::kRaw;
    double best_t = per_byte(best, x);
    for (int p : members) {
      const double t = per_byte(p, x);
      if (t < best_t) {
        best_t = t;
        best = p;
      }
    }
    if (out.empty() || out.back().second != best) out.push_back({critical[k], best});
  }
  return out;
}

}  // namespace

Result<std::vector<PolicyInterval>> PiecewisePolicy(const ProfileTable& table,
                                                    const LatencyModel& model,
                                                    int workload, double quality_min,
                                                    double kv_bytes) {
  if (workload < 0 || workload >= static_cast<int>(table.workloads().size())) {
    return Status::InvalidArgument("unknown workload index");
  }
  if (!(kv_bytes > 0.0) || std::isnan(quality_min)) {
    return Status::InvalidArgument("kv_bytes must be > 0 (or +inf)");
  }
  if (model.layers < 1) return Status::InvalidArgument("layers must be >= 1");
  std::vector<int> members;
  for (int p = 1; p < table.size(); ++p) {
    if (table.Quality(p, workload) >= quality_min) members.push_back(p);
  }
  const double u = std::isinf(kv_bytes) ? 0.0 : 1.0 / kv_bytes;
  const XPolicy xs = model.kind == LatencyModelKind::kSerial
                         ? SerialPolicy(table, members, u)
                         : StreamedPolicy(table, model, members, u);
  // x ascending = bandwidth descending; emit by increasing bandwidth.
  std::vector<PolicyInterval> out;
  for (size_t k = xs.size(); k-- > 0;) {
    PolicyInterval iv;
    iv.profile = xs[k].second;
    iv.max_bandwidth = xs[k].first > 0.0 ? 1.0 / xs[k].first : kInfinity;
    iv.min_bandwidth = k + 1 < xs.size() ? 1.0 / xs[k + 1].first : 0.0;
    out.push_back(iv);
  }
  return out;
}

}  // namespace kvserve
