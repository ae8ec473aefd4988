// The fetcher's swarm protocol (proto/fetcher_core.h), event by event with a
// fake clock: claims and their age, what each answer means, the neighbour set,
// the bounds on sources, the tracker cadence, and when a swarm is hopeless.
#include "kinds/weights/proto/fetcher_core.h"

#include <gtest/gtest.h>

namespace seedd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

const SchedulerClock::time_point kT0 = SchedulerClock::time_point{} + std::chrono::hours(1);

FetcherCore Core(size_t chunks, uint64_t chunk_bytes, FetchPolicy p = {}, bool relaying = false) {
  return FetcherCore(std::vector<uint64_t>(chunks, chunk_bytes), p, relaying, /*random_seed=*/7);
}

TEST(FetcherCore, AClaimedChunkIsAskedOfTheSeedPlainlyOnceTheClaimOutlivesItsLimit) {
  // 1 MiB at the 64 KiB/s floor: a claim is honoured for 16 s.
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.SourcesKnown();
  ASSERT_EQ(core.FillNeighbours().size(), 1u);
  const auto limit = core.ClaimLimit(0);
  EXPECT_EQ(limit, std::chrono::seconds(16));

  std::optional<Taken> t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0), NotThereVerdict::kDeferred);
  // Deferred for kClaimRetry, then asked with a claim again.
  EXPECT_FALSE(core.Next(seed, kT0 + kClaimRetry - microseconds(1)));
  t = core.Next(seed, kT0 + kClaimRetry);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);
  // One microsecond short of the limit the claim still stands...
  const auto short_of = kT0 + limit - microseconds(1);
  EXPECT_EQ(core.OnClaimed(seed, 0, short_of), NotThereVerdict::kDeferred);
  t = core.Next(seed, short_of + kClaimRetry);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);
  // ...and past it the seed is asked plainly, at once.
  EXPECT_EQ(core.OnClaimed(seed, 0, short_of + kClaimRetry), NotThereVerdict::kForcedOld);
  t = core.Next(seed, short_of + kClaimRetry);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->index, 0u);
  EXPECT_FALSE(t->claim);
}

TEST(FetcherCore, AClaimIsPassedOverExactlyAtItsLimit) {
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.FillNeighbours();
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0), NotThereVerdict::kDeferred);
  const auto limit = core.ClaimLimit(0);
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0 + limit - microseconds(1)), NotThereVerdict::kDeferred);
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0 + limit), NotThereVerdict::kForcedOld);
}

TEST(FetcherCore, TheClaimLimitIsBoundedBelowAndAbove) {
  FetcherCore small = Core(1, 4096);
  EXPECT_EQ(small.ClaimLimit(0), kForceAfter);
  FetcherCore huge = Core(1, uint64_t{1} << 30);
  EXPECT_EQ(huge.ClaimLimit(0), kForceAfterAtMost);
}

TEST(FetcherCore, AClaimIsNotPassedOverWhileANeighbourOffersTheChunk) {
  FetcherCore core = Core(2, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId relay = *core.AddSource("relay:1", false);
  core.SourcesKnown();
  ASSERT_EQ(core.FillNeighbours().size(), 2u);
  core.OnState(relay, {true, false});
  ASSERT_TRUE(core.Next(relay, kT0));  // proves nothing yet; the relay offers chunk 0
  core.OnArrived(relay, 0);            // proven
  core.OnState(relay, {true, true});
  // The seed claimed chunk 1 long ago, but a neighbour offers it: no force.
  EXPECT_EQ(core.OnClaimed(seed, 1, kT0), NotThereVerdict::kDeferred);
  EXPECT_EQ(core.OnClaimed(seed, 1, kT0 + core.ClaimLimit(1) * 2), NotThereVerdict::kDeferred);
}

TEST(FetcherCore, WithRelaysNamedAndNoneLeftAClaimIsAskedPlainlyAtOnce) {
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId relay = *core.AddSource("relay:1", false);
  core.SourcesKnown();
  core.FillNeighbours();
  ASSERT_TRUE(core.OnFailed(relay));  // a relay is dropped at its first failure
  EXPECT_TRUE(core.Dropped(relay));
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0), NotThereVerdict::kForcedNoRelay);
  std::optional<Taken> t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->claim);
}

