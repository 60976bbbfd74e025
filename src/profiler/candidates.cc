// Copyright kvserve authors. Codec metrics of a strategy space, cached in the
// results database (include/kvserve/profiler.h, MeasureCandidates).
#include "kvserve/profiler.h"

namespace kvserve {

Result<std::vector<Candidate>> MeasureCandidates(const StrategySpace& space, CodecMeter& meter,
                                                 ResultsDb& db, const EvaluationKey& scope,
                                                 int every, const MeasureProgressFn& on_progress,
                                                 MeasureCounts* counts) {
  std::vector<Candidate> out;
  out.reserve(space.profiles().size());
  MeasureCounts local;
  MeasureCounts& n = counts != nullptr ? *counts : local;
  n = {};
  int& measured = n.measured;
  int& from_db = n.from_db;
  for (const Profile& p : space.profiles()) {
    const EvaluationKey key{scope.model, scope.workload, p.ToString(), scope.sample_set, "codec"};
    auto row = db.Get(key);
    if (row.ok() && row->codec) {
      out.push_back({p, *row->codec});
      ++from_db;
      continue;
    }
    auto m = meter.Measure(p);
    if (!m.ok()) return m.status().WithContext("codec metrics of " + p.ToString());
    KVSERVE_RETURN_IF_ERROR(db.PutCodec(key, *m));
    out.push_back({p, *m});
    ++measured;
    if (every > 0 && measured % every == 0 && on_progress)
      KVSERVE_RETURN_IF_ERROR(on_progress(measured, from_db, out.size()));
  }
  return out;
}

}  // namespace kvserve
