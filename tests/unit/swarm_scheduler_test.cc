// The swarm scheduler, event by event with a fake clock, and a small swarm of
// them driven in rounds: rarest first, seeds asked only for what no relay has,
// endgame copies, failures, deferrals, bounded neighbours.
#include "kinds/weights/proto/swarm_scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <set>

namespace seedd {
namespace {

using std::chrono::seconds;

SchedulerOptions Options(uint64_t random_seed = 1) {
  SchedulerOptions o;
  o.random_seed = random_seed;
  return o;
}

const SchedulerClock::time_point kT0{};

// A relay neighbour taken as proven (as if it had delivered a chunk already):
// what it offers is counted from the start.
bool AddRelay(SwarmScheduler& s, PeerId peer, int slots = 0) {
  if (!s.AddNeighbour(peer, false, slots)) return false;
  s.Prove(peer);
  return true;
}

TEST(SwarmScheduler, ARelayIsAskedForTheRarestChunkItHas) {
  SwarmScheduler s(4, Options());
  ASSERT_TRUE(AddRelay(s, 1));
  ASSERT_TRUE(AddRelay(s, 2));
  ASSERT_TRUE(AddRelay(s, 3));
  // Chunk 0 is on three relays, chunk 1 on two, chunk 2 on one (relay 1).
  s.NeighbourState(1, {true, true, true, false});
  s.NeighbourState(2, {true, true, false, false});
  s.NeighbourState(3, {true, false, false, false});
  EXPECT_EQ(s.Next(1, kT0), 2u);
  EXPECT_EQ(s.Next(2, kT0), 1u);
  EXPECT_EQ(s.Next(3, kT0), 0u);
  EXPECT_EQ(s.Next(3, kT0), std::nullopt);  // chunk 3: nobody has it
}

TEST(SwarmScheduler, TiesAreBrokenAtRandomSoFetchersStartApart) {
  std::set<uint32_t> first;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SwarmScheduler s(64, Options(seed));
    s.AddNeighbour(1, true);
    first.insert(*s.Next(1, kT0));
  }
  EXPECT_GE(first.size(), 10u);
}

// A seed that is itself still fetching: asked only for what its state or its
// announcements say it has; a "not here" takes the chunk off it until it says so.
TEST(SwarmScheduler, ASeedStillFetchingIsAskedOnlyForWhatItHas) {
  SwarmScheduler s(3, Options());
  s.AddNeighbour(0, true);
  s.NeighbourState(0, {false, true, false});
  std::set<uint32_t> asked;
  while (auto c = s.Next(0, kT0)) asked.insert(*c);
  EXPECT_EQ(asked, std::set<uint32_t>{1});
  s.Lacks(0, 1);  // it answered "not here" after all
  EXPECT_FALSE(s.Offers(0, 1));
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);
  EXPECT_TRUE(s.Stuck());  // nobody has chunks 0 to 2
  s.NeighbourHas(0, 2);    // its watch says it verified chunk 2
  EXPECT_FALSE(s.Stuck());
  EXPECT_EQ(s.Next(0, kT0), 2u);
  EXPECT_EQ(s.Holders(2), 0);  // seeds are not counted as holders
}

// Slots are per neighbour: a seed with four connections takes more at once than a
// relay with one.
TEST(SwarmScheduler, EachNeighbourHasItsOwnNumberOfSlots) {
  SwarmScheduler s(16, Options());
  s.AddNeighbour(0, true, 8);
  AddRelay(s, 1, 2);
  for (uint32_t c = 8; c < 16; ++c) s.NeighbourHas(1, c);
  int relay = 0;
  while (s.Next(1, kT0)) ++relay;
  int seed = 0;
  while (s.Next(0, kT0)) ++seed;
  EXPECT_EQ(relay, 2);
  EXPECT_EQ(seed, 8);
}

// Room is what a driver wakes idle connections for: the requests a
// neighbour's slots take beyond those in flight, none for a stranger, and a
// seed's slots cut to seed_requests once a relay is proven.
TEST(SwarmScheduler, RoomIsTheSlotsLeftBeyondTheRequestsInFlight) {
  SchedulerOptions o = Options();
  o.seed_requests = 1;
  SwarmScheduler s(16, o);
  s.AddNeighbour(0, true, 4);
  EXPECT_EQ(s.Room(0), 4);
  EXPECT_EQ(s.Room(7), 0);
  ASSERT_TRUE(s.Next(0, kT0));
  EXPECT_EQ(s.Room(0), 3);
  AddRelay(s, 1, 2);
  for (uint32_t c = 8; c < 16; ++c) s.NeighbourHas(1, c);
  EXPECT_EQ(s.Room(0), 0);  // one in flight, one allowed
  EXPECT_EQ(s.Room(1), 2);
  ASSERT_TRUE(s.Next(1, kT0));
  EXPECT_EQ(s.Room(1), 1);
  ASSERT_TRUE(s.Next(1, kT0));
  EXPECT_EQ(s.Room(1), 0);
  EXPECT_FALSE(s.Next(1, kT0));
}

