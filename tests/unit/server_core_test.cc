// The serving side's swarm protocol (proto/server_core.h), event by event with
// a fake clock: who is remembered, claims and when they lapse, the tracker's
// sample.
#include "kinds/weights/proto/server_core.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace seedd {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

const ServeClock::time_point kT0 = ServeClock::time_point{} + std::chrono::hours(1);

SwarmPolicy Policy(size_t max_relays = 1024) {
  SwarmPolicy p;
  p.max_relays = max_relays;
  return p;
}

TEST(ServerCore, AChunkSentToALiveRelayIsClaimedForOthersUntilItsTtlLapses) {
  ServerCore core(4, Policy());
  ASSERT_TRUE(core.Announce("a:1", "s1", kT0));
  ASSERT_TRUE(core.Announce("b:1", "s1", kT0));
  const std::string a = "a:1", b = "b:1";
  ASSERT_TRUE(core.Claim(a, 2, kT0).send);
  // While it is being sent: claimed, "sending".
  ClaimAnswer answer = core.Claim(b, 2, kT0);
  EXPECT_FALSE(answer.send);
  EXPECT_EQ(answer.aux, 0xffffffffu);
  core.EndSend(a, 2, true, kT0 + milliseconds(40));
  answer = core.Claim(b, 2, kT0 + milliseconds(100));
  EXPECT_FALSE(answer.send);
  EXPECT_EQ(answer.aux, 60u);  // ms since it was sent
  // A fetcher that does not relay (-1) is told so too.
  EXPECT_FALSE(core.Claim("", 2, kT0 + milliseconds(100)).send);
  // The holder is not heard from for relay_ttl (since its last request): its
  // claim lapses.
  const auto ttl = SwarmPolicy{}.relay_ttl;
  EXPECT_FALSE(core.Claim(b, 2, kT0 + ttl - microseconds(1)).send);
  EXPECT_TRUE(core.Claim(b, 2, kT0 + ttl).send);
}

TEST(ServerCore, ARequestKeepsItsRelayAliveAndItsClaimsStanding) {
  ServerCore core(2, Policy());
  ASSERT_TRUE(core.Announce("a:1", "s1", kT0));
  ASSERT_TRUE(core.Announce("b:1", "s1", kT0));
  ASSERT_TRUE(core.Claim("a:1", 0, kT0).send);
  core.EndSend("a:1", 0, true, kT0);
  const auto ttl = SwarmPolicy{}.relay_ttl;
  // a asks for chunk 1 late in its ttl: heard from then.
  ASSERT_TRUE(core.Claim("a:1", 1, kT0 + ttl - milliseconds(1)).send);
  EXPECT_FALSE(core.Claim("b:1", 0, kT0 + ttl + milliseconds(1)).send);
  // A relay never announced takes no claim.
  ASSERT_TRUE(core.Claim("stranger:1", 0, kT0 + 2 * ttl).send);
  EXPECT_TRUE(core.Claim("b:1", 0, kT0 + 2 * ttl).send);
}

TEST(ServerCore, ASendThatDidNotCompleteLeavesTheChunkUnclaimed) {
  ServerCore core(2, Policy());
  ASSERT_TRUE(core.Announce("a:1", "s1", kT0));
  ASSERT_TRUE(core.Announce("b:1", "s1", kT0));
  const std::string a = "a:1", b = "b:1";
  ASSERT_TRUE(core.Claim(a, 0, kT0).send);
  core.EndSend(a, 0, false, kT0);
  EXPECT_TRUE(core.Claim(b, 0, kT0).send);
  // And now b holds it.
  EXPECT_FALSE(core.Claim(a, 0, kT0).send);
}

TEST(ServerCore, ARelayThatStartsANewSessionLosesItsClaims) {
  ServerCore core(2, Policy());
  ASSERT_TRUE(core.Announce("a:1", "s1", kT0));
  ASSERT_TRUE(core.Announce("b:1", "s1", kT0));
  const std::string a = "a:1", b = "b:1";
  ASSERT_TRUE(core.Claim(a, 1, kT0).send);
  core.EndSend(a, 1, true, kT0);
  EXPECT_FALSE(core.Claim(b, 1, kT0).send);
  EXPECT_TRUE(core.Announce("a:1", "s2", kT0));  // restarted with an empty cache
  EXPECT_TRUE(core.Claim(b, 1, kT0).send);
}

TEST(ServerCore, AtMostMaxRelaysAreRememberedAndTheSilentAreForgottenForNewcomers) {
  ServerCore core(1, Policy(2));
  EXPECT_TRUE(core.Announce("a:1", "s", kT0));
  EXPECT_TRUE(core.Announce("b:1", "s", kT0));
  EXPECT_FALSE(core.Announce("c:1", "s", kT0 + milliseconds(1)));
  // a keeps announcing; b falls silent for relay_ttl and makes room.
  const auto ttl = SwarmPolicy{}.relay_ttl;
  EXPECT_TRUE(core.Announce("a:1", "s", kT0 + ttl));
  EXPECT_TRUE(core.Announce("c:1", "s", kT0 + ttl));
  EXPECT_EQ(core.relays(), 2u);
  std::mt19937_64 rng(1);
  std::vector<std::string> peers = core.Peers("", 10, rng, kT0 + ttl);
  EXPECT_EQ(std::set<std::string>(peers.begin(), peers.end()),
            (std::set<std::string>{"a:1", "c:1"}));
}

