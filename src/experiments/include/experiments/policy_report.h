// Copyright kvserve authors. How `kvserve policy` prints a piecewise-optimal
// policy (kvserve/controller.h PiecewisePolicy). Not part of the installed
// library.
#ifndef KVSERVE_EXPERIMENTS_POLICY_REPORT_H_
#define KVSERVE_EXPERIMENTS_POLICY_REPORT_H_

#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve::lab {

// A title line (workload, floor, eligible profiles, latency model, whether
// t0 counts: `kv_bytes` infinite = ignored) and one row per interval:
// bandwidth range in Gbps, profile, CR, benefit thresholds B* and B*(V),
// quality on workload `w` of `table`.
std::string PolicyReportText(const ProfileTable& table, int w, const std::string& workload,
                             double quality_min, const LatencyModel& model,
                             const std::string& model_name, double kv_bytes,
                             const std::vector<PolicyInterval>& policy);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_POLICY_REPORT_H_
