#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/backoff.h"
#include "common/crypto.h"
#include "common/curl_lib.h"
#include "common/rate_limiter.h"
#include "seedd/logging.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/units.h"
#include "support/test_util.h"

namespace seedd {
namespace {

TEST(Status, CarriesCodeAndMessage) {
  Status s = Status::NotFound("no such key");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NotFound: no such key");
  EXPECT_EQ(s.WithContext("get a/b/c").message(), "get a/b/c: no such key");
  EXPECT_TRUE(Status::Ok().ok());
  Result<int> r = 5;
  EXPECT_EQ(*r, 5);
  Result<int> e = Status::Internal("x");
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

// A server thread may log while a test attaches or detaches its capture; the
// logger's own sink vector is not safe for that (ASan saw a freed sink).
TEST(Logging, CapturesComeAndGoWhileAnotherThreadLogs) {
  auto& stderr_sink = *Logger().sinks().front();
  stderr_sink.set_level(spdlog::level::off);  // keep the test's output short
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) Logger().debug("background line");
  });
  for (int i = 0; i < 2000; ++i) {
    testing::LogCapture capture;
    Logger().debug("foreground line {}", i);
    ASSERT_TRUE(capture.Contains(spdlog::level::debug, "foreground line " + std::to_string(i)));
  }
  stop = true;
  writer.join();
  stderr_sink.set_level(spdlog::level::trace);
}

TEST(Crypto, Sha256MatchesKnownVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Crypto, Base64RoundTripsEveryLength) {
  std::string data;
  for (int i = 0; i < 300; ++i) {
    auto decoded = Base64Decode(Base64Encode(data));
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, data);
    data.push_back(static_cast<char>(i * 37));
  }
  EXPECT_EQ(Base64Encode("hello"), "aGVsbG8=");
}

TEST(Crypto, IsLowerHexTakesOnlyLowercaseDigitsOfTheSizesAllowed) {
  EXPECT_TRUE(IsLowerHex("0123456789abcdef", 16));
  EXPECT_TRUE(IsLowerHex("0123456789abcdef", 16, 128));
  EXPECT_FALSE(IsLowerHex("0123456789abcde", 16, 128));  // too short
  EXPECT_FALSE(IsLowerHex(std::string(129, 'a'), 16, 128));
  EXPECT_FALSE(IsLowerHex("0123456789ABCDEF", 16));  // uppercase
  EXPECT_FALSE(IsLowerHex("0123456789abcdeg", 16));
  EXPECT_FALSE(IsLowerHex("", 1, 128));
  EXPECT_TRUE(IsLowerHex(HexEncode("\x01\xfe"), 4));
}

TEST(Crypto, Base64DecodeIsStrict) {
  EXPECT_FALSE(Base64Decode("aGVsbG8").has_value());    // missing padding
  EXPECT_FALSE(Base64Decode("aGV sbG8=").has_value());  // whitespace
  EXPECT_FALSE(Base64Decode("aG=sbG8=").has_value());   // padding inside
  EXPECT_FALSE(Base64Decode("aGVsbG9=").has_value());   // non-canonical trailing bits
  EXPECT_FALSE(Base64Decode("aGVs====").has_value());
  EXPECT_TRUE(Base64Decode("").has_value());
}

TEST(Crypto, ConstantTimeEqualsComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(ParseHostPort, ParsesIpv4HostnamesAndBracketedIpv6) {
  auto a = ParseHostPort("127.0.0.1:7420");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7420);
  EXPECT_EQ(a->ToString(), "127.0.0.1:7420");
  auto b = ParseHostPort("[::1]:0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_TRUE(b->is_ipv6());
  EXPECT_EQ(b->ToString(), "[::1]:0");
  auto c = ParseHostPort("warm-peer.example:65535");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port, 65535);
}

TEST(ParseHostPort, RejectsMalformedAddresses) {
  for (const char* bad : {"", "host", ":80", "host:", "host:65536", "host:-1", "host:8o", "::1:80",
                          "[::1]80", "[::1", "[]:80", "[127.0.0.1]:80", "a b:80", "host:123456"}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("expected HOST:PORT"), std::string::npos) << bad;
    }
  }
}