TEST(ServerCore, TheSampleListsLiveRelaysButTheAskerHalfOfThemThoseHoldingTheMost) {
  ServerCore core(40, Policy());
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) {
    ids.push_back("r" + std::to_string(i) + ":1");
    ASSERT_TRUE(core.Announce(ids.back(), "s", kT0));
  }
  // r7 holds 20 chunks sent from here, r3 10, the rest none.
  for (uint32_t c = 0; c < 20; ++c) core.Claim(ids[7], c, kT0);
  for (uint32_t c = 20; c < 30; ++c) core.Claim(ids[3], c, kT0);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> peers = core.Peers("r0:1", 4, rng, kT0 + milliseconds(round));
    ASSERT_EQ(peers.size(), 4u);
    EXPECT_EQ(peers[0], "r7:1");
    EXPECT_EQ(peers[1], "r3:1");
    EXPECT_EQ(std::count(peers.begin(), peers.end(), "r0:1"), 0);
    EXPECT_EQ(std::set<std::string>(peers.begin(), peers.end()).size(), 4u);
  }
}

TEST(ServerCore, TheRestOfTheSampleIsTheRelaysHandedOutLeast) {
  ServerCore core(4, Policy());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(core.Announce("r" + std::to_string(i) + ":1", "s", kT0));
  // r0 and r1 hold claims: the top half of every sample of 4.
  ASSERT_TRUE(core.Claim("r0:1", 0, kT0).send);
  ASSERT_TRUE(core.Claim("r0:1", 1, kT0).send);
  ASSERT_TRUE(core.Claim("r1:1", 2, kT0).send);
  std::mt19937_64 rng(9);
  std::map<std::string, int> rest;
  for (int round = 0; round < 5; ++round) {
    std::vector<std::string> peers = core.Peers("", 4, rng, kT0);
    ASSERT_EQ(peers.size(), 4u);
    EXPECT_EQ(peers[0], "r0:1");
    EXPECT_EQ(peers[1], "r1:1");
    ++rest[peers[2]];
    ++rest[peers[3]];
  }
  // Five samples hand out each of the other ten exactly once.
  EXPECT_EQ(rest.size(), 10u);
  for (const auto& [name, n] : rest) EXPECT_EQ(n, 1) << name;
}

TEST(ServerCore, AClaimHoldsOnlyRelaysOfTheHoldersZone) {
  ServerCore core(4, Policy());
  ASSERT_TRUE(core.Announce("a1:1", "s", kT0, "a"));
  ASSERT_TRUE(core.Announce("a2:1", "s", kT0, "a"));
  ASSERT_TRUE(core.Announce("b1:1", "s", kT0, "b"));
  ASSERT_TRUE(core.Announce("b2:1", "s", kT0, "b"));
  ASSERT_TRUE(core.Claim("a1:1", 1, kT0).send);
  // Zone a is told to fetch it from a1; zone b is sent it once, and then
  // told to fetch it from b1: each zone gets the chunk from here once.
  ClaimAnswer a2 = core.Claim("a2:1", 1, kT0);
  EXPECT_FALSE(a2.send);
  EXPECT_EQ(a2.holder, "a1:1");
  EXPECT_TRUE(core.Claim("b1:1", 1, kT0).send);
  ClaimAnswer b2 = core.Claim("b2:1", 1, kT0);
  EXPECT_FALSE(b2.send);
  EXPECT_EQ(b2.holder, "b1:1");
  // A relay that moves to another zone loses the claims it held in its old one.
  ASSERT_TRUE(core.Announce("b1:1", "s", kT0, "c"));
  EXPECT_TRUE(core.Claim("b2:1", 1, kT0).send);
}

TEST(ServerCore, AFetcherOfAZoneIsHandedTheRelaysOfItsZoneFirst) {
  ServerCore core(4, Policy());
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(core.Announce("a" + std::to_string(i) + ":1", "s", kT0, "a"));
    ASSERT_TRUE(core.Announce("b" + std::to_string(i) + ":1", "s", kT0, "b"));
  }
  std::mt19937_64 rng(1);
  std::vector<ListedRelay> listed = core.ListPeers("b0:1", 8, rng, kT0, "b");
  ASSERT_EQ(listed.size(), 8u);
  // The five other relays of zone b, then three of zone a, each with its zone.
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(listed[i].zone, i < 5 ? "b" : "a") << i;
    EXPECT_EQ(listed[i].name.substr(0, 1), listed[i].zone) << listed[i].name;
  }
  // An asker of no zone gets the usual sample, names only.
  EXPECT_EQ(core.Peers("", 8, rng, kT0).size(), 8u);
}

TEST(ServerCore, RelaysOfZonesBeyondTheBoundShareTheClaimsOfRelaysOfNone) {
  ServerCore core(2, Policy());
  for (size_t z = 0; z <= kMaxZonesPerSwarm; ++z) {
    ASSERT_TRUE(core.Announce("z" + std::to_string(z) + ":1", "s", kT0, "z" + std::to_string(z)));
  }
  ASSERT_TRUE(core.Announce("none:1", "s", kT0));
  // The last zone announced is one too many: its relay takes the claims of no zone.
  const std::string last = "z" + std::to_string(kMaxZonesPerSwarm) + ":1";
  ASSERT_TRUE(core.Claim(last, 0, kT0).send);
  EXPECT_FALSE(core.Claim("none:1", 0, kT0).send);
  // Zones within the bound keep their own.
  EXPECT_TRUE(core.Claim("z0:1", 0, kT0).send);
}

}  // namespace
}  // namespace seedd
