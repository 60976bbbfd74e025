// libFuzzer target for the profiler's strategy-space JSON
// (configs/strategy_space.json; kvserve/profiler.h StrategySpace): any input
// parses or fails with a Status; every profile of an accepted space is
// valid.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvserve/profiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  auto space = StrategySpace::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!space.ok()) return 0;
  for (const Profile& p : space->profiles())
    if (!p.Validate().ok()) __builtin_trap();
  return 0;
}
