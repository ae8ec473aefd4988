// A server's upload slots (proto/upload_slots.h), event by event with a fake
// clock: who is sent to now, who waits and for what, who is answered "busy",
// and which holder is cut off for whom.
#include "kinds/weights/proto/upload_slots.h"

#include <gtest/gtest.h>

#include <map>

namespace seedd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Verdict = UploadSlots::Verdict;

const ServeClock::time_point kT0 = ServeClock::time_point{} + std::chrono::hours(1);

SwarmPolicy Policy(int slots) {
  SwarmPolicy p;
  p.upload_slots = slots;
  return p;
}

// Every holder has sent plenty (none is slow) unless a test says otherwise.
uint64_t Fast(UploadSlots::Id) { return uint64_t{1} << 40; }

TEST(UploadSlots, RelaysBeyondTheSlotsAreAnsweredBusy) {
  UploadSlots slots(Policy(2));
  EXPECT_EQ(slots.Ask("a:1", "10.0.0.1", false, kT0, Fast).verdict, Verdict::kSend);
  EXPECT_EQ(slots.Ask("b:1", "10.0.0.2", false, kT0, Fast).verdict, Verdict::kSend);
  EXPECT_EQ(slots.Ask("c:1", "10.0.0.3", false, kT0, Fast).verdict, Verdict::kBusy);
  EXPECT_EQ(slots.sending(), 2);
}

TEST(UploadSlots, ARelaysNextRequestWaitsForItsOwnSendToEnd) {
  UploadSlots slots(Policy(4));
  const UploadSlots::Answer first = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  ASSERT_EQ(first.verdict, Verdict::kSend);
  // Slots are free, but a relay holds one at a time.
  const UploadSlots::Answer next = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  ASSERT_EQ(next.verdict, Verdict::kWait);
  EXPECT_FALSE(next.in_line);
  EXPECT_FALSE(slots.Granted(next.id));
  EXPECT_EQ(slots.Release(first.id, kT0 + milliseconds(5)), std::vector<UploadSlots::Id>{next.id});
  EXPECT_TRUE(slots.Granted(next.id));
  EXPECT_EQ(slots.sending(), 1);
}

TEST(UploadSlots, AnOwnWaitThatOutlastsItsSendIsBusyAndChangesNothing) {
  UploadSlots slots(Policy(1));
  const UploadSlots::Answer first = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  const UploadSlots::Answer next = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  ASSERT_EQ(next.verdict, Verdict::kWait);
  EXPECT_FALSE(slots.GiveUp(next.id, kT0 + milliseconds(2000)));
  EXPECT_FALSE(slots.Granted(next.id));
  EXPECT_TRUE(slots.Release(first.id, kT0 + milliseconds(2001)).empty());
  EXPECT_EQ(slots.sending(), 0);
}

// A relay with nothing arriving, turned away within two busy_retry times, waits
// in line; it is then served before the next request of the relay whose send
// ended.
TEST(UploadSlots, AStarvedRelayTurnedAwayMomentsAgoWaitsInLineAheadOfTheHoldersNextRequest) {
  UploadSlots slots(Policy(1));
  const UploadSlots::Answer holder = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  const UploadSlots::Answer ahead = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  ASSERT_EQ(ahead.verdict, Verdict::kWait);
  // First asked: busy, remembered.
  EXPECT_EQ(slots.Ask("b:1", "10.0.0.2", true, kT0, Fast).verdict, Verdict::kBusy);
  // Asked again exactly at the edge of the window (2 x 50 ms): in line.
  const UploadSlots::Answer line =
      slots.Ask("b:1", "10.0.0.2", true, kT0 + milliseconds(100), Fast);
  ASSERT_EQ(line.verdict, Verdict::kWait);
  EXPECT_TRUE(line.in_line);
  EXPECT_EQ(slots.Release(holder.id, kT0 + milliseconds(150)),
            std::vector<UploadSlots::Id>{line.id});
  EXPECT_FALSE(slots.Granted(ahead.id));
  EXPECT_EQ(slots.waited_in_line(), 1u);
  // The holder's own request is next.
  EXPECT_EQ(slots.Release(line.id, kT0 + milliseconds(200)),
            std::vector<UploadSlots::Id>{ahead.id});
}

TEST(UploadSlots, ARelayTurnedAwayLongerAgoOrWithChunksArrivingIsBusyAgain) {
  UploadSlots slots(Policy(1));
  slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  EXPECT_EQ(slots.Ask("b:1", "10.0.0.2", true, kT0, Fast).verdict, Verdict::kBusy);
  // One microsecond past the window.
  EXPECT_EQ(
      slots.Ask("b:1", "10.0.0.2", true, kT0 + milliseconds(100) + microseconds(1), Fast).verdict,
      Verdict::kBusy);
  // Chunks arriving at it: busy however recent.
  EXPECT_EQ(slots.Ask("c:1", "10.0.0.3", false, kT0, Fast).verdict, Verdict::kBusy);
  EXPECT_EQ(slots.Ask("c:1", "10.0.0.3", false, kT0 + milliseconds(1), Fast).verdict,
            Verdict::kBusy);
  EXPECT_EQ(slots.in_line(), 0u);
}

TEST(UploadSlots, AtMostLinePerSlotTimesTheSlotsWaitInLine) {
  SwarmPolicy p = Policy(2);
  p.line_per_slot = 2;
  UploadSlots slots(p);
  slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  slots.Ask("b:1", "10.0.0.2", false, kT0, Fast);
  int waited = 0, busy = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string relay = "w" + std::to_string(i) + ":1";
    const std::string address = "10.0.1." + std::to_string(i);
    ASSERT_EQ(slots.Ask(relay, address, true, kT0, Fast).verdict, Verdict::kBusy);
    const Verdict v = slots.Ask(relay, address, true, kT0 + milliseconds(50), Fast).verdict;
    (v == Verdict::kWait ? waited : busy) += 1;
  }
  EXPECT_EQ(waited, 4);
  EXPECT_EQ(busy, 4);
}

