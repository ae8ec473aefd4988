// The daemon's own pacing of its relay uploads (proto/upload_pacer.h), interval
// by interval with a fake clock and the round trips a driver would read from
// TCP_INFO: no pacing until queueing is seen, a cut below what was sent when
// the queue passes the target, growth back while it stays under, the floor.
#include "kinds/weights/proto/upload_pacer.h"

#include <gtest/gtest.h>

namespace seedd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = UploadPacer::Clock;

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

// Sends at `bytes_per_second` in 10 pieces per 100 ms interval for `ms`, each
// piece's round trip `rtt`; returns the time reached.
Clock::time_point Send(UploadPacer& p, Clock::time_point t, uint64_t bytes_per_second,
                       microseconds rtt, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    t += milliseconds(10);
    p.OnSent(bytes_per_second / 100, rtt, t);
  }
  return t;
}

TEST(UploadPacer, UploadsAreNotPacedWhileNothingQueues) {
  UploadPacer p;
  Send(p, kT0, 6'000'000, microseconds(300), 2000);
  EXPECT_EQ(p.rate(), 0u);
  EXPECT_EQ(p.base(), microseconds(300));
  EXPECT_EQ(p.queueing(), microseconds(0));
}

TEST(UploadPacer, QueueingPastTheTargetCutsTheRateBelowWhatWasSent) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);  // the base
  EXPECT_EQ(p.rate(), 0u);
  // The uplink's queue grows: 20 ms above the base (one interval closes).
  t = Send(p, t, 6'000'000, microseconds(20300), 200);
  EXPECT_EQ(p.queueing(), microseconds(20000));
  ASSERT_GT(p.rate(), 0u);
  EXPECT_LT(p.rate(), 6'000'000u);
  EXPECT_GE(p.rate(), 4'500'000u);  // one cut, not a collapse
  // It persists: cut again, interval after interval.
  const uint64_t first = p.rate();
  Send(p, t, first, microseconds(20300), 200);
  EXPECT_LT(p.rate(), first);
}

TEST(UploadPacer, OneLateSampleInAnIntervalIsNotQueueing) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  // 9 pieces at the base, one late: the interval's least round trip is the base.
  for (int i = 0; i < 10; ++i) {
    t += milliseconds(10);
    p.OnSent(60'000, microseconds(i == 4 ? 40000 : 300), t);
  }
  EXPECT_EQ(p.rate(), 0u);
}

TEST(UploadPacer, UnderTheTargetTheRateGrowsBackInProportion) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  t = Send(p, t, 6'000'000, microseconds(20300), 200);
  const uint64_t cut = p.rate();
  ASSERT_GT(cut, 0u);
  // The queue drained: at the base, the rate grows by the full growth share
  // (the interval still open at the switch closes queued, and cuts once more).
  t = Send(p, t, cut, microseconds(300), 100);
  const uint64_t low = p.rate();
  t = Send(p, t, low, microseconds(300), 100);
  EXPECT_NEAR(static_cast<double>(p.rate()), low * 1.10, low * 0.01);
  // Half the target queued: half the growth.
  const uint64_t before = p.rate();
  t = Send(p, t, before, microseconds(300 + 2500), 100);
  t = Send(p, t, before, microseconds(300 + 2500), 100);
  EXPECT_GT(p.rate(), before);
  EXPECT_LT(p.rate(), before * 1.10 * 1.10);  // less than two full steps
  EXPECT_GE(p.rate(), before * 1.05 * 1.05 * 0.99);
}

TEST(UploadPacer, TheRateGrowsNoFurtherThanTwiceWhatTheUploadsUse) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  t = Send(p, t, 6'000'000, microseconds(20300), 200);
  // Little to send for a long while: the rate stops at twice what was sent.
  Send(p, t, 1'500'000, microseconds(300), 5000);
  EXPECT_EQ(p.rate(), 3'000'000u);
}

TEST(UploadPacer, TheRateNeverFallsBelowTheFloor) {
  PacerPolicy policy;
  policy.floor = 2'000'000;
  UploadPacer p(policy);
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  Send(p, t, 6'000'000, microseconds(50300), 3000);
  EXPECT_EQ(p.rate(), 2'000'000u);
}

TEST(UploadPacer, TheBaseIsTheLeastRoundTripEverSeen) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(900), 200);
  t = Send(p, t, 6'000'000, microseconds(400), 100);
  EXPECT_EQ(p.base(), microseconds(400));
  // Unknown round trips (0) count their bytes and move nothing else.
  Send(p, t, 6'000'000, microseconds(0), 300);
  EXPECT_EQ(p.base(), microseconds(400));
  EXPECT_EQ(p.rate(), 0u);
}

}  // namespace
}  // namespace seedd