TEST(FetcherCore, OnceEveryRelayNamedHasFailedTheSeedIsAskedPlainlyWithNoClaimedAnswerFirst) {
  // The seed named two relays that stopped moments ago (it still holds their
  // claims); both refuse connections here.
  FetcherCore core = Core(4, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId a = *core.AddSource("a:1", false);
  const PeerId b = *core.AddSource("b:1", false);
  core.SourcesKnown();
  core.FillNeighbours();
  std::optional<Taken> t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);  // a live relay may hold the claim
  ASSERT_TRUE(core.OnFailed(a));
  t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);  // b may yet answer
  ASSERT_TRUE(core.OnFailed(b));
  t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->claim);  // every chunk from here, without a "claimed" round trip
}

TEST(FetcherCore, ARelayNamedAfterEveryOneFailedBringsClaimsBack) {
  FetcherCore core = Core(4, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId a = *core.AddSource("a:1", false);
  core.SourcesKnown();
  core.FillNeighbours();
  ASSERT_TRUE(core.OnFailed(a));
  std::optional<Taken> t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->claim);
  ASSERT_TRUE(core.AddSource("c:1", false).has_value());
  core.FillNeighbours();
  t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->claim);
}

TEST(FetcherCore, BeforeAnyRelayIsNamedAClaimIsWaitedFor) {
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.SourcesKnown();
  core.FillNeighbours();
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0), NotThereVerdict::kDeferred);
}

TEST(FetcherCore, TheHolderOfAClaimNoNeighbourOffersIsFollowedInPlaceOfTheLeastUsefulRelay) {
  FetchPolicy p;
  p.max_neighbours = 3;  // the seed and two relays
  FetcherCore core = Core(4, 1 << 20, p);
  core.SetSelf("me:1");
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId a = *core.AddSource("a:1", false);
  const PeerId b = *core.AddSource("b:1", false);
  ASSERT_EQ(core.FillNeighbours().size(), 3u);
  core.OnState(a, {true, true, false, false});  // a offers chunks 0 and 1
  core.OnState(b, {false, false, false, false});
  // The seed sent chunk 3 to "holder:1", which no neighbour is.
  EXPECT_EQ(core.OnClaimed(seed, 3, kT0, "holder:1"), NotThereVerdict::kDeferred);
  EXPECT_FALSE(core.Active(b));  // offers least: retired, not dropped
  EXPECT_FALSE(core.Dropped(b));
  EXPECT_TRUE(core.Active(a));
  std::vector<NewNeighbour> started = core.FillNeighbours();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(core.Name(started[0].id), "holder:1");
  EXPECT_EQ(core.follows(), 1u);
  // A retired relay is not picked again at random...
  core.OnFailed(started[0].id);
  std::vector<NewNeighbour> refill = core.FillNeighbours();
  EXPECT_TRUE(refill.empty());
  // ...but is followed when it holds a claim.
  core.OnClaimed(seed, 2, kT0, "b:1");
  refill = core.FillNeighbours();
  ASSERT_EQ(refill.size(), 1u);
  EXPECT_EQ(refill[0].id, b);
}

TEST(FetcherCore, AHolderAboutToBeFollowedIsWaitedForNotTakenForNoRelayLeft) {
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.SourcesKnown();
  core.FillNeighbours();
  // The first relay this fetcher hears of is the claim's holder: followed, so
  // the claim is waited for (the "no relay left" rule is for holders that are
  // gone, not for one about to be a neighbour).
  EXPECT_EQ(core.OnClaimed(seed, 0, kT0, "holder:1"), NotThereVerdict::kDeferred);
  ASSERT_EQ(core.FillNeighbours().size(), 1u);
}