// A request that ends without blame (its connection closed) puts the chunk back
// and costs the neighbour nothing; a failure not tied to a chunk counts.
TEST(SwarmScheduler, ReturnedChunksGoBackWithoutBlame) {
  SwarmScheduler s(2, Options());
  s.AddNeighbour(0, true);
  const uint32_t c = *s.Next(0, kT0);
  for (int i = 0; i < 5; ++i) {
    s.Returned(0, c);
    ASSERT_TRUE(s.IsNeighbour(0));
    ASSERT_TRUE(s.Next(0, kT0).has_value());
  }
  EXPECT_FALSE(s.Failed(0));
  EXPECT_FALSE(s.Failed(0));
  EXPECT_TRUE(s.Failed(0));  // the third: a seed is dropped
  EXPECT_FALSE(s.IsNeighbour(0));
  EXPECT_EQ(s.missing(), 2u);
}

// A host's requests to relays are bounded in all, so that its downlink is not
// split among many slow transfers (each holding one of its sender's few upload
// slots).
TEST(SwarmScheduler, RequestsToRelaysAreBoundedInAll) {
  SchedulerOptions o = Options();
  o.max_requests = 3;
  SwarmScheduler s(32, o);
  for (PeerId p = 1; p <= 6; ++p) {
    ASSERT_TRUE(AddRelay(s, p));
    s.NeighbourState(p, std::vector<bool>(32, true));
  }
  int asked = 0;
  std::optional<uint32_t> first;
  for (PeerId p = 1; p <= 6; ++p) {
    if (auto c = s.Next(p, kT0)) {
      ++asked;
      if (!first) first = c;
    }
  }
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(s.RelayRequests(), 3);
  s.Arrived(1, *first);  // one ends: one more may be asked
  EXPECT_TRUE(s.Next(4, kT0).has_value());
  EXPECT_EQ(s.Next(5, kT0), std::nullopt);
}

// A driver wakes only the connections that may use a freed request: MayAsk
// says no for a relay when the bound is reached, when it said busy, and when
// it has nothing missing and unasked; a freed request makes it yes again.
TEST(SwarmScheduler, MayAskSaysWhoCanUseAFreedRequest) {
  SchedulerOptions o = Options();
  o.max_requests = 2;
  SwarmScheduler s(8, o);
  for (PeerId p = 1; p <= 3; ++p) ASSERT_TRUE(AddRelay(s, p));
  s.NeighbourHas(1, 0);
  s.NeighbourHas(1, 1);
  s.NeighbourHas(2, 2);
  s.NeighbourHas(2, 3);
  s.NeighbourHas(3, 0);  // relay 3 has only what relay 1 has too
  EXPECT_EQ(s.FreeRelayRequests(), 2);
  EXPECT_TRUE(s.MayAsk(1, kT0));
  EXPECT_TRUE(s.MayAsk(3, kT0));
  const uint32_t a = *s.Next(1, kT0);
  const uint32_t b = *s.Next(2, kT0);
  EXPECT_EQ(s.FreeRelayRequests(), 0);
  EXPECT_FALSE(s.MayAsk(3, kT0));  // the bound
  EXPECT_EQ(s.Next(3, kT0), std::nullopt);
  s.Arrived(2, b);
  EXPECT_EQ(s.FreeRelayRequests(), 1);
  // Relay 3 may be asked for chunk 0 unless relay 1 was asked for it.
  EXPECT_EQ(s.MayAsk(3, kT0), a != 0);
  s.Busy(1, a, kT0 + seconds(1));
  EXPECT_FALSE(s.MayAsk(1, kT0));  // busy until then
  EXPECT_TRUE(s.MayAsk(3, kT0));   // chunk 0 is unasked again
  EXPECT_TRUE(s.MayAsk(1, kT0 + seconds(1)));
}

// MayAsk never says no where Next would give a request: after every event of
// a small random swarm, each neighbour's MayAsk is checked against Next on a
// copy of the scheduler.
TEST(SwarmScheduler, MayAskIsNeverNoWhereNextWouldAsk) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SchedulerOptions o = Options(seed);
    o.max_requests = 3;
    o.catch_up_requests = 1;
    o.seed_requests = 1;
    const uint32_t chunks = 24;
    SwarmScheduler s(chunks, o);
    std::mt19937_64 rng(seed);
    ASSERT_TRUE(s.AddNeighbour(0, true, 2));
    for (PeerId p = 1; p <= 5; ++p) ASSERT_TRUE(s.AddNeighbour(p, false, 1));
    std::vector<std::pair<PeerId, uint32_t>> asked;
    SchedulerClock::time_point now = kT0;
    for (int step = 0; step < 400 && !s.Complete(); ++step) {
      now += std::chrono::milliseconds(rng() % 50);
      const PeerId p = static_cast<PeerId>(rng() % 6);
      switch (rng() % 6) {
        case 0:
          if (p != 0) s.NeighbourHas(p, static_cast<uint32_t>(rng() % chunks));
          break;
        case 1:
          if (auto c = s.Next(p, now)) asked.emplace_back(p, *c);
          break;
        case 2:
        case 3:
          if (!asked.empty()) {
            const size_t i = rng() % asked.size();
            const auto [q, c] = asked[i];
            asked.erase(asked.begin() + static_cast<long>(i));
            switch (rng() % 3) {
              case 0:
                s.Arrived(q, c, now);
                break;
              case 1:
                s.Busy(q, c, now + std::chrono::milliseconds(100));
                break;
              default:
                s.Returned(q, c);
            }
          }
          break;
        default:
          if (p != 0 && rng() % 4 == 0) s.Prove(p);
      }
      for (PeerId q = 0; q <= 5; ++q) {
        if (s.MayAsk(q, now)) continue;
        SwarmScheduler copy = s;
        EXPECT_EQ(copy.Next(q, now), std::nullopt) << "seed " << seed << " step " << step;
      }
    }
  }
}

