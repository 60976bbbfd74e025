// Copyright kvserve authors. experiments/simulation_inputs.h.
#include "experiments/simulation_inputs.h"

#include <sstream>

namespace kvserve::lab {

Result<std::vector<SimulatedWorkload>> ParseMix(const std::string& mix) {
  std::vector<SimulatedWorkload> out;
  std::stringstream all(mix);
  std::string item;
  while (std::getline(all, item, ';')) {
    if (item.empty()) continue;
    std::stringstream fields(item);
    std::string f[6];
    int k = 0;
    while (k < 6 && std::getline(fields, f[k], ':')) ++k;
    if (k != 6) return Status::InvalidArgument("--mix item \"" + item + "\" needs 6 fields");
    SimulatedWorkload w;
    try {
      w.name = f[0];
      w.weight = std::stod(f[1]);
      w.kv_bytes_median = std::stod(f[2]) * 1048576.0;
      w.kv_bytes_sigma = std::stod(f[3]);
      w.slo_seconds = std::stod(f[4]) / 1e3;
      w.quality_min = std::stod(f[5]);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--mix item \"" + item + "\": not a number");
    }
    out.push_back(w);
  }
  return out;
}

Result<Trace> MakeScenario(const std::string& name, double duration, uint64_t seed) {
  if (name == "drop-drift") {
    return Trace::RandomWalk(25.0, 12.0, 50.0, 0.04, 1.0, duration, seed)
        .WithBandwidthDrop(duration / 3.0, duration * 7.0 / 12.0, 5.0)
        .WithCodecSlowdown(duration / 2.0, 1.5);
  }
  if (name == "steps")
    return Trace::Steps({40.0, 10.0, 25.0, 5.0, 100.0}, duration / 10.0, duration);
  if (name == "random-walk") return Trace::RandomWalk(20.0, 2.0, 100.0, 0.08, 1.0, duration, seed);
  return Status::InvalidArgument("unknown scenario \"" + name +
                                 "\" (drop-drift | steps | random-walk)");
}

Result<LatencyModel> ParseLatencyModel(const std::string& name, int layers) {
  if (name != "serial" && name != "streamed")
    return Status::InvalidArgument("--model must be serial or streamed");
  return LatencyModel{name == "streamed" ? LatencyModelKind::kStreamed : LatencyModelKind::kSerial,
                      layers};
}

}  // namespace kvserve::lab