TEST(FetcherCore, AClaimWhoseHolderWasDroppedHereIsAskedPlainlyAtOnce) {
  FetcherCore core = Core(2, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId a = *core.AddSource("a:1", false);
  const PeerId dead = *core.AddSource("dead:1", false);
  core.SourcesKnown();
  core.FillNeighbours();
  ASSERT_TRUE(core.OnFailed(dead));  // connection refused: dropped
  EXPECT_TRUE(core.Active(a));       // a relay neighbour remains
  EXPECT_EQ(core.OnClaimed(seed, 1, kT0, "dead:1"), NotThereVerdict::kForcedNoRelay);
  std::optional<Taken> t = core.Next(seed, kT0);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->claim);
}

TEST(FetcherCore, AClaimHolderIsNotFollowedWhenANeighbourOffersTheChunkOrItIsThisHost) {
  FetchPolicy p;
  p.max_neighbours = 2;
  FetcherCore core = Core(2, 1 << 20, p);
  core.SetSelf("me:1");
  const PeerId seed = *core.AddSource("origin:1", true);
  const PeerId a = *core.AddSource("a:1", false);
  core.FillNeighbours();
  core.OnState(a, {true, false});
  ASSERT_TRUE(core.Next(a, kT0));
  core.OnArrived(a, 0);  // a is proven
  core.OnState(a, {true, true});
  core.OnClaimed(seed, 1, kT0, "holder:1");  // a offers chunk 1
  core.OnClaimed(seed, 1, kT0, "me:1");
  EXPECT_TRUE(core.Active(a));
  EXPECT_TRUE(core.FillNeighbours().empty());
  EXPECT_EQ(core.follows(), 0u);
}

TEST(FetcherCore, ARelayThatAnswersNotHereOrClaimedIsDropped) {
  for (bool claimed : {false, true}) {
    FetcherCore core = Core(1, 1 << 20);
    core.AddSource("origin:1", true);
    const PeerId relay = *core.AddSource("relay:1", false);
    core.FillNeighbours();
    core.OnState(relay, {true});
    const NotThereVerdict v =
        claimed ? core.OnClaimed(relay, 0, kT0) : core.OnNotThere(relay, 0, kT0);
    EXPECT_EQ(v, NotThereVerdict::kRelayLied);
    EXPECT_TRUE(core.Dropped(relay));
  }
}

TEST(FetcherCore, ASeedStillFetchingIsAskedAgainButOneThatOfferedTheChunkIsDropped) {
  FetcherCore core = Core(4, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.FillNeighbours();
  // Its state is not known: "not here" only says it lacks the chunk.
  EXPECT_EQ(core.OnNotThere(seed, 0, kT0), NotThereVerdict::kDeferred);
  EXPECT_FALSE(core.Dropped(seed));
  // It said it has chunks 1-3, then does not serve them: broken, and dropped
  // at its third failure (a seed was given by the user).
  core.OnState(seed, {false, true, true, true});
  EXPECT_EQ(core.OnNotThere(seed, 1, kT0), NotThereVerdict::kSeedBroken);
  EXPECT_EQ(core.OnNotThere(seed, 2, kT0), NotThereVerdict::kSeedBroken);
  EXPECT_FALSE(core.Dropped(seed));
  EXPECT_EQ(core.OnNotThere(seed, 3, kT0), NotThereVerdict::kSeedBroken);
  EXPECT_TRUE(core.Dropped(seed));
}

// A relaying fetcher of 16 chunks with three neighbours (the seed and relays a
// and b) that rotates every `rotate_after` chunks.
struct Rotating {
  explicit Rotating(uint32_t rotate_after) : core(Make(rotate_after)) {
    seed = *core.AddSource("origin:1", true);
    a = *core.AddSource("a:1", false);
    b = *core.AddSource("b:1", false);
    EXPECT_EQ(core.FillNeighbours().size(), 3u);
  }
  static FetcherCore Make(uint32_t rotate_after) {
    FetchPolicy p;
    p.max_neighbours = 3;
    p.rotate_after = rotate_after;
    return Core(16, 1 << 20, p, /*relaying=*/true);
  }
  FetcherCore core;
  PeerId seed = 0, a = 0, b = 0;
};

TEST(FetcherCore, ARelayNeighbourThatSentNothingForAWholeRotationIsReplacedByACandidate) {
  Rotating r(4);
  FetcherCore& core = r.core;
  const PeerId seed = r.seed, a = r.a, b = r.b;
  const PeerId c = *core.AddSource("c:1", false);  // a candidate
  // The first window began before a and b were neighbours: nobody is judged.
  for (uint32_t i = 0; i < 4; ++i) core.OnArrived(seed, i);
  EXPECT_EQ(core.rotations(), 0u);
  // A whole window in which a sent and b did not: b is retired, not dropped.
  core.OnArrived(a, 4);
  for (uint32_t i = 5; i < 7; ++i) core.OnArrived(seed, i);
  EXPECT_EQ(core.rotations(), 0u);  // one chunk short
  core.OnArrived(seed, 7);
  EXPECT_EQ(core.rotations(), 1u);
  EXPECT_EQ(core.last_rotated(), b);
  EXPECT_FALSE(core.Active(b));
  EXPECT_FALSE(core.Dropped(b));
  EXPECT_TRUE(core.Active(a));
  std::vector<NewNeighbour> started = core.FillNeighbours();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].id, c);
  // c joined within the window now ending: not judged by it, though it sent nothing.
  core.OnArrived(a, 8);
  for (uint32_t i = 9; i < 12; ++i) core.OnArrived(seed, i);
  EXPECT_EQ(core.rotations(), 1u);
  EXPECT_TRUE(core.Active(c));
}

