// Copyright kvserve authors. The --mix syntax of the simulation commands.
#ifndef KVSERVE_TOOLS_KVSERVE_WORKLOAD_MIX_H_
#define KVSERVE_TOOLS_KVSERVE_WORKLOAD_MIX_H_

#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve::cli {

// "name:weight:median_mib:sigma:slo_ms:quality_min;..." -> workloads.
// InvalidArgument naming the bad item.
Result<std::vector<SimulatedWorkload>> ParseMix(const std::string& mix);

// The mix `kvserve simulate` and `kvserve simulate-cluster` default to.
inline constexpr const char* kDefaultMix =
    "chat:0.4:24:0.6:250:0.99;retrieval:0.3:160:0.5:1500:0.97;code:0.3:64:0.5:600:0.98";

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_WORKLOAD_MIX_H_