TEST(SeedConfig, ListenerOrSourceWithoutTokenIsAnError) {
  SeedConfig config;
  EXPECT_TRUE(config.Validate().ok());
  config.listen = HostPort{"127.0.0.1", 0};
  Status s = config.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "A daemon-to-daemon listener/source requires a token");
  config.listen.reset();
  config.source = HostPort{"127.0.0.1", 1};
  EXPECT_EQ(config.Validate().message(), "A daemon-to-daemon listener/source requires a token");
  config.token = "t";
  EXPECT_TRUE(config.Validate().ok());
}

// A sender asking for what the bucket holds goes at once; beyond it, each waits
// what its bytes take at the rate, and senders that ask together are spaced in
// the order they asked.
TEST(RateLimiter, SendersAreSpacedAtTheRateBeyondTheBurst) {
  using std::chrono::milliseconds;
  RateLimiter limiter(1000 * 1000, 100 * 1000);  // 1 MB/s, 100 kB burst
  const auto t0 = RateLimiter::Clock::time_point{} + std::chrono::seconds(100);
  EXPECT_EQ(limiter.Reserve(100 * 1000, t0), RateLimiter::Clock::duration::zero());
  // The bucket is empty: 10 kB waits 10 ms, the next 10 kB asked at once 20 ms.
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.Reserve(10 * 1000, t0)),
            milliseconds(10));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.Reserve(10 * 1000, t0)),
            milliseconds(20));
  // 20 ms later the debt is paid; 50 ms more refill 50 kB.
  EXPECT_EQ(limiter.Reserve(50 * 1000, t0 + milliseconds(70)),
            RateLimiter::Clock::duration::zero());
  // A long idle time refills no more than the burst.
  EXPECT_EQ(limiter.Reserve(100 * 1000, t0 + std::chrono::seconds(60)),
            RateLimiter::Clock::duration::zero());
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(
                limiter.Reserve(1000, t0 + std::chrono::seconds(60))),
            milliseconds(1));
}

// A smaller burst set with a new rate holds at once: the tokens held beyond it
// are gone (a pacer that lowers its piece size does not let a burst of the old
// size through).
TEST(RateLimiter, ASmallerBurstDropsTheTokensHeldBeyondIt) {
  using std::chrono::milliseconds;
  RateLimiter limiter(1000 * 1000, 1000 * 1000);  // 1 MB/s, 1 MB burst: full
  const auto t0 = RateLimiter::Clock::time_point{} + std::chrono::seconds(100);
  EXPECT_EQ(limiter.Reserve(1000, t0), RateLimiter::Clock::duration::zero());
  limiter.SetRate(2000 * 1000, 100 * 1000);  // 2 MB/s, 100 kB burst
  EXPECT_EQ(limiter.Reserve(100 * 1000, t0), RateLimiter::Clock::duration::zero());
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(limiter.Reserve(20 * 1000, t0)),
            milliseconds(10));
}

// Over a second of sends, threads sharing a bucket send what the rate allows
// (plus the burst), whatever their number.
TEST(RateLimiter, ThreadsSharingABucketTogetherKeepToTheRate) {
  RateLimiter limiter(1000 * 1000, 10 * 1000);  // 1 MB/s
  const auto t0 = RateLimiter::Clock::time_point{} + std::chrono::seconds(100);
  std::atomic<uint64_t> sent{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&] {
      // Each sender's own clock: it sends when told, in 5 kB pieces, for 1 s.
      auto now = t0;
      while (true) {
        now += limiter.Reserve(5000, now);
        if (now > t0 + std::chrono::seconds(1)) break;
        sent += 5000;
      }
    });
  }
  for (auto& s : senders) s.join();
  EXPECT_GE(sent.load(), 990u * 1000);
  EXPECT_LE(sent.load(), 1010u * 1000 + 10 * 1000);
}

// Sizes, rates and durations in the units people read, three significant digits.
TEST(UnitsTest, SizesRatesAndDurationsReadAsPeopleWriteThem) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(3 * 1048576 + 300000), "3.29 MiB");
  EXPECT_EQ(HumanBytes(uint64_t{17} << 30), "17.0 GiB");
  EXPECT_EQ(HumanBytes(uint64_t{1023} << 20), "1023 MiB");
  EXPECT_EQ(HumanBytes((uint64_t{1} << 30) - 1), "1.00 GiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
  EXPECT_EQ(HumanRate(101.5 * 1048576), "102 MiB/s");
  EXPECT_EQ(HumanRate(-1), "0 B/s");
  EXPECT_EQ(HumanSeconds(0.42), "0.4 s");
  EXPECT_EQ(HumanSeconds(12.4), "12 s");
  EXPECT_EQ(HumanSeconds(185), "3 min 5 s");
  EXPECT_EQ(HumanSeconds(7440), "2 h 4 min");
  EXPECT_EQ(HumanSeconds(-1), "unknown");
}

