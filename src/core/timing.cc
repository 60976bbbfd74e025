// Copyright kvserve authors. kvserve/timing.h.
#include "kvserve/timing.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace kvserve {

Result<double> FastestSeconds(int repeats, const std::function<Status(int round)>& run,
                              const std::function<void(int round)>& before) {
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    if (before) before(r);
    const double start = now();
    KVSERVE_RETURN_IF_ERROR(run(r));
    best = std::min(best, now() - start);
  }
  return best;
}

}  // namespace kvserve