// A host holding fewer chunks than its relay neighbours on average asks
// catch_up_requests more of them at once: it takes a larger share of their
// uplinks until it has caught up, so the last host of a fleet is not far behind.
TEST(SwarmScheduler, AHostBehindItsNeighboursAsksMoreAtOnce) {
  auto asked_at_once = [](bool behind) {
    SchedulerOptions o = Options();
    o.max_requests = 2;
    o.catch_up_requests = 2;
    SwarmScheduler s(64, o);
    std::vector<bool> theirs(64, true);
    if (!behind) {
      // It has the first half, each neighbour the second: as much as they do.
      for (uint32_t c = 0; c < 32; ++c) {
        s.AlreadyHave(c);
        theirs[c] = false;
      }
    }
    for (PeerId p = 1; p <= 6; ++p) {
      EXPECT_TRUE(AddRelay(s, p));
      s.NeighbourState(p, theirs);
    }
    int asked = 0;
    for (PeerId p = 1; p <= 6; ++p) asked += s.Next(p, kT0).has_value() ? 1 : 0;
    return asked;
  };
  EXPECT_EQ(asked_at_once(true), 4);
  EXPECT_EQ(asked_at_once(false), 2);
}

// Neighbours watched for wanted chunks name only those; how many they hold in
// all comes as a count, and a host behind them by that count still catches up.
TEST(SwarmScheduler, AHostIsBehindNeighboursByTheCountTheySayNotOnlyByWhatTheyOffer) {
  SchedulerOptions o = Options();
  o.max_requests = 2;
  o.catch_up_requests = 2;
  SwarmScheduler s(64, o);
  std::vector<bool> theirs(64, false);
  for (uint32_t c = 0; c < 16; ++c) s.AlreadyHave(c);
  for (uint32_t c = 16; c < 24; ++c) theirs[c] = true;  // what it lacks of theirs
  for (PeerId p = 1; p <= 6; ++p) {
    ASSERT_TRUE(AddRelay(s, p));
    s.NeighbourState(p, theirs);
  }
  EXPECT_FALSE(s.Behind());  // 8 offered against 16 held
  for (PeerId p = 1; p <= 6; ++p) s.NeighbourCount(p, 40);
  EXPECT_TRUE(s.Behind());  // they hold 40 each
  int asked = 0;
  for (PeerId p = 1; p <= 6; ++p) asked += s.Next(p, kT0).has_value() ? 1 : 0;
  EXPECT_EQ(asked, 4);
}

// A seed's request is outside the bound (what only it has must not wait behind
// the relays, and slow relays holding the bound must not leave it idle); among
// relays it is asked one chunk at a time.
TEST(SwarmScheduler, ASeedIsAskedWhateverTheRelaysHold) {
  SchedulerOptions o = Options();
  o.max_requests = 2;
  o.seed_requests = 1;
  SwarmScheduler s(8, o);
  s.AddNeighbour(0, true, 4);
  for (PeerId p = 1; p <= 3; ++p) {
    AddRelay(s, p);
    s.NeighbourState(p, {true, true, true, true, false, false, false, false});
  }
  EXPECT_TRUE(s.Next(1, kT0).has_value());
  EXPECT_TRUE(s.Next(2, kT0).has_value());
  EXPECT_EQ(s.Next(3, kT0), std::nullopt);  // the bound
  const auto c = s.Next(0, kT0);
  ASSERT_TRUE(c.has_value());
  EXPECT_GE(*c, 4u);                        // what no relay has
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);  // one at a time to a seed among relays
}

// A request sent ahead (the chunk before still arriving from that neighbour)
// takes one slot more than the neighbour has and is not held to the bound in
// all: it replaces the request that is ending.
TEST(SwarmScheduler, ARequestAheadTakesOneSlotMoreBeyondTheBound) {
  SchedulerOptions o = Options();
  o.max_requests = 1;
  SwarmScheduler s(8, o);
  AddRelay(s, 1, 1);
  AddRelay(s, 2, 1);
  s.NeighbourState(1, std::vector<bool>(8, true));
  s.NeighbourState(2, std::vector<bool>(8, true));
  ASSERT_TRUE(s.Next(1, kT0).has_value());
  EXPECT_EQ(s.Next(2, kT0), std::nullopt);        // the bound
  EXPECT_TRUE(s.Next(1, kT0, true).has_value());  // ahead: a second to 1
  EXPECT_EQ(s.Next(1, kT0, true), std::nullopt);  // only one more
  EXPECT_EQ(s.InFlight(1), 2);
}

// Without relays a seed keeps its whole pipeline.
TEST(SwarmScheduler, ASeedAloneKeepsItsWholePipeline) {
  SchedulerOptions o = Options();
  o.max_requests = 2;
  o.seed_requests = 1;
  SwarmScheduler s(16, o);
  s.AddNeighbour(0, true, 8);
  int asked = 0;
  while (s.Next(0, kT0)) ++asked;
  EXPECT_EQ(asked, 8);
}