// The rounds of a retried pull: waits growing from 0.5 s (+-20%), none once the
// deadline has passed, and a stop ends a wait.
TEST(RetryRounds, WaitsGrowUntilTheDeadlineAndAStopEndsAWait) {
  using Clock = RetryRounds::Clock;
  std::atomic<bool> stop{true};  // every wait ends at once: nothing sleeps here
  RetryRounds rounds(Clock::now() + std::chrono::hours(1), [&] { return stop.load(); });
  EXPECT_EQ(rounds.round(), 1);
  std::vector<Clock::duration> waits;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(rounds.WaitBeforeNext([&](Clock::duration wait, Clock::duration left) {
      waits.push_back(wait);
      EXPECT_LE(left, std::chrono::hours(1));
    }));
  }
  EXPECT_EQ(rounds.round(), 4);
  ASSERT_EQ(waits.size(), 3u);
  EXPECT_GE(waits[0], std::chrono::milliseconds(400));
  EXPECT_LE(waits[0], std::chrono::milliseconds(600));
  EXPECT_GE(waits[1], std::chrono::milliseconds(800));
  EXPECT_LE(waits[1], std::chrono::milliseconds(1200));
  EXPECT_GE(waits[2], std::chrono::milliseconds(1600));
  EXPECT_LE(waits[2], std::chrono::milliseconds(2400));

  RetryRounds over(Clock::now() - std::chrono::seconds(1), [] { return false; });
  bool called = false;
  EXPECT_FALSE(over.WaitBeforeNext([&](Clock::duration, Clock::duration) { called = true; }));
  EXPECT_FALSE(called);
  EXPECT_EQ(over.round(), 1);
}

// A wait never runs past the deadline.
TEST(RetryRounds, AWaitIsCutToTheTimeLeft) {
  using Clock = RetryRounds::Clock;
  RetryRounds rounds(Clock::now() + std::chrono::milliseconds(100), [] { return false; });
  Clock::duration waited{};
  ASSERT_TRUE(rounds.WaitBeforeNext([&](Clock::duration wait, Clock::duration) { waited = wait; }));
  EXPECT_LE(waited, std::chrono::milliseconds(100));
  EXPECT_FALSE(rounds.WaitBeforeNext(nullptr));  // the deadline has passed
}

}  // namespace
// A host without libcurl gets an error naming the library and what needs it,
// when something needs it: the rest of seedd runs without it.
TEST(CurlLib, AMissingLibraryIsAnErrorNamingItAndWhatNeedsIt) {
  Result<CurlLib> lib = OpenCurl("libcurl-not-installed.so.4");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("libcurl-not-installed.so.4 could not be loaded"),
            std::string::npos)
      << lib.status().message();
  EXPECT_NE(lib.status().message().find("S3 stores and http(s) origins need libcurl 4"),
            std::string::npos)
      << lib.status().message();
}

TEST(CurlLib, ALibraryWithoutCurlsFunctionsIsRefusedNamingThem) {
  Result<CurlLib> lib = OpenCurl("libz.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("it lacks curl_global_init, curl_easy_init"),
            std::string::npos)
      << lib.status().message();
}

// Opened once: every caller gets the same functions, which work.
TEST(CurlLib, TheProcesssLibcurlIsOpenedOnceAndMakesHandles) {
  Result<const CurlLib*> first = Curl();
  ASSERT_TRUE(first.ok()) << first.status().message();
  Result<const CurlLib*> second = Curl();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  CURL* handle = (*first)->easy_init();
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ((*first)->Setopt(handle, CURLOPT_URL, "http://127.0.0.1:1/"), CURLE_OK);
  (*first)->easy_cleanup(handle);
  EXPECT_STREQ((*first)->easy_strerror(CURLE_COULDNT_CONNECT), "Couldn't connect to server");
}

}  // namespace seedd