TEST(FetcherCore, ARelayOfferingWhatIsLackedIsRotatedOutOnlyOnceItWasBusyAndSentNothing) {
  Rotating r(4);
  FetcherCore& core = r.core;
  const PeerId seed = r.seed, a = r.a, b = r.b;
  core.AddSource("c:1", false);
  core.OnState(b, std::vector<bool>(16, true));              // b has every chunk
  for (uint32_t i = 0; i < 4; ++i) core.OnArrived(seed, i);  // nobody judged yet
  // A whole window in which b, offering what is lacked, was not asked: kept.
  for (uint32_t i = 4; i < 8; ++i) core.OnArrived(a, i);
  EXPECT_EQ(core.rotations(), 0u);
  EXPECT_TRUE(core.Active(b));
  // A window in which b answered busy and sent nothing: retired.
  core.OnBusy(b, 8, kT0 + milliseconds(50));
  for (uint32_t i = 8; i < 12; ++i) core.OnArrived(a, i);
  EXPECT_EQ(core.rotations(), 1u);
  EXPECT_EQ(core.last_rotated(), b);
  EXPECT_FALSE(core.Active(b));
  EXPECT_FALSE(core.Dropped(b));
}

// A full set asks for relays only once a rotation found a neighbour to retire
// and no candidate (relays that joined after the set filled are heard of
// then); it stops asking once one is learnt, and the next rotation takes it.
TEST(FetcherCore, ARotationWithNoCandidateAsksForRelaysUntilOneIsLearnt) {
  Rotating r(2);
  FetcherCore& core = r.core;
  const PeerId seed = r.seed, a = r.a, b = r.b;
  EXPECT_FALSE(core.WantsRelays());  // the set is full
  // Both relays send: nobody to retire, nothing asked.
  for (uint32_t i = 0; i < 2; ++i) core.OnArrived(seed, i);  // nobody judged yet
  core.OnArrived(a, 2);
  core.OnArrived(b, 3);
  EXPECT_FALSE(core.WantsRelays());
  EXPECT_FALSE(core.WantRelays(kT0));
  // b silent and busy for a window, no candidate: kept, and relays wanted.
  core.OnBusy(b, 4, kT0 + milliseconds(50));
  core.OnArrived(a, 4);
  core.OnArrived(a, 5);
  EXPECT_EQ(core.rotations(), 0u);
  EXPECT_TRUE(core.Active(b));
  EXPECT_TRUE(core.WantsRelays());
  EXPECT_TRUE(core.WantRelays(kT0));
  EXPECT_FALSE(core.WantRelays(kT0 + microseconds(1)));  // at the tracker's cadence
  // A seed's state names a relay: no more asking; the next window retires b.
  const PeerId c = *core.AddSource("c:1", false);
  EXPECT_FALSE(core.WantsRelays());
  core.OnBusy(b, 6, kT0 + milliseconds(100));
  core.OnArrived(a, 6);
  core.OnArrived(a, 7);
  EXPECT_EQ(core.rotations(), 1u);
  EXPECT_EQ(core.last_rotated(), b);
  std::vector<NewNeighbour> started = core.FillNeighbours();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].id, c);
  EXPECT_FALSE(core.WantsRelays());
}