TEST(SwarmScheduler, ASeedIsAskedOnlyForWhatNoRelayHas) {
  SwarmScheduler s(3, Options());
  s.AddNeighbour(0, true);
  AddRelay(s, 1);
  s.NeighbourHas(1, 0);
  s.NeighbourHas(1, 1);
  std::set<uint32_t> from_seed;
  while (auto c = s.Next(0, kT0)) from_seed.insert(*c);
  EXPECT_EQ(from_seed, std::set<uint32_t>{2});
  EXPECT_EQ(s.Next(1, kT0).has_value(), true);
}

TEST(SwarmScheduler, ANeighbourHasAtMostPipelineRequestsInFlight) {
  SchedulerOptions o = Options();
  o.pipeline = 3;
  SwarmScheduler s(10, o);
  s.AddNeighbour(0, true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.Next(0, kT0).has_value());
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);
  EXPECT_EQ(s.InFlight(0), 3);
}

TEST(SwarmScheduler, EndgameAsksASecondNeighbourAndTheFirstCopyCancelsTheOther) {
  SwarmScheduler s(2, Options());
  AddRelay(s, 1);
  AddRelay(s, 2);
  s.NeighbourState(1, {true, true});
  s.NeighbourState(2, {true, true});
  const uint32_t a = *s.Next(1, kT0);
  const uint32_t b = *s.Next(1, kT0);  // every missing chunk is in flight on relay 1
  ASSERT_NE(a, b);
  const auto copy = s.Next(2, kT0);  // endgame: a copy of one of them
  ASSERT_TRUE(copy.has_value());
  EXPECT_TRUE(*copy == a || *copy == b);
  std::vector<Cancel> cancels = s.Arrived(2, *copy);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].peer, 1u);
  EXPECT_EQ(cancels[0].chunk, *copy);
  EXPECT_EQ(s.InFlight(1), 1);
  EXPECT_TRUE(s.Arrived(1, *copy).empty());  // the late copy changes nothing
  EXPECT_EQ(s.missing(), 1u);
}

TEST(SwarmScheduler, AFailedRelayIsDroppedAndItsChunksAreAskedElsewhere) {
  SwarmScheduler s(2, Options());
  s.AddNeighbour(0, true);
  AddRelay(s, 1);
  s.NeighbourState(1, {true, true});
  const uint32_t c = *s.Next(1, kT0);
  s.Next(1, kT0);
  EXPECT_TRUE(s.Failed(1, c));
  EXPECT_EQ(s.neighbours(), 1u);
  EXPECT_EQ(s.NeighboursWanted(), Options().max_neighbours - 1);
  // Nobody else has them: the seed is asked for both now.
  std::set<uint32_t> from_seed;
  while (auto next = s.Next(0, kT0)) from_seed.insert(*next);
  EXPECT_EQ(from_seed.size(), 2u);
}

TEST(SwarmScheduler, ASeedIsDroppedOnlyAfterItsFailuresAddUp) {
  SwarmScheduler s(1, Options());
  s.AddNeighbour(0, true);
  for (int i = 1; i < Options().max_seed_failures; ++i) {
    EXPECT_FALSE(s.Failed(0, *s.Next(0, kT0)));
  }
  EXPECT_TRUE(s.Failed(0, *s.Next(0, kT0)));
  EXPECT_EQ(s.neighbours(), 0u);
  EXPECT_TRUE(s.Stuck());
}

TEST(SwarmScheduler, ADeferredChunkIsNotAskedOfTheSeedBeforeItsTime) {
  SwarmScheduler s(1, Options());
  s.AddNeighbour(0, true);
  s.Deferred(0, *s.Next(0, kT0), kT0 + seconds(5));
  EXPECT_EQ(s.Next(0, kT0 + seconds(4)), std::nullopt);
  EXPECT_EQ(s.Next(0, kT0 + seconds(5)), 0u);
}

// In the endgame too: a seed that deferred a chunk a relay is sending is not
// asked for a copy of it again at once (that was a request storm).
TEST(SwarmScheduler, AnEndgameCopyIsNotAskedOfASeedThatDeferredIt) {
  SwarmScheduler s(1, Options());
  s.AddNeighbour(0, true);
  AddRelay(s, 1);
  s.NeighbourHas(1, 0);
  ASSERT_EQ(s.Next(1, kT0), 0u);  // every missing chunk in flight: endgame
  ASSERT_EQ(s.Next(0, kT0), 0u);  // a copy from the seed
  s.Deferred(0, 0, kT0 + seconds(5));
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);
  EXPECT_EQ(s.Next(0, kT0 + seconds(5)), 0u);
}

TEST(SwarmScheduler, ABusyNeighbourIsLeftAloneUntilItsTimeAndItsChunkAskedElsewhere) {
  SwarmScheduler s(1, Options());
  AddRelay(s, 1);
  AddRelay(s, 2);
  s.NeighbourHas(1, 0);
  s.NeighbourHas(2, 0);
  const uint32_t c = *s.Next(1, kT0);
  s.Busy(1, c, kT0 + seconds(1));
  EXPECT_EQ(s.InFlight(1), 0);
  EXPECT_EQ(s.Next(1, kT0), std::nullopt);
  EXPECT_EQ(s.Next(2, kT0), c);
  s.Failed(2, c);  // relay 2 dropped
  EXPECT_EQ(s.Next(1, kT0 + seconds(1)), c);
}

