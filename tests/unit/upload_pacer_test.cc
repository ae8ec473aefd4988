// The daemon's own pacing of its relay uploads (proto/upload_pacer.h), with a
// fake clock and what a driver would read from TCP_INFO. By delay
// (UploadPacer): no pacing until queueing is seen, a cut below what was sent
// when the queue passes the target, growth back while it stays under, the
// floor. By capacity (CapacityPacer): unpaced while the acknowledged rate
// grows, held below a plateau's rate, probes only when senders wait, a probe
// the path carries (or the senders do not fill) unpaces, one the path does
// not carry backs off.
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
    p.OnSent(1, bytes_per_second / 100, rtt, t);
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
  EXPECT_GE(p.rate(), 4'000'000u);  // one cut, not a collapse
  // It persists: cut again once the cut could show (the round trips lag).
  const uint64_t first = p.rate();
  t = Send(p, t, first, microseconds(20300), 300);
  EXPECT_EQ(p.rate(), first);
  Send(p, t, first, microseconds(20300), 100);
  EXPECT_LT(p.rate(), first);
}

TEST(UploadPacer, OneLateSampleInAnIntervalIsNotQueueing) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  // 9 pieces at the base, one late: the interval's least round trip is the base.
  for (int i = 0; i < 10; ++i) {
    t += milliseconds(10);
    p.OnSent(1, 60'000, microseconds(i == 4 ? 40000 : 300), t);
  }
  EXPECT_EQ(p.rate(), 0u);
}

TEST(UploadPacer, UnderTheTargetTheRateGrowsBackInProportion) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  t = Send(p, t, 6'000'000, microseconds(20300), 200);
  const uint64_t cut = p.rate();
  ASSERT_GT(cut, 0u);
  // The queue drained; the cooldown passes; then at the base the rate grows by
  // the full growth share per interval.
  t = Send(p, t, cut, microseconds(300), 300);
  EXPECT_EQ(p.rate(), cut);
  t = Send(p, t, cut, microseconds(300), 100);
  EXPECT_NEAR(static_cast<double>(p.rate()), cut * 1.10, cut * 0.01);
  // Half the target queued: half the growth (the interval still open at the
  // base closes first, with the full share).
  const uint64_t before = p.rate();
  t = Send(p, t, before, microseconds(300 + 2500), 200);
  EXPECT_NEAR(static_cast<double>(p.rate()), before * 1.10 * 1.05, before * 0.01);
}

