// Copyright kvserve authors. The --mix syntax of the simulation commands.
#include "workload_mix.h"

#include <sstream>

namespace kvserve::cli {

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

}  // namespace kvserve::cli
