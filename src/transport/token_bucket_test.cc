// The token bucket on a simulated clock: over any horizon the bytes it lets
// through stay within rate * time + burst, and a sender that always waits as
// told achieves the rate; a link shared by several senders bounds them
// together.
#include "transport/token_bucket.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kvserve::transport {
namespace {

TEST(TokenBucketTest, PacedSenderAchievesTheRateAndNeverExceedsTheBound) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const double rate = std::uniform_real_distribution<double>(1e5, 1e10)(rng);
    const double burst = std::uniform_real_distribution<double>(1e3, 1e6)(rng);
    TokenBucket bucket(rate, burst);
    double now = 0, sent = 0, idle = 0;
    for (int i = 0; i < 2000; ++i) {
      double piece = std::uniform_real_distribution<double>(1, burst)(rng);
      now += bucket.Reserve(piece, now);  // wait as told, then send
      sent += piece;
      // Never more than the rate allows, plus one burst ...
      ASSERT_LE(sent, rate * now + burst + 1e-6 * sent);
      // ... and never less than the rate over the time the sender was not
      // idle: waiting as told achieves the rate (refill is only lost while
      // idle, when the bucket overflows).
      ASSERT_GE(sent, rate * (now - idle) - 1e-6 * sent) << "trial " << trial << " piece " << i;
      // Occasionally idle: tokens refill but never beyond the burst.
      if (rng() % 50 == 0) {
        const double gap = std::uniform_real_distribution<double>(0, 0.1)(rng);
        now += gap;
        idle += gap;
      }
    }
    // With no idle time at all the two bounds meet: exactly the rate plus
    // the initial burst.
    TokenBucket busy(rate, burst);
    double t = 0, total = 0;
    for (int i = 0; i < 500; ++i) {
      const double piece = std::uniform_real_distribution<double>(burst, 3 * burst)(rng);
      t += busy.Reserve(piece, t);
      total += piece;
    }
    EXPECT_NEAR(total, rate * t + burst, 1e-9 * total) << "trial " << trial;
  }
  TokenBucket bucket(1e6, 1e3);
  double now = 0;
  for (int i = 0; i < 10000; ++i) now += bucket.Reserve(1000, now);
  // 10 MB at 1 MB/s, the first burst free.
  EXPECT_NEAR(now, (1e7 - 1e3) / 1e6, 1e-6);
}

// Several senders on one shared link, each sending as soon as the link
// lets it (the earliest ready sender next): together they stay within the
// link's rate plus one depth, share it evenly, and follow a rate change.
TEST(SharedLinkTest, SendersTogetherGetTheLinkRateAndShareItEvenly) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 10; ++trial) {
    const double rate = std::uniform_real_distribution<double>(1e6, 1e10)(rng);
    auto link = SharedLink::Create(rate);
    ASSERT_TRUE(link.ok());
    const int senders = 2 + static_cast<int>(rng() % 6);
    const double piece = (*link)->burst();
    std::vector<double> ready(senders, 0.0), sent(senders, 0.0);
    double total = 0, end = 0;
    for (int i = 0; i < 3000; ++i) {
      const int s = static_cast<int>(std::min_element(ready.begin(), ready.end()) - ready.begin());
      ready[s] += (*link)->Reserve(piece, ready[s]);
      sent[s] += piece;
      total += piece;
      end = std::max(end, ready[s]);
      ASSERT_LE(total, rate * end + (*link)->burst() + 1e-6 * total) << "trial " << trial;
    }
    EXPECT_NEAR(total, rate * end + (*link)->burst(), 2 * piece + 1e-6 * total) << "the link stayed busy";
    for (int s = 0; s < senders; ++s) EXPECT_NEAR(sent[s], total / senders, 2 * piece) << "sender " << s;
    EXPECT_DOUBLE_EQ((*link)->bytes(), total);
    // Half the rate from now on: the next stretch moves half the bytes.
    (*link)->SetRate(rate / 2);
    const double start = end;
    double after = 0;
    for (int i = 0; i < 3000; ++i) {
      const int s = static_cast<int>(std::min_element(ready.begin(), ready.end()) - ready.begin());
      ready[s] += (*link)->Reserve((*link)->burst(), ready[s]);
      after += (*link)->burst();
      end = std::max(end, ready[s]);
    }
    EXPECT_NEAR(after / (end - start), rate / 2, 0.01 * rate) << "trial " << trial;
  }
  EXPECT_FALSE(SharedLink::Create(0).ok());
  EXPECT_FALSE(SharedLink::Create(-1).ok());
  EXPECT_FALSE(SharedLink::Create(1e9, -1).ok());
}

}  // namespace
}  // namespace kvserve::transport