TEST(UploadPacer, AQuietUplinkNeitherLowersTheRateNorGrowsItPastTwiceItsUse) {
  UploadPacer p;
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  t = Send(p, t, 6'000'000, microseconds(20300), 200);
  const uint64_t cut = p.rate();
  // Little to send for a long while: the rate stays where it was.
  t = Send(p, t, 500'000, microseconds(300), 5000);
  EXPECT_EQ(p.rate(), cut);
  // Sending at the rate: it grows, up to twice what is sent.
  Send(p, t, cut, microseconds(300), 5000);
  EXPECT_NEAR(static_cast<double>(p.rate()), 2.0 * cut, cut * 0.02);
}

TEST(UploadPacer, TheRateNeverFallsBelowTheFloor) {
  PacerPolicy policy;
  policy.floor = 2'000'000;
  UploadPacer p(policy);
  auto t = Send(p, kT0, 6'000'000, microseconds(300), 200);
  Send(p, t, 6'000'000, microseconds(50300), 5000);
  EXPECT_EQ(p.rate(), 2'000'000u);
}

// One receiver's downlink full (its round trip up) while another's path is
// clear: the queue is not this host's uplink, nothing is paced. Every
// connection's round trip up: the uplink queues, uploads are paced.
TEST(UploadPacer, OnlyQueueingOnEveryConnectionIsTheUplinks) {
  UploadPacer p;
  auto t = kT0;
  auto both = [&](microseconds a, microseconds b, int ms) {
    for (int i = 0; i < ms / 10; ++i) {
      t += milliseconds(10);
      p.OnSent(1, 30'000, a, t);
      p.OnSent(2, 30'000, b, t);
    }
  };
  both(microseconds(300), microseconds(2000), 200);  // each its own least: 0.3 and 2 ms
  both(microseconds(40300), microseconds(2000), 500);
  EXPECT_EQ(p.rate(), 0u);
  EXPECT_EQ(p.queueing(), microseconds(0));
  both(microseconds(20300), microseconds(22000), 200);
  EXPECT_EQ(p.queueing(), microseconds(20000));
  EXPECT_GT(p.rate(), 0u);
  // A connection that ended and a new one on its number: its least starts over.
  p.OnClosed(1);
  both(microseconds(90000), microseconds(2000), 200);
  EXPECT_EQ(p.base(), microseconds(300));
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

// CapacityPacer with every number given (the defaults may be tuned).
CapacityPolicy Capacity() {
  CapacityPolicy c;
  c.window = milliseconds(250);
  c.plateau = 2;
  c.gain = 0.9;
  c.probe = 1.25;
  c.more = 1.1;
  c.cycle = 2;
  c.max_cycle = 8;
  c.floor = 1 << 20;
  return c;
}

// The receivers acknowledge `bytes_per_second` for `ms`, read every 10 ms;
// `wait`: the senders waited for the pace meanwhile. Returns the time reached.
struct Acks {
  CapacityPacer& p;
  Clock::time_point t = kT0;
  uint64_t acked = 0;
  Clock::time_point Run(uint64_t bytes_per_second, int ms, bool wait = false) {
    for (int i = 0; i < ms / 10; ++i) {
      t += milliseconds(10);
      acked += bytes_per_second / 100;
      if (wait) p.OnWaited();
      if (p.Due(t)) p.OnAcked(acked, t);
    }
    return t;
  }
};

// Runs at the pace, the senders waiting for it, until a probe begins.
void UntilProbing(Acks& a) {
  while (!a.p.probing()) a.Run(a.p.rate(), 10, true);
}

// The capacity measured is `capacity` and uploads are held to 90% of it.
void ExpectHeldBelow(const CapacityPacer& p, double capacity) {
  EXPECT_NEAR(static_cast<double>(p.capacity()), capacity, capacity / 100);
  EXPECT_NEAR(static_cast<double>(p.rate()), 0.9 * capacity, capacity / 100);
}

TEST(CapacityPacer, UploadsAreNotPacedWhileTheAcknowledgedRateGrows) {
  CapacityPacer p(Capacity());
  Acks a{p};
  // A fifth more every window: no plateau.
  double rate = 1'000'000;
  for (int w = 0; w < 10; ++w, rate *= 1.2) a.Run(static_cast<uint64_t>(rate), 250);
  EXPECT_EQ(p.rate(), 0u);
  EXPECT_EQ(p.capacity(), 0u);
}

TEST(CapacityPacer, APlateauHoldsUploadsBelowWhatTheUplinkDelivered) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(6'000'000, 300);  // the first window opens, the second ends
  EXPECT_EQ(p.rate(), 0u);
  a.Run(6'000'000, 500);
  ExpectHeldBelow(p, 6'000'000);
  // Held there while the senders do not wait for it.
  a.Run(5'400'000, 5000);
  EXPECT_FALSE(p.probing());
  EXPECT_NEAR(static_cast<double>(p.rate()), 0.9 * 6'000'000, 60'000);
}

TEST(CapacityPacer, OneWindowLiftedByABurstDoesNotSetTheCapacity) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(6'000'000, 260);
  a.Run(6'500'000, 250);  // a shaper's burst: within a tenth of the window before
  a.Run(6'000'000, 250);
  ASSERT_NE(p.rate(), 0u);
  EXPECT_NEAR(static_cast<double>(p.capacity()), 6'000'000, 60'000);
}

TEST(CapacityPacer, AWindowWithNothingAcknowledgedIsNoPlateau) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(6'000'000, 260);
  a.Run(0, 250);
  a.Run(6'000'000, 250);
  EXPECT_EQ(p.rate(), 0u);
  // A silence longer than a few windows measures nothing either.
  a.t += std::chrono::seconds(5);
  a.Run(6'000'000, 260);
  EXPECT_EQ(p.rate(), 0u);
  a.Run(6'000'000, 250);
  EXPECT_NE(p.rate(), 0u);
}

TEST(CapacityPacer, ProbesOnlyWhenTheSendersWaitForThePace) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(6'000'000, 760);
  ASSERT_NE(p.rate(), 0u);
  const uint64_t held = p.rate();
  a.Run(held, 2000);  // demand at the pace, no wait: no probe
  EXPECT_FALSE(p.probing());
  a.Run(held, 250, true);  // they wait: the window after probes
  EXPECT_TRUE(p.probing());
  EXPECT_NEAR(static_cast<double>(p.rate()), 1.25 * static_cast<double>(p.capacity()), 60'000);
}

TEST(CapacityPacer, AProbeThePathCarriesForTwoWindowsUnpacesUploads) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(3'000'000, 760);  // a plateau of demand, below the uplink
  ASSERT_NE(p.rate(), 0u);
  UntilProbing(a);
  // The probe's first window carries it: still probing (one window may be
  // lifted by acknowledgements of what queued before it).
  a.Run(p.rate(), 250, true);
  EXPECT_TRUE(p.probing());
  EXPECT_NE(p.rate(), 0u);
  a.Run(p.rate(), 250, true);
  EXPECT_FALSE(p.probing());
  EXPECT_EQ(p.rate(), 0u);
  // The uplink, unpaced, plateaus higher: that is the capacity now.
  a.Run(6'000'000, 760);
  EXPECT_NEAR(static_cast<double>(p.capacity()), 6'000'000, 60'000);
}

TEST(CapacityPacer, AProbeThatFindsNothingMoreWaitsTwiceAsLongForTheNext) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(6'000'000, 760);
  const uint64_t held = p.rate();
  ASSERT_NE(held, 0u);
  auto probe_after = [&] {  // windows paced before a probe, the link full at 6 MB/s
    int windows = 0;
    while (!p.probing()) {
      a.Run(held, 250, true);
      ++windows;
    }
    a.Run(6'000'000, 250, true);  // the link carries no more than before
    EXPECT_FALSE(p.probing());
    EXPECT_EQ(p.rate(), held);
    return windows;
  };
  probe_after();
  const int second = probe_after();
  const int third = probe_after();
  const int fourth = probe_after();
  EXPECT_EQ(second, 4);  // the cycle of 2 windows, doubled
  EXPECT_EQ(third, 2 * second);
  EXPECT_EQ(fourth, third);  // max_cycle
  EXPECT_NEAR(static_cast<double>(p.capacity()), 6'000'000, 60'000);
}

// Fetchers ask less of a relay held slow: a probe its senders did not fill
// measured that, not the uplink, and unpaces uploads (before, a relay paced at
// a plateau of early demand stayed there for the whole pull).
TEST(CapacityPacer, AProbeTheSendersDidNotFillUnpacesUploads) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(1'500'000, 760);  // early demand
  ASSERT_NEAR(static_cast<double>(p.capacity()), 1'500'000, 15'000);
  UntilProbing(a);
  a.Run(1'500'000, 250, false);  // no more asked than before, none waited
  EXPECT_FALSE(p.probing());
  EXPECT_EQ(p.rate(), 0u);
  // Unpaced, the demand grows to what the uplink carries: that plateau sets the pace.
  a.Run(3'000'000, 250);
  a.Run(6'000'000, 760);
  ExpectHeldBelow(p, 6'000'000);
}

TEST(CapacityPacer, APlateauBelowTheCapacityDoesNotLowerIt) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(3'000'000, 760);
  UntilProbing(a);
  a.Run(p.rate(), 500, true);
  ASSERT_EQ(p.rate(), 0u);
  a.Run(6'000'000, 760);
  ASSERT_NEAR(static_cast<double>(p.capacity()), 6'000'000, 60'000);
  // Unpaced again after a probe the path carried, then a plateau of lower
  // demand: the capacity stays.
  UntilProbing(a);
  a.Run(8'000'000, 500, true);
  ASSERT_EQ(p.rate(), 0u);
  a.Run(2'000'000, 760);
  ExpectHeldBelow(p, 6'000'000);
}

TEST(CapacityPacer, NeverPacesBelowTheFloor) {
  CapacityPacer p(Capacity());
  Acks a{p};
  a.Run(200'000, 760);
  EXPECT_EQ(p.rate(), uint64_t{1} << 20);
}

}  // namespace
}  // namespace seedd
