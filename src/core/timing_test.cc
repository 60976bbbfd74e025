// Copyright kvserve authors. FastestSeconds: every round runs, `before` ahead
// of each timed call, the first error stops the loop, and there is always at
// least one round.
#include "kvserve/timing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve {
namespace {

TEST(TimingTest, FastestSecondsRunsEveryRoundAndStopsAtAnError) {
  std::vector<int> rounds;
  auto best = FastestSeconds(4, [&](int r) {
    rounds.push_back(r);
    return Status::Ok();
  });
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(rounds, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GE(*best, 0);
  rounds.clear();
  auto failed = FastestSeconds(4, [&](int r) {
    rounds.push_back(r);
    return r == 1 ? Status::IOError("boom") : Status::Ok();
  });
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  EXPECT_EQ(rounds.size(), 2u);
  int calls = 0, before = 0;
  ASSERT_TRUE(FastestSeconds(0, [&](int) { return ++calls, Status::Ok(); }).ok());
  EXPECT_EQ(calls, 1);  // at least once
  // `before` runs ahead of every timed call, in order.
  std::vector<std::string> order;
  ASSERT_TRUE(FastestSeconds(
                  2, [&](int r) { return order.push_back("run" + std::to_string(r)), Status::Ok(); },
                  [&](int r) { ++before, order.push_back("before" + std::to_string(r)); })
                  .ok());
  EXPECT_EQ(before, 2);
  EXPECT_EQ(order, (std::vector<std::string>{"before0", "run0", "before1", "run1"}));
}

}  // namespace
}  // namespace kvserve
