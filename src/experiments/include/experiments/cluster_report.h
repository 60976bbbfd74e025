// Copyright kvserve authors. What `kvserve simulate-cluster` writes about an
// N x M cluster simulation (kvserve/cluster_sim.h): docs/scale.md. Not part
// of the installed library.
#ifndef KVSERVE_EXPERIMENTS_CLUSTER_REPORT_H_
#define KVSERVE_EXPERIMENTS_CLUSTER_REPORT_H_

#include <string>

#include "kvserve/cluster_sim.h"

namespace kvserve::lab {

// The Markdown report of `report`, simulated with `o` from the table at
// `table_path` and the workload mix `mix` in `seconds`: a title, the
// command that regenerates it, the model, links, workloads and policies in
// prose, ClusterSimReport::ToMarkdown's tables, and -- when the adaptive,
// raw and static-best policies are all in the report -- adaptive's mean and
// p99 JCT against raw, static-best and the fastest static policy that meets
// every quality floor.
std::string ClusterReportMarkdown(const std::string& table_path, const ClusterSimOptions& o,
                                  const ClusterSimReport& report, double seconds,
                                  const std::string& mix);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_CLUSTER_REPORT_H_