// An idle connection waits for events, and for the end of a deferral: the
// scheduler names that time, which no event announces.
TEST(SwarmScheduler, TheEndOfADeferralIsTheNeighboursNextChance) {
  SwarmScheduler s(3, Options());
  s.AddNeighbour(0, true);
  AddRelay(s, 1);
  EXPECT_EQ(s.NextChance(0, kT0), SchedulerClock::time_point::max());
  // The seed deferred two chunks only it has: its chance is the earlier end.
  s.Deferred(0, *s.Next(0, kT0), kT0 + seconds(5));
  s.Deferred(0, *s.Next(0, kT0), kT0 + seconds(3));
  EXPECT_EQ(s.NextChance(0, kT0), kT0 + seconds(3));
  EXPECT_EQ(s.NextChance(0, kT0 + seconds(3)), kT0 + seconds(5));
  EXPECT_EQ(s.NextChance(0, kT0 + seconds(5)), SchedulerClock::time_point::max());
  // A relay told "busy": the end of its busy time.
  s.NeighbourHas(1, 2);
  s.Busy(1, *s.Next(1, kT0), kT0 + std::chrono::milliseconds(50));
  EXPECT_EQ(s.NextChance(1, kT0), kT0 + std::chrono::milliseconds(50));
  EXPECT_EQ(s.NextChance(1, kT0 + std::chrono::milliseconds(50)),
            SchedulerClock::time_point::max());
  EXPECT_EQ(s.NextChance(7, kT0), SchedulerClock::time_point::max());  // no such neighbour
}

TEST(SwarmScheduler, ADepartedRelaysChunksAreNoLongerCounted) {
  SwarmScheduler s(2, Options());
  s.AddNeighbour(0, true);
  AddRelay(s, 1);
  s.NeighbourState(1, {true, true});
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);  // a relay has both
  s.RemoveNeighbour(1);
  EXPECT_TRUE(s.Next(0, kT0).has_value());
}

// The neighbour to give up for a better one: the relay offering the fewest
// chunks this host still lacks (what it has already does not count); never a seed.
TEST(SwarmScheduler, TheLeastUsefulRelayOffersFewestOfTheMissingChunks) {
  SwarmScheduler s(4, Options());
  EXPECT_EQ(s.LeastUseful(), std::nullopt);
  s.AddNeighbour(0, true);
  EXPECT_EQ(s.LeastUseful(), std::nullopt);  // a seed is never replaced
  s.AlreadyHave(0);
  s.AlreadyHave(1);
  AddRelay(s, 1);
  AddRelay(s, 2);
  s.NeighbourState(1, {true, true, true, false});   // offers 1 missing chunk (2)
  s.NeighbourState(2, {false, false, true, true});  // offers 2 (2, 3)
  EXPECT_EQ(s.LeastUseful(), 1u);
  s.NeighbourHas(1, 3);
  s.RemoveNeighbour(2);
  AddRelay(s, 3);
  s.NeighbourState(3, {true, true, false, false});  // has only what this host has
  EXPECT_EQ(s.LeastUseful(), 3u);
}

TEST(SwarmScheduler, NeighboursAreBoundedAndResumedChunksNeverAsked) {
  SchedulerOptions o = Options();
  o.max_neighbours = 2;
  SwarmScheduler s(3, o);
  s.AlreadyHave(0);
  s.AlreadyHave(2);
  EXPECT_TRUE(s.AddNeighbour(1, true));
  EXPECT_FALSE(AddRelay(s, 1));  // known
  EXPECT_TRUE(AddRelay(s, 2));
  EXPECT_FALSE(AddRelay(s, 3));  // full
  EXPECT_EQ(s.NeighboursWanted(), 0u);
  EXPECT_EQ(s.Next(1, kT0), 1u);
  EXPECT_EQ(s.Next(1, kT0), std::nullopt);
  s.Arrived(1, 1);
  EXPECT_TRUE(s.Complete());
}

