// What one peer host may hold of a listener, event by event with a test clock.
#include "transport/address_limits.h"

#include <gtest/gtest.h>

namespace seedd {
namespace {

using Verdict = AddressLimits::Verdict;
using std::chrono::seconds;

AddressLimitOptions Small() {
  AddressLimitOptions o;
  o.max_unauthenticated_per_address = 3;
  o.max_unauthenticated = 5;
  o.max_streams_per_address = 2;
  o.max_auth_failures = 2;
  o.auth_failure_window = seconds(10);
  o.max_addresses = 4;
  return o;
}

TEST(AddressLimits, OneAddressHoldsAtMostItsShareOfUnauthenticatedConnections) {
  AddressLimits limits(Small());
  const auto t = AddressLimits::Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limits.Admit("10.0.0.1", t), Verdict::kAccept);
  EXPECT_EQ(limits.Admit("10.0.0.1", t), Verdict::kAddressFull);
  EXPECT_EQ(limits.Admit("10.0.0.2", t), Verdict::kAccept);  // another host is not affected
  limits.Authenticated("10.0.0.1");                          // no longer counts
  EXPECT_EQ(limits.Admit("10.0.0.1", t), Verdict::kAccept);
  limits.Released("10.0.0.1");
  EXPECT_EQ(limits.unauthenticated(), 3u);
}

TEST(AddressLimits, AtTheTotalCapALightHostTakesAPlaceFromTheHeaviest) {
  AddressLimits limits(Small());
  const auto t = AddressLimits::Clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(limits.Admit("10.0.0.1", t), Verdict::kAccept);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(limits.Admit("10.0.0.2", t), Verdict::kAccept);
  std::string victim;
  EXPECT_EQ(limits.Admit("10.0.0.3", t, &victim), Verdict::kEvict);
  EXPECT_EQ(victim, "10.0.0.1");
  limits.Transfer(victim, "10.0.0.3");
  EXPECT_EQ(limits.unauthenticated(), 5u);
  // Now the heaviest holds 2 and 10.0.0.3 holds 1: no one is far ahead.
  EXPECT_EQ(limits.Admit("10.0.0.3", t, &victim), Verdict::kServerFull);
}

TEST(AddressLimits, FailedAuthenticationsThrottleAnAddressForTheWindow) {
  AddressLimits limits(Small());
  const auto t = AddressLimits::Clock::now();
  for (size_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(limits.Admit("10.0.0.1", t), Verdict::kAccept);
    EXPECT_EQ(limits.AuthFailed("10.0.0.1", t), i);
    limits.Released("10.0.0.1");
  }
  EXPECT_EQ(limits.Admit("10.0.0.1", t + seconds(9)), Verdict::kThrottled);
  EXPECT_EQ(limits.Admit("10.0.0.2", t + seconds(9)), Verdict::kAccept);
  EXPECT_EQ(limits.Admit("10.0.0.1", t + seconds(10)), Verdict::kAccept);  // the window ended
}

TEST(AddressLimits, StreamsPerAddressAreBounded) {
  AddressLimits limits(Small());
  EXPECT_TRUE(limits.AdmitStream("10.0.0.1"));
  EXPECT_TRUE(limits.AdmitStream("10.0.0.1"));
  EXPECT_FALSE(limits.AdmitStream("10.0.0.1"));
  EXPECT_TRUE(limits.AdmitStream("10.0.0.2"));
  limits.StreamEnded("10.0.0.1");
  EXPECT_TRUE(limits.AdmitStream("10.0.0.1"));
}

TEST(AddressLimits, TheAddressesTrackedAreBoundedAndForgottenWhenIdle) {
  AddressLimits limits(Small());
  const auto t = AddressLimits::Clock::now();
  for (int i = 1; i <= 4; ++i) {
    ASSERT_EQ(limits.Admit("10.0.0." + std::to_string(i), t), Verdict::kAccept);
  }
  EXPECT_EQ(limits.Admit("10.0.0.9", t), Verdict::kTooManyAddresses);
  limits.Released("10.0.0.1");  // holds nothing now: forgotten
  EXPECT_EQ(limits.Admit("10.0.0.9", t), Verdict::kAccept);
}

TEST(AddressLimits, IPv6HostsAreGroupedByTheirSlash64) {
  EXPECT_EQ(AddressLimits::Key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressLimits::Key("2001:db8:1:2:bbbb::7"), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressLimits::Key("::ffff:10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(AddressLimits::Key("127.0.0.2"), "127.0.0.2");
}

}  // namespace
}  // namespace seedd