// A newcomer that finds a slot free but others in line goes behind them.
TEST(UploadSlots, ANewcomerDoesNotJumpTheLine) {
  UploadSlots slots(Policy(1));
  const UploadSlots::Answer holder = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  slots.Ask("b:1", "10.0.0.2", true, kT0, Fast);
  const UploadSlots::Answer line = slots.Ask("b:1", "10.0.0.2", true, kT0 + milliseconds(10), Fast);
  ASSERT_TRUE(line.in_line);
  // The line leaves (its wait ended): its relay is remembered as turned away,
  // and the slot stays with the holder.
  EXPECT_FALSE(slots.GiveUp(line.id, kT0 + milliseconds(2010)));
  EXPECT_EQ(slots.in_line(), 0u);
  const UploadSlots::Answer again =
      slots.Ask("b:1", "10.0.0.2", true, kT0 + milliseconds(2020), Fast);
  EXPECT_TRUE(again.in_line);
  EXPECT_EQ(slots.Release(holder.id, kT0 + milliseconds(2030)),
            std::vector<UploadSlots::Id>{again.id});
  EXPECT_EQ(slots.Ask("c:1", "10.0.0.3", false, kT0 + milliseconds(2030), Fast).verdict,
            Verdict::kBusy);
}

TEST(UploadSlots, AGrantThatRacesTheDeadlineKeepsTheSlot) {
  UploadSlots slots(Policy(1));
  const UploadSlots::Answer first = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  const UploadSlots::Answer next = slots.Ask("a:1", "10.0.0.1", false, kT0, Fast);
  slots.Release(first.id, kT0 + milliseconds(2000));
  // The waiter wakes for its deadline after the grant: it holds the slot.
  EXPECT_TRUE(slots.GiveUp(next.id, kT0 + milliseconds(2000)));
  EXPECT_EQ(slots.sending(), 1);
}

TEST(UploadSlots, AHolderSlowerThanTheFloorAfterPreemptAfterIsCutOffForANewcomer) {
  SwarmPolicy p = Policy(1);
  p.relay_min_rate = 1000;  // bytes/s
  UploadSlots slots(p);
  std::map<UploadSlots::Id, uint64_t> sent;
  auto sent_of = [&](UploadSlots::Id id) { return sent[id]; };
  const UploadSlots::Answer slow = slots.Ask("a:1", "10.0.0.1", false, kT0, sent_of);
  sent[slow.id] = 1999;  // 999.5 bytes/s over 2 s
  // Before preempt_after: kept.
  EXPECT_TRUE(
      slots.Ask("b:1", "10.0.0.2", false, kT0 + milliseconds(1999), sent_of).preempt.empty());
  const UploadSlots::Answer a =
      slots.Ask("b:1", "10.0.0.2", false, kT0 + milliseconds(2000), sent_of);
  ASSERT_EQ(a.preempt.size(), 1u);
  EXPECT_EQ(a.preempt[0].id, slow.id);
  EXPECT_TRUE(a.preempt[0].slow);
  EXPECT_EQ(a.verdict, Verdict::kBusy);  // until its send fails and it is released
  // Cut off once only.
  EXPECT_TRUE(
      slots.Ask("c:1", "10.0.0.3", false, kT0 + milliseconds(2001), sent_of).preempt.empty());
  // One at the floor is kept.
  UploadSlots other(p);
  const UploadSlots::Answer ok = other.Ask("a:1", "10.0.0.1", false, kT0, sent_of);
  sent[ok.id] = 2000;
  EXPECT_TRUE(
      other.Ask("b:1", "10.0.0.2", false, kT0 + milliseconds(2000), sent_of).preempt.empty());
}

TEST(UploadSlots, AnAddressHoldingEverySlotLosesItsNewestToAnAddressHoldingNone) {
  UploadSlots slots(Policy(3));
  const UploadSlots::Answer s1 = slots.Ask("x1:1", "10.0.0.9", false, kT0, Fast);
  const UploadSlots::Answer s2 = slots.Ask("x2:1", "10.0.0.9", false, kT0 + milliseconds(10), Fast);
  const UploadSlots::Answer s3 = slots.Ask("x3:1", "10.0.0.9", false, kT0 + milliseconds(20), Fast);
  ASSERT_EQ(s3.verdict, Verdict::kSend);
  // The same address asking again under a fourth name: nothing is cut off.
  EXPECT_TRUE(slots.Ask("x4:1", "10.0.0.9", false, kT0 + milliseconds(5000), Fast).preempt.empty());
  const UploadSlots::Answer a = slots.Ask("y:1", "10.0.0.7", false, kT0 + milliseconds(5000), Fast);
  ASSERT_EQ(a.preempt.size(), 1u);
  EXPECT_EQ(a.preempt[0].id, s3.id);
  EXPECT_FALSE(a.preempt[0].slow);
  EXPECT_EQ(a.preempt[0].address_holds, 3u);
  (void)s1;
  (void)s2;
  // Without fair_addresses, nobody is.
  SwarmPolicy p = Policy(2);
  p.fair_addresses = false;
  UploadSlots unfair(p);
  unfair.Ask("x1:1", "10.0.0.9", false, kT0, Fast);
  unfair.Ask("x2:1", "10.0.0.9", false, kT0, Fast);
  EXPECT_TRUE(unfair.Ask("y:1", "10.0.0.7", false, kT0 + milliseconds(5000), Fast).preempt.empty());
}

}  // namespace
}  // namespace seedd
