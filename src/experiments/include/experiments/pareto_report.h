// Copyright kvserve authors. `kvserve pareto`'s view of a profile table: the
// 3D Pareto front per workload (quality up, CR up, codec seconds per byte
// down) and the points scripts/plots.py draws. Not part of the installed
// library.
#ifndef KVSERVE_EXPERIMENTS_PARETO_REPORT_H_
#define KVSERVE_EXPERIMENTS_PARETO_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve::lab {

// One workload of a table: its profile rows (indices >= 1, raw excluded)
// with a finite quality, in table order, and the subset of them no other
// row dominates on (quality, CR, codec seconds per byte).
struct WorkloadFront {
  std::vector<int> rows, front;
};
// One entry per workload of `table`, in the table's order.
std::vector<WorkloadFront> ParetoFronts(const ProfileTable& table);

// Per workload: how many profiles and how many on the front, then the
// front's rows (quality, CR, encode / decode GB/s, codec ns/B, spec).
std::string ParetoText(const ProfileTable& table, const std::vector<WorkloadFront>& fronts);

// {"format": "kvserve-pareto-plot", "version": 1, "table", "workload",
// "points": [{"spec", "quality", "compression_ratio", "codec_ns_per_byte",
// "on_front"}]}: every row of `workload` with a finite quality, `front`
// marking those on the front.
nlohmann::ordered_json ParetoPlotJson(const ProfileTable& table, const std::string& table_path,
                                      int workload, const std::vector<int>& front);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_PARETO_REPORT_H_