// A swarm in rounds: one seed and 40 fetchers, each with the seed and 6 random
// relays as neighbours; every host uploads one chunk a round; the seed defers a
// chunk it sent already. Every fetcher completes, the seed sends about one copy.
TEST(SwarmScheduler, ASwarmOfSchedulersCompletesWithTheSeedSendingAboutOneCopy) {
  constexpr uint32_t kChunks = 64;
  constexpr PeerId kSeed = 0;
  constexpr int kHosts = 40;
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<SwarmScheduler>> hosts(kHosts + 1);
  std::map<PeerId, std::vector<PeerId>> watchers;  // who hears what a host gets
  for (PeerId h = 1; h <= kHosts; ++h) {
    SchedulerOptions o = Options(h);
    o.max_neighbours = 7;
    hosts[h] = std::make_unique<SwarmScheduler>(kChunks, o);
    hosts[h]->AddNeighbour(kSeed, true);
    while (hosts[h]->NeighboursWanted() > 0) {
      const PeerId p = 1 + static_cast<PeerId>(rng() % kHosts);
      if (p != h && hosts[h]->AddNeighbour(p, false)) watchers[p].push_back(h);
    }
  }
  struct Request {
    PeerId from;
    uint32_t chunk;
  };
  std::vector<std::deque<Request>> queues(kHosts + 1);
  std::set<uint32_t> seed_sent;
  uint64_t seed_uploads = 0;
  int rounds = 0;
  auto done = [&] {
    for (PeerId h = 1; h <= kHosts; ++h) {
      if (!hosts[h]->Complete()) return false;
    }
    return true;
  };
  for (; !done() && rounds < 10 * static_cast<int>(kChunks); ++rounds) {
    const auto now = kT0 + seconds(rounds);
    for (PeerId h = 1; h <= kHosts; ++h) {
      for (PeerId p = 0; p <= kHosts; ++p) {
        while (auto c = hosts[h]->Next(p, now)) queues[p].push_back({h, *c});
      }
    }
    std::vector<std::pair<PeerId, Request>> delivered;  // (uploader, request)
    for (PeerId p = 0; p <= kHosts; ++p) {
      while (!queues[p].empty()) {
        Request r = queues[p].front();
        queues[p].pop_front();
        if (p == kSeed && seed_sent.count(r.chunk) != 0 && rounds % 20 != 0) {
          hosts[r.from]->Deferred(kSeed, r.chunk, now + seconds(20));
          continue;
        }
        delivered.push_back({p, r});
        break;  // one upload a round
      }
    }
    for (const auto& [p, r] : delivered) {
      if (p == kSeed) {
        ++seed_uploads;
        seed_sent.insert(r.chunk);
      }
      if (hosts[r.from]->Has(r.chunk)) continue;
      const PeerId from = r.from;
      for (const Cancel& c : hosts[from]->Arrived(p, r.chunk)) {
        auto& q = queues[c.peer];
        q.erase(
            std::remove_if(q.begin(), q.end(),
                           [&](const Request& x) { return x.from == from && x.chunk == c.chunk; }),
            q.end());
      }
      for (PeerId w : watchers[r.from]) hosts[w]->NeighbourHas(r.from, r.chunk);
    }
  }
  EXPECT_TRUE(done()) << "after " << rounds << " rounds";
  EXPECT_LE(seed_uploads, kChunks * 3 / 2) << "the seed sent " << seed_uploads << " chunks";
  EXPECT_LE(rounds, 3 * static_cast<int>(kChunks));
  std::printf("swarm of %d: %d rounds for %u chunks, the seed sent %llu chunks\n", kHosts, rounds,
              kChunks, static_cast<unsigned long long>(seed_uploads));
}

// A fetcher with room for neighbours asks a seed for relays at once, then after
// 50 ms, the wait doubling up to the state interval (fetchers that start
// together find each other within moments, not after a whole interval).
// Relays that offer everything and send nothing (anyone with the token can
// announce any number) do not keep the seed away while unproven: the seed is
// asked for what they offer, with its whole pipeline; once one delivers, its
// offers count and the seed is asked only for what it lacks.
TEST(SwarmScheduler, AnUnprovenRelaysOffersDoNotKeepTheSeedIdle) {
  SchedulerOptions o = Options();
  o.seed_requests = 1;
  SwarmScheduler s(8, o);
  s.AddNeighbour(0, true);
  for (PeerId r = 1; r <= 4; ++r) {
    ASSERT_TRUE(s.AddNeighbour(r, false));
    s.NeighbourState(r, std::vector<bool>(8, true));
  }
  EXPECT_EQ(s.Holders(3), 0);
  std::set<uint32_t> from_seed;
  while (auto c = s.Next(0, kT0)) from_seed.insert(*c);
  EXPECT_EQ(from_seed.size(), 4u);  // its whole pipeline, not one request
  EXPECT_FALSE(s.Stuck());
  for (uint32_t c : from_seed) s.Arrived(0, c);
  // Relay 1 is proven (it delivered, elsewhere): what it offers now counts and
  // keeps the seed away; the seed's requests are cut to seed_requests.
  s.Prove(1);
  for (uint32_t c = 0; c < 8; ++c) {
    if (!from_seed.count(c)) {
      EXPECT_EQ(s.Holders(c), 1) << c;
    }
  }
  EXPECT_EQ(s.Next(0, kT0), std::nullopt);
}

