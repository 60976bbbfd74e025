// Copyright kvserve authors. Lower envelopes; see envelope.h.
#include "controller/envelope.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvserve::controller_internal {
namespace {

// x where line a (steeper) meets line b (flatter).
double Meet(double a_intercept, double a_slope, double b_intercept,
            double b_slope) {
  return (b_intercept - a_intercept) / (a_slope - b_slope);
}

}  // namespace

LowerEnvelope LowerEnvelope::Build(std::vector<EnvelopeLine> lines) {
  std::sort(lines.begin(), lines.end(),
            [](const EnvelopeLine& a, const EnvelopeLine& b) {
              if (a.slope != b.slope) return a.slope > b.slope;
              if (a.intercept != b.intercept) return a.intercept < b.intercept;
              return a.id < b.id;
            });
  std::vector<EnvelopeLine> hull;
  for (const EnvelopeLine& line : lines) {
    if (!hull.empty() && hull.back().slope == line.slope) continue;  // worse
    while (hull.size() >= 2) {
      const EnvelopeLine& a = hull[hull.size() - 2];
      const EnvelopeLine& b = hull.back();
      // b is never strictly lowest if `line` overtakes a no later than b does.
      if (Meet(a.intercept, a.slope, line.intercept, line.slope) <=
          Meet(a.intercept, a.slope, b.intercept, b.slope)) {
        hull.pop_back();
      } else {
        break;
      }
    }
    hull.push_back(line);
  }
  // Clip to x >= 0: drop leading segments that end at or before 0.
  size_t first = 0;
  while (first + 1 < hull.size() &&
         Meet(hull[first].intercept, hull[first].slope,
              hull[first + 1].intercept, hull[first + 1].slope) <= 0.0) {
    ++first;
  }
  LowerEnvelope env;
  env.segments_.assign(hull.begin() + static_cast<std::ptrdiff_t>(first),
                       hull.end());
  for (size_t k = 0; k + 1 < env.segments_.size(); ++k) {
    const EnvelopeLine& a = env.segments_[k];
    const EnvelopeLine& b = env.segments_[k + 1];
    env.breakpoints_.push_back(Meet(a.intercept, a.slope, b.intercept, b.slope));
  }
  return env;
}

int LowerEnvelope::SegmentAt(double x) const {
  if (segments_.empty()) return -1;
  // First breakpoint strictly greater than x.
  auto it = std::upper_bound(breakpoints_.begin(), breakpoints_.end(), x);
  return static_cast<int>(it - breakpoints_.begin());
}

double ParametricEnvelope::Value(int local, double u, double x) const {
  const PlaneLine& l = lines_[local];
  return l.t0 * u + l.g + l.slope * x;
}

ParametricEnvelope ParametricEnvelope::Build(std::vector<PlaneLine> lines) {
  ParametricEnvelope env;
  env.lines_ = std::move(lines);
  const int n = static_cast<int>(env.lines_.size());
  if (n == 0) {
    env.offsets_ = {0, 0};
    return env;
  }
  auto min_at = [&](double u, double x) {
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) best = std::min(best, env.Value(i, u, x));
    return best;
  };
  auto on_envelope = [&](double value, double u, double x) {
    return value <= min_at(u, x) + 1e-9 * std::abs(value) + 1e-300;
  };
  // Candidate u where the envelope's line sequence can change. A superset
  // is harmless: equal neighbouring slabs are merged below.
  std::vector<double> events;
  const auto& L = env.lines_;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      // Intercepts cross: the leftmost line (x = 0) or, for parallel lines,
      // the rightmost can change.
      const double dt = L[i].t0 - L[j].t0;
      if (dt == 0.0) continue;
      const double u = (L[j].g - L[i].g) / dt;
      if (!(u > 0.0) || !std::isfinite(u)) continue;
      if (L[i].slope == L[j].slope || on_envelope(env.Value(i, u, 0.0), u, 0.0)) {
        events.push_back(u);
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      for (int k = j + 1; k < n; ++k) {
        // f_i = f_j and f_j = f_k, linear in (u, x).
        const double a1 = L[i].t0 - L[j].t0, b1 = L[i].slope - L[j].slope;
        const double c1 = L[j].g - L[i].g;
        const double a2 = L[j].t0 - L[k].t0, b2 = L[j].slope - L[k].slope;
        const double c2 = L[k].g - L[j].g;
        const double det = a1 * b2 - a2 * b1;
        if (det == 0.0) continue;
        const double u = (c1 * b2 - c2 * b1) / det;
        const double x = (a1 * c2 - a2 * c1) / det;
        if (!(u > 0.0) || !(x >= 0.0) || !std::isfinite(u) || !std::isfinite(x)) {
          continue;
        }
        if (on_envelope(env.Value(i, u, x), u, x)) events.push_back(u);
      }
    }
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());

  auto sequence_at = [&](double u) {
    std::vector<EnvelopeLine> at;
    at.reserve(n);
    for (int i = 0; i < n; ++i) {
      at.push_back({L[i].t0 * u + L[i].g, L[i].slope, i});
    }
    LowerEnvelope e = LowerEnvelope::Build(std::move(at));
    std::vector<int> seq;
    for (const EnvelopeLine& s : e.segments()) seq.push_back(s.id);
    return seq;
  };
  std::vector<int> previous;
  env.offsets_.push_back(0);
  const size_t slabs = events.size() + 1;
  for (size_t s = 0; s < slabs; ++s) {
    double u;
    if (events.empty()) {
      u = 1.0;
    } else if (s == 0) {
      u = events[0] * 0.5;
    } else if (s == events.size()) {
      u = events.back() * 2.0;
    } else {
      u = 0.5 * (events[s - 1] + events[s]);
    }
    std::vector<int> seq = sequence_at(u);
    if (s > 0 && seq == previous) continue;  // merge with the previous slab
    if (s > 0) env.bounds_.push_back(events[s - 1]);
    env.seq_.insert(env.seq_.end(), seq.begin(), seq.end());
    for (int local : seq) env.seq_ids_.push_back(L[local].id);
    env.offsets_.push_back(static_cast<int>(env.seq_.size()));
    previous = std::move(seq);
  }
  return env;
}

std::span<const int> ParametricEnvelope::Sequence(int slab) const {
  return std::span<const int>(seq_ids_.data() + offsets_[slab],
                              offsets_[slab + 1] - offsets_[slab]);
}

double ParametricEnvelope::Breakpoint(int slab, int k, double u) const {
  const int a = seq_[offsets_[slab] + k];
  const int b = seq_[offsets_[slab] + k + 1];
  return Meet(lines_[a].t0 * u + lines_[a].g, lines_[a].slope,
              lines_[b].t0 * u + lines_[b].g, lines_[b].slope);
}

ParametricEnvelope::Hit ParametricEnvelope::Query(double u, double x) const {
  Hit hit;
  if (lines_.empty()) return hit;
  hit.slab = static_cast<int>(
      std::upper_bound(bounds_.begin(), bounds_.end(), u) - bounds_.begin());
  const int len = offsets_[hit.slab + 1] - offsets_[hit.slab];
  int lo = 0, hi = len - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (x < Breakpoint(hit.slab, mid, u)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  hit.segment = lo;
  hit.id = lines_[seq_[offsets_[hit.slab] + lo]].id;
  return hit;
}

}  // namespace kvserve::controller_internal