TEST(FetcherCore, NoRelayIsRotatedOutWithoutACandidateNorWhileEachSendsNorEver) {
  Rotating r(2);
  FetcherCore& core = r.core;
  const PeerId seed = r.seed, a = r.a, b = r.b;
  // No candidate: b, silent for three windows, stays.
  for (uint32_t i = 0; i < 6; ++i) core.OnArrived(seed, i);
  EXPECT_EQ(core.rotations(), 0u);
  EXPECT_TRUE(core.Active(b));
  // A candidate, but each relay sends in every window.
  core.AddSource("c:1", false);
  for (uint32_t i = 6; i < 12; i += 2) {
    core.OnArrived(a, i);
    core.OnArrived(b, i + 1);
  }
  EXPECT_EQ(core.rotations(), 0u);
  // A seed is never rotated out, whatever it sent.
  for (uint32_t i = 12; i < 16; i += 2) {
    core.OnArrived(a, i);
    core.OnArrived(b, i + 1);
  }
  EXPECT_TRUE(core.Active(seed));
  EXPECT_EQ(core.rotations(), 0u);

  // rotate_after 0: never.
  Rotating never(0);
  never.core.AddSource("c:1", false);
  for (uint32_t i = 0; i < 15; ++i) never.core.OnArrived(never.seed, i);
  EXPECT_EQ(never.core.rotations(), 0u);
}

TEST(FetcherCore, NeighboursAreSeedsFirstThenRelaysUpToTheBound) {
  FetchPolicy p;
  p.max_neighbours = 3;
  FetcherCore core = Core(4, 1 << 20, p);
  core.AddSource("relay:1", false);
  core.AddSource("relay:2", false);
  core.AddSource("origin:1", true);
  core.AddSource("origin:2", true);
  std::vector<NewNeighbour> started = core.FillNeighbours();
  ASSERT_EQ(started.size(), 3u);
  EXPECT_TRUE(core.IsSeed(started[0].id));
  EXPECT_TRUE(core.IsSeed(started[1].id));
  EXPECT_FALSE(core.IsSeed(started[2].id));
  EXPECT_TRUE(core.FillNeighbours().empty());
  // A dropped relay makes room for the candidate.
  ASSERT_TRUE(core.OnFailed(started[2].id));
  std::vector<NewNeighbour> more = core.FillNeighbours();
  ASSERT_EQ(more.size(), 1u);
  EXPECT_FALSE(core.IsSeed(more[0].id));
  EXPECT_NE(more[0].id, started[2].id);
}