TEST(TrackerCadence, AsksAtOnceThenSoonThenEverLessOftenUpToTheInterval) {
  using std::chrono::milliseconds;
  TrackerCadence cadence(milliseconds(50), milliseconds(500));
  const auto t0 = SchedulerClock::time_point(std::chrono::seconds(100));
  EXPECT_EQ(cadence.wait(), milliseconds(500));  // before the first ask: the longest
  EXPECT_TRUE(cadence.Due(t0));
  std::vector<int64_t> asked_at;  // ms after t0, stepping the clock by 10 ms
  for (int64_t ms = 10; ms <= 2500; ms += 10) {
    if (cadence.Due(t0 + milliseconds(ms))) asked_at.push_back(ms);
  }
  const std::vector<int64_t> expected = {50, 150, 350, 750, 1250, 1750, 2250};
  EXPECT_EQ(asked_at, expected);
  EXPECT_EQ(cadence.wait(), milliseconds(500));
  TrackerCadence slow(milliseconds(50), milliseconds(20));  // a first wait beyond the most
  EXPECT_TRUE(slow.Due(t0));
  EXPECT_FALSE(slow.Due(t0 + milliseconds(19)));
  EXPECT_TRUE(slow.Due(t0 + milliseconds(20)));
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// FetchPolicy::in_order: files complete in the manifest's order when pulling
// from seeds alone, rarest first while relays help, in order again at the end.
TEST(SwarmScheduler, InOrderASeedAloneIsAskedForTheChunksInTheirOrder) {
  SchedulerOptions o = Options(3);
  o.in_order = true;
  SwarmScheduler s(8, o);
  s.AddNeighbour(1, true);
  s.AlreadyHave(1);
  for (uint32_t want : {0u, 2u, 3u, 4u}) EXPECT_EQ(s.Next(1, kT0), want);
  // One returned unanswered is asked again before those after it.
  s.Failed(1, 2);
  EXPECT_EQ(s.Next(1, kT0), 2u);
  // Without the option the same seed starts anywhere.
  std::set<uint32_t> first;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SwarmScheduler plain(64, Options(seed));
    plain.AddNeighbour(1, true);
    first.insert(*plain.Next(1, kT0));
  }
  EXPECT_GT(first.size(), 1u);
}

TEST(SwarmScheduler, InOrderRarestFirstWhileRelaysHelpThenInOrderForTheLastQuarter) {
  SchedulerOptions o = Options(5);
  o.in_order = true;
  SwarmScheduler s(8, o);
  ASSERT_TRUE(AddRelay(s, 1));
  ASSERT_TRUE(AddRelay(s, 2));
  // Chunk 5 only on relay 1, every other chunk on both.
  s.NeighbourState(1, std::vector<bool>(8, true));
  std::vector<bool> most(8, true);
  most[5] = false;
  s.NeighbourState(2, most);
  EXPECT_EQ(s.Next(1, kT0), 5u);                      // the rarest, not chunk 0
  for (uint32_t c = 0; c < 5; ++c) s.AlreadyHave(c);  // two left unrequested: 6 and 7
  EXPECT_EQ(s.Next(2, kT0), 6u);
  EXPECT_EQ(s.Next(2, kT0), 7u);
}

