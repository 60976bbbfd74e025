// Copyright kvserve authors. The one best-of-N timing loop of the library and
// the lab: MeasureProfileCost, the sgemm probe and the benches time through
// it, so that every "fastest of N runs" means the same thing.
#ifndef KVSERVE_TIMING_H_
#define KVSERVE_TIMING_H_

#include <functional>

#include "kvserve/status.h"

namespace kvserve {

// For round = 0 .. repeats-1 (at least one round) calls `before(round)`
// untimed (may be empty), then times `run(round)` on a monotonic clock, and
// returns the fastest run's seconds. The first error `run` returns stops the
// loop and is returned.
[[nodiscard]] Result<double> FastestSeconds(int repeats,
                                            const std::function<Status(int round)>& run,
                                            const std::function<void(int round)>& before = {});

}  // namespace kvserve

#endif  // KVSERVE_TIMING_H_