// Fetchers that start a few hundred ms apart learn the first relays first: had
// each filled its set with all it knew, every fetcher would fetch from those
// few and the relays that started last from almost none (bench/fanout.sh, 32
// targets: 9 daemons each the neighbour of 31 others, 16 of 1 to 8). Half of
// the relays known at most, a few at least, and more as more are learnt.
TEST(FetcherCore, AFetcherTakesAtMostHalfTheRelaysItKnowsAsNeighbours) {
  FetchPolicy p;
  p.max_neighbours = 16;
  p.neighbour_share = 0.5;
  p.min_relay_neighbours = 4;
  FetcherCore core = Core(64, 1 << 20, p, /*relaying=*/true);
  core.AddSource("origin:1", true);
  for (int i = 1; i <= 3; ++i) core.AddSource("relay:" + std::to_string(i), false);
  auto relays = [](const std::vector<NewNeighbour>& started, const FetcherCore& c) {
    size_t n = 0;
    for (const NewNeighbour& s : started) n += !c.IsSeed(s.id);
    return n;
  };
  EXPECT_EQ(relays(core.FillNeighbours(), core), 3u);  // fewer than the least: all
  for (int i = 4; i <= 10; ++i) core.AddSource("relay:" + std::to_string(i), false);
  EXPECT_EQ(relays(core.FillNeighbours(), core), 2u);  // 5 of the 10 known
  EXPECT_TRUE(core.WantsRelays());                     // the set has room: ask for more
  for (int i = 11; i <= 40; ++i) core.AddSource("relay:" + std::to_string(i), false);
  EXPECT_EQ(relays(core.FillNeighbours(), core), 10u);  // up to the set's bound: 1 seed, 15 relays
  EXPECT_FALSE(core.WantsRelays());
}

TEST(FetcherCore, ARelayingFetcherAsksASeedOneChunkAtATimeOnAtMostTwoConnections) {
  FetcherCore relaying = Core(4, 1 << 20, {}, /*relaying=*/true);
  relaying.AddSource("origin:1", true);
  std::vector<NewNeighbour> a = relaying.FillNeighbours();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].depth, 1);
  EXPECT_EQ(a[0].connections, 2);
  FetcherCore plain = Core(4, 1 << 20);
  plain.AddSource("origin:1", true);
  std::vector<NewNeighbour> b = plain.FillNeighbours();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].depth, FetchPolicy{}.small_chunk_pipeline);
  EXPECT_EQ(b[0].connections, FetchPolicy{}.connections_per_source);
}

TEST(FetcherCore, SourcesAreKnownOnceAndBounded) {
  FetcherCore core = Core(1, 1 << 20);
  ASSERT_TRUE(core.AddSource("relay:0", false));
  EXPECT_FALSE(core.AddSource("relay:0", false));
  for (size_t i = 1; i < kMaxSources; ++i) {
    ASSERT_TRUE(core.AddSource("relay:" + std::to_string(i), false));
  }
  EXPECT_FALSE(core.AddSource("relay:more", false));
  // Dropped ones do not count against the live bound.
  for (const NewNeighbour& n : core.FillNeighbours()) ASSERT_TRUE(core.OnFailed(n.id));
  EXPECT_TRUE(core.AddSource("relay:more", false));
}

TEST(FetcherCore, ASeedIsAskedForRelaysAfter50MsThenTheWaitDoublesToTheStateInterval) {
  FetcherCore core = Core(1, 1 << 20);
  core.AddSource("origin:1", true);
  core.FillNeighbours();
  EXPECT_TRUE(core.WantRelays(kT0));
  EXPECT_FALSE(core.WantRelays(kT0 + kFirstRelayAsk - microseconds(1)));
  EXPECT_TRUE(core.WantRelays(kT0 + kFirstRelayAsk));
  EXPECT_FALSE(core.WantRelays(kT0 + kFirstRelayAsk + milliseconds(99)));
  EXPECT_TRUE(core.WantRelays(kT0 + kFirstRelayAsk + milliseconds(100)));
  EXPECT_EQ(core.RelayWait(), milliseconds(200));
}

