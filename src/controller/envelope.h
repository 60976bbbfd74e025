// Copyright kvserve authors. Exact lower envelopes of latency lines (paper
// Theorem 6.2), internal to the controller.
//
// Per byte, the serial latency of profile p at x = 1/B and u = 1/V is
//   T_p / V = t0_p u + g_p + b_p x,   g_p = 1/s_enc + 1/s_dec, b_p = 1/cr_p,
// a plane over (u, x); raw is the plane x (t0 = g = 0, b = 1). For a fixed
// request size (fixed u) these are lines in x, and the optimum is their lower
// envelope: LowerEnvelope computes it with the convex hull trick. Because t0
// makes the intercepts depend on V, ParametricEnvelope cuts the u axis into
// slabs inside which the sequence of envelope lines is constant (its only
// changes happen where three lines meet on the envelope, or where two
// intercepts cross), stores one sequence per slab, and answers a query by two
// binary searches: the slab by u, then the segment by x, evaluating the
// breakpoints at the query's u. The answer is the exact argmin.
#ifndef KVSERVE_SRC_CONTROLLER_ENVELOPE_H_
#define KVSERVE_SRC_CONTROLLER_ENVELOPE_H_

#include <span>
#include <vector>

namespace kvserve::controller_internal {

// y = intercept + slope * x; `id` is the caller's name for the line.
struct EnvelopeLine {
  double intercept = 0.0;
  double slope = 0.0;
  int id = 0;
};

// Lower envelope of lines over x in [0, +inf).
// Thread safety: immutable after Build; safe to share.
class LowerEnvelope {
 public:
  // Convex hull trick, O(n log n). Lines with equal slope keep the lowest
  // intercept (lower id on an exact tie). Lines must be finite.
  static LowerEnvelope Build(std::vector<EnvelopeLine> lines);

  // Lines on the envelope, by increasing x (decreasing slope). Segment k owns
  // [breakpoint(k-1), breakpoint(k)), with breakpoint(-1) = 0 and the last
  // segment unbounded. Empty when no lines were given.
  const std::vector<EnvelopeLine>& segments() const { return segments_; }
  // Size segments().size() - 1, strictly increasing, all > 0.
  const std::vector<double>& breakpoints() const { return breakpoints_; }
  // Index of the segment containing x >= 0, O(log n); -1 when empty.
  int SegmentAt(double x) const;

 private:
  std::vector<EnvelopeLine> segments_;
  std::vector<double> breakpoints_;
};

// T/V = t0 * u + g + slope * x.
struct PlaneLine {
  double t0 = 0.0;
  double g = 0.0;
  double slope = 0.0;
  int id = 0;
};

// Lower envelope of PlaneLines as a function of x, for every u >= 0.
// Thread safety: immutable after Build; safe to share.
class ParametricEnvelope {
 public:
  // O(n^4) worst case build (triples checked against all lines); fine for
  // profile tables of tens of rows. Lines must be finite.
  static ParametricEnvelope Build(std::vector<PlaneLine> lines);

  struct Hit {
    int id = -1;       // the optimal line's id
    int segment = -1;  // its index in the slab's sequence
    int slab = -1;
  };
  // The argmin at (u, x), u >= 0, x >= 0. O(log n). id -1 when empty.
  Hit Query(double u, double x) const;
  // The envelope's sequence of line ids in `slab` (by increasing x).
  std::span<const int> Sequence(int slab) const;
  // The breakpoint between segments k and k+1 of `slab` at u.
  double Breakpoint(int slab, int k, double u) const;
  int slab_count() const { return static_cast<int>(offsets_.size()) - 1; }
  bool empty() const { return lines_.empty(); }

 private:
  double Value(int local, double u, double x) const;
  std::vector<PlaneLine> lines_;
  std::vector<double> bounds_;   // slab k = [bounds_[k-1], bounds_[k])
  std::vector<int> offsets_;     // slab k's sequence = seq_[offsets_[k]..[k+1])
  std::vector<int> seq_;         // local line indices
  std::vector<int> seq_ids_;     // the same, as line ids
};

}  // namespace kvserve::controller_internal

#endif  // KVSERVE_SRC_CONTROLLER_ENVELOPE_H_