// Zones. Host keys are ZoneKey of names, so every host computes the same owner.
namespace zones {

// Not the clock's epoch: a time of zero means "not yet" to the scheduler.
const SchedulerClock::time_point kT1 = kT0 + std::chrono::hours(1);

// The chunks of `n` that `self` owns among `members` (ZoneKey of names).
std::set<uint32_t> Owned(const std::string& self, const std::vector<std::string>& members,
                         size_t n) {
  SwarmScheduler s(n, Options());
  s.SetZoned(ZoneKey(self));
  std::vector<std::pair<PeerId, uint64_t>> keys;
  for (size_t i = 0; i < members.size(); ++i) {
    keys.emplace_back(static_cast<PeerId>(100 + i), ZoneKey(members[i]));
  }
  s.SetZoneMembers(keys);
  std::set<uint32_t> owned;
  for (uint32_t c = 0; c < n; ++c) {
    if (s.Owns(c)) owned.insert(c);
  }
  return owned;
}

TEST(SwarmScheduler, EveryChunkHasExactlyOneOwnerInAZoneWhoseMembersKnowEachOther) {
  const std::vector<std::string> zone = {"b1:1", "b2:1", "b3:1", "b4:1"};
  std::map<uint32_t, int> owners;
  for (const std::string& self : zone) {
    std::vector<std::string> others;
    for (const std::string& m : zone) {
      if (m != self) others.push_back(m);
    }
    const std::set<uint32_t> mine = Owned(self, others, 400);
    // About a quarter each (rendezvous hashing spreads them).
    EXPECT_GT(mine.size(), 60u) << self;
    EXPECT_LT(mine.size(), 140u) << self;
    for (uint32_t c : mine) ++owners[c];
  }
  ASSERT_EQ(owners.size(), 400u);
  for (const auto& [chunk, count] : owners) EXPECT_EQ(count, 1) << "chunk " << chunk;
}

TEST(SwarmScheduler, ARemoteNeighbourIsAskedOnlyForChunksTheZoneLacksAndThisHostOwns) {
  const size_t n = 64;
  SwarmScheduler s(n, Options());
  s.SetZoned(ZoneKey("b1:1"));
  ASSERT_TRUE(AddRelay(s, 1));  // b2, of this zone
  s.SetRemote(1, false, ZoneKey("b2:1"));
  ASSERT_TRUE(AddRelay(s, 2));  // a1, of another zone
  s.SetRemote(2, true, ZoneKey("a1:1"));
  s.SetZoneMembers({{1, ZoneKey("b2:1")}});
  // b2 holds the first half; a1 holds everything.
  s.NeighbourState(2, std::vector<bool>(n, true));
  // Nothing is taken across until the members are known (a seed listed them).
  EXPECT_FALSE(s.Next(2, kT1));
  s.MembersKnown();
  std::vector<bool> half(n, false);
  for (size_t c = 0; c < n / 2; ++c) half[c] = true;
  s.NeighbourState(1, half);
  s.NeighbourState(2, std::vector<bool>(n, true));
  EXPECT_TRUE(s.ZoneHas(0));
  EXPECT_FALSE(s.ZoneHas(n - 1));
  // a1 is asked only for chunks of the second half that b1 owns (b2, still
  // fetching, owns the others).
  std::set<uint32_t> asked;
  for (int i = 0; i < 64; ++i) {
    std::optional<uint32_t> c = s.Next(2, kT1);
    if (!c) break;
    asked.insert(*c);
    s.Arrived(2, *c, kT1);
  }
  ASSERT_FALSE(asked.empty());
  for (uint32_t c : asked) {
    EXPECT_GE(c, n / 2) << "the zone has chunk " << c;
    EXPECT_TRUE(s.Owns(c)) << c;
  }
  size_t owned_missing = 0;
  for (uint32_t c = n / 2; c < n; ++c) owned_missing += s.Owns(c);
  EXPECT_EQ(asked.size(), owned_missing);
  EXPECT_EQ(s.crossed_other(), 0u);
  EXPECT_EQ(s.crossed_owned(), asked.size());
}

TEST(SwarmScheduler, AStarvedHostTakesAcrossAChunkAnotherMemberOwnsOnlyAfterThePatience) {
  SchedulerOptions o = Options();
  o.zone_patience = std::chrono::milliseconds(1000);
  SwarmScheduler s(2, o);
  s.SetZoned(ZoneKey("b1:1"));
  ASSERT_TRUE(AddRelay(s, 2));  // a1, of another zone, holding both chunks
  s.SetRemote(2, true, ZoneKey("a1:1"));
  s.NeighbourState(2, {true, true});
  // Another member of the zone, not a neighbour, that owns one of the two
  // chunks (the first name of b2:1, b3:1... that splits them).
  std::optional<uint32_t> mine;
  for (int k = 2; k < 100 && !mine; ++k) {
    s.SetZoneMembers({{7, ZoneKey("b" + std::to_string(k) + ":1")}});
    if (s.Owns(0) != s.Owns(1)) mine = s.Owns(0) ? 0 : 1;
  }
  ASSERT_TRUE(mine);
  const uint32_t theirs = 1 - *mine;
  s.MembersKnown();
  ASSERT_EQ(s.Next(2, kT1), *mine);
  s.Arrived(2, *mine, kT1);
  // b2's chunk: not before a whole patience passed with nothing arriving.
  EXPECT_FALSE(s.Next(2, kT1 + std::chrono::milliseconds(999)));
  EXPECT_EQ(s.NextChance(2, kT1 + std::chrono::milliseconds(999)),
            kT1 + std::chrono::milliseconds(1000));
  EXPECT_EQ(s.Next(2, kT1 + std::chrono::milliseconds(1000)), theirs);
  EXPECT_EQ(s.crossed_other(), 1u);
}

TEST(SwarmScheduler, OnceStarvedAHostTakesTheChunksOfAMemberThatLeftOneAfterAnother) {
  SchedulerOptions o = Options();
  o.zone_patience = std::chrono::milliseconds(1000);
  const size_t n = 8;
  SwarmScheduler s(n, o);
  s.SetZoned(ZoneKey("b1:1"));
  ASSERT_TRUE(AddRelay(s, 2));  // a1, of another zone, holding everything
  s.SetRemote(2, true, ZoneKey("a1:1"));
  s.NeighbourState(2, std::vector<bool>(n, true));
  // Members that were listed once and never come (not neighbours), owning
  // most chunks.
  std::vector<std::pair<PeerId, uint64_t>> gone;
  for (int k = 0; k < 16; ++k) gone.emplace_back(100 + k, ZoneKey("g" + std::to_string(k) + ":1"));
  s.SetZoneMembers(gone);
  s.MembersKnown();
  auto t = kT1;
  // What b1 owns comes at once; then nothing until it starves (4 patiences
  // covers a host that owned none); then the rest, each as soon as the one
  // before arrived.
  while (std::optional<uint32_t> c = s.Next(2, t)) s.Arrived(2, *c, t);
  ASSERT_FALSE(s.Complete());
  t += std::chrono::milliseconds(4000);
  while (std::optional<uint32_t> c = s.Next(2, t)) {
    s.Arrived(2, *c, t);
    t += std::chrono::milliseconds(10);
  }
  EXPECT_TRUE(s.Complete());
  EXPECT_GT(s.crossed_other(), 0u);
}

TEST(SwarmScheduler, AHostWhoseZoneHasASeedAsksNeighboursOfOtherZonesForNothing) {
  const size_t n = 16;
  SwarmScheduler s(n, Options());
  s.SetZoned(ZoneKey("a1:1"));
  ASSERT_TRUE(s.AddNeighbour(0, true));  // the origin, of this zone
  s.SetRemote(0, false, ZoneKey("origin:1"));
  ASSERT_TRUE(AddRelay(s, 1));  // b1, of another zone, holding everything
  s.SetRemote(1, true, ZoneKey("b1:1"));
  s.NeighbourState(1, std::vector<bool>(n, true));
  // Even once starved: the zone's seed has every chunk.
  EXPECT_FALSE(s.Next(1, kT1 + std::chrono::hours(1)));
  // The seed is asked, though a relay of another zone has the chunk.
  EXPECT_TRUE(s.Next(0, kT1));
}

}  // namespace zones

}  // namespace
}  // namespace seedd