TEST(FetcherCore, TheSwarmIsHopelessOnlyOnceEverySourceIsKnownAndHasSaidWhatItHas) {
  FetcherCore core = Core(2, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.FillNeighbours();
  core.OnState(seed, {true, true});
  ASSERT_TRUE(core.Next(seed, kT0));
  ASSERT_TRUE(core.Next(seed, kT0));
  core.OnArrived(seed, 0);
  // The seed offered chunk 1 and does not serve it (a file changed under it).
  EXPECT_EQ(core.OnNotThere(seed, 1, kT0), NotThereVerdict::kSeedBroken);
  EXPECT_FALSE(core.CheckHope(kT0));  // the manifest's relays are not known yet
  core.SourcesKnown();
  const PeerId relay = *core.AddSource("relay:1", false);
  EXPECT_FALSE(core.CheckHope(kT0));  // a candidate may still help
  core.FillNeighbours();
  EXPECT_FALSE(core.CheckHope(kT0));  // its state is not known
  core.OnState(relay, {true, true});  // it has everything, and will never send chunk 1
  EXPECT_EQ(core.OnNotThere(relay, 1, kT0), NotThereVerdict::kRelayLied);
  EXPECT_TRUE(core.CheckHope(kT0));  // every source had its say: nobody else will send it
  EXPECT_TRUE(core.Finished());
  EXPECT_FALSE(core.Complete());
  EXPECT_FALSE(core.Next(seed, kT0));
}

TEST(FetcherCore, AFetcherThatCaughtUpWithASourceStillFetchingWaitsForItToGrow) {
  FetchPolicy p;
  p.growth_patience = milliseconds(60000);
  FetcherCore core = Core(3, 1 << 20, p);
  const PeerId seed = *core.AddSource("origin:1", true);  // a daemon relaying its own pull
  core.SourcesKnown();
  core.FillNeighbours();
  core.OnState(seed, {true, false, false});
  ASSERT_TRUE(core.Next(seed, kT0));
  core.OnArrived(seed, 0);
  EXPECT_FALSE(core.Next(seed, kT0));  // caught up: nothing to ask for
  EXPECT_FALSE(core.CheckHope(kT0));
  EXPECT_FALSE(core.CheckHope(kT0 + p.growth_patience - microseconds(1)));
  // It verified chunk 1: the patience starts again from the next look.
  core.OnHave(seed, 1);
  const auto later = kT0 + p.growth_patience - microseconds(1);
  ASSERT_TRUE(core.Next(seed, later));
  core.OnArrived(seed, 1);
  EXPECT_FALSE(core.CheckHope(later));
  EXPECT_FALSE(core.CheckHope(later + p.growth_patience - microseconds(1)));
  // A state that says no more than it said before is no growth.
  core.OnState(seed, {true, true, false});
  EXPECT_FALSE(core.CheckHope(later + p.growth_patience - microseconds(1)));
  EXPECT_TRUE(core.CheckHope(later + p.growth_patience));
  EXPECT_TRUE(core.Finished());
  EXPECT_FALSE(core.Complete());
}

// A watch names the chunks this host still wants; a neighbour's answer then
// names only those, and its count of chunks verified is what shows it growing.
TEST(FetcherCore, TheMissingBitmapLosesEachChunkVerifiedAndACountedSourceGrows) {
  FetchPolicy p;
  p.growth_patience = milliseconds(60000);
  FetcherCore core = Core(10, 1 << 20, p);
  EXPECT_EQ(core.MissingBitmap(), std::string("\xff\xc0", 2));
  core.Resumed(1);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.SourcesKnown();
  core.FillNeighbours();
  std::vector<bool> offered(10, false);
  offered[0] = offered[9] = true;
  core.OnState(seed, offered);
  for (int i = 0; i < 2; ++i) {
    const auto t = core.Next(seed, kT0);
    ASSERT_TRUE(t);
    core.OnArrived(seed, t->index);
  }
  EXPECT_EQ(core.MissingBitmap(), std::string("\x3f\x80", 2));
  // Caught up with a source still fetching: hopeful while its count grows,
  // though each chunk it gains is one this host has.
  EXPECT_FALSE(core.CheckHope(kT0));
  core.OnVerifiedCount(seed, 3);
  EXPECT_FALSE(core.CheckHope(kT0 + p.growth_patience));
  core.OnVerifiedCount(seed, 3);  // no more than it said before
  EXPECT_FALSE(core.CheckHope(kT0 + 2 * p.growth_patience - microseconds(1)));
  EXPECT_TRUE(core.CheckHope(kT0 + 2 * p.growth_patience));
}

// Neighbours' counts that put this host behind them free more requests at
// once (the catch-up rule): the driver is told, to offer them to its idle
// connections, since no answer naming a chunk woke any.
TEST(FetcherCore, ACountThatPutsThisHostBehindItsNeighboursFreesRequests) {
  FetchPolicy p;
  p.swarm_requests = 2;
  p.swarm_catch_up = 2;
  FetcherCore core = Core(64, 1 << 20, p, /*relaying=*/true);
  std::vector<PeerId> relays;
  for (int i = 1; i <= 4; ++i)
    relays.push_back(*core.AddSource("relay:" + std::to_string(i), false));
  core.FillNeighbours();
  for (PeerId r : relays) {
    std::vector<bool> theirs(64, false);
    theirs[r] = true;
    core.OnState(r, theirs);
    const auto t = core.Next(r, kT0);
    ASSERT_TRUE(t);
    core.OnArrived(r, t->index);  // proven
  }
  const int free = core.FreeRelayRequests();
  EXPECT_FALSE(core.OnVerifiedCount(relays[0], 3));  // not behind yet
  EXPECT_EQ(core.FreeRelayRequests(), free);
  bool freed = false;
  for (PeerId r : relays) freed = core.OnVerifiedCount(r, 40) || freed;
  EXPECT_TRUE(freed);
  EXPECT_EQ(core.FreeRelayRequests(), free + 2);
}

TEST(FetcherCore, OneCopyOfAChunkIsWrittenAtATimeAndNoneOnceVerified) {
  using Turn = FetcherCore::WriteTurn;
  FetcherCore core = Core(1, 1 << 20);
  const PeerId seed = *core.AddSource("origin:1", true);
  core.FillNeighbours();
  ASSERT_TRUE(core.Next(seed, kT0));
  EXPECT_EQ(core.BeginWrite(0), Turn::kWrite);
  EXPECT_EQ(core.BeginWrite(0), Turn::kWriting);  // a second copy: held aside, not written
  core.EndWrite(0);
  core.OnArrived(seed, 0);
  EXPECT_EQ(core.BeginWrite(0), Turn::kHave);
  EXPECT_TRUE(core.Complete());
}

TEST(FetcherCore, AZonedFetcherTakesRelaysOfItsZoneFirstAndFewOfOthers) {
  FetchPolicy p;
  p.max_neighbours = 8;
  p.remote_neighbours = 2;
  p.neighbour_share = 1;  // every relay known may be a neighbour: the zones' rule alone
  FetcherCore core = Core(16, 1 << 20, p, /*relaying=*/true);
  core.SetSelf("b0:1");
  core.SetZone("b");
  ASSERT_TRUE(core.AddSource("origin:1", true));
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(core.AddSource("a" + std::to_string(i) + ":1", false, std::string("a")));
  }
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(core.AddSource("b" + std::to_string(i) + ":1", false, std::string("b")));
  }
  core.SourcesKnown();
  std::vector<NewNeighbour> started = core.FillNeighbours();
  // The seed, the four of zone b, and two of zone a: the set keeps room.
  int seeds = 0, local = 0, remote = 0;
  for (const NewNeighbour& n : started) {
    const std::string& name = core.Name(n.id);
    if (core.IsSeed(n.id)) {
      ++seeds;
    } else if (name[0] == 'b') {
      ++local;
      EXPECT_FALSE(core.Remote(n.id)) << name;
    } else {
      ++remote;
      EXPECT_TRUE(core.Remote(n.id)) << name;
    }
  }
  EXPECT_EQ(seeds, 1);
  EXPECT_EQ(local, 4);
  EXPECT_EQ(remote, 2);
  // The seed's zone is not known until its data connection says it: bytes from
  // it count as across zones until then, and not once it says "b".
  const PeerId seed = *core.IdOf("origin:1");
  EXPECT_TRUE(core.Remote(seed));
  core.SetSourceZone(seed, "b");
  EXPECT_FALSE(core.Remote(seed));
}

TEST(FetcherCore, AFetcherWithNoZoneCountsNothingAcrossZones) {
  FetcherCore core = Core(4, 1 << 20);
  const PeerId relay = *core.AddSource("a1:1", false, std::string("a"));
  EXPECT_FALSE(core.Remote(relay));
}

}  // namespace
}  // namespace seedd
