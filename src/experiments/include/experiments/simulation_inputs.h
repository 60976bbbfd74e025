// Copyright kvserve authors. The inputs of the simulation commands (`kvserve
// simulate`, `simulate-cluster`): the --mix workload syntax and the built-in
// bandwidth scenarios. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_SIMULATION_INPUTS_H_
#define KVSERVE_EXPERIMENTS_SIMULATION_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/controller.h"

namespace kvserve::lab {

// "name:weight:median_mib:sigma:slo_ms:quality_min;..." -> workloads, in
// order (median MiB -> bytes, SLO ms -> seconds); empty items are skipped.
// InvalidArgument naming the bad item (not 6 fields, or not a number).
Result<std::vector<SimulatedWorkload>> ParseMix(const std::string& mix);

// The mix `kvserve simulate` and `kvserve simulate-cluster` default to.
inline constexpr const char* kDefaultMix =
    "chat:0.4:24:0.6:250:0.99;retrieval:0.3:160:0.5:1500:0.97;code:0.3:64:0.5:600:0.98";

// A built-in trace of `duration` seconds, seeded by `seed`:
//   drop-drift   random walk around 25 Gbps; the link drops to 5 Gbps from
//                duration/3 to 7/12 of it, and the codecs turn 1.5x slower
//                halfway through, for good;
//   steps        40, 10, 25, 5, 100 Gbps, each for a tenth of the run;
//   random-walk  random walk around 20 Gbps in [2, 100].
// InvalidArgument for another name.
Result<Trace> MakeScenario(const std::string& name, double duration, uint64_t seed);

// --model of `kvserve simulate` and `kvserve policy`: "serial" (Eq. 1) or
// "streamed" (layer-pipelined over `layers` layers). InvalidArgument
// otherwise.
Result<LatencyModel> ParseLatencyModel(const std::string& name, int layers);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SIMULATION_INPUTS_H_
