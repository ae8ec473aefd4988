// The swarm registry against a real redis-server: entries expire, what is read
// back is checked, a daemon announces what it serves, and a fetcher whose seed
// is down completes from a relay it found there.
#include "kinds/weights/net/registry.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"
#include "seedd/json_text.h"
#include "support/servers.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using std::chrono::milliseconds;

class RegistryTest : public testing::WeightsFixture {
 protected:
  std::shared_ptr<SwarmRegistry> Open() {
    Result<std::shared_ptr<SwarmRegistry>> r = SwarmRegistry::Open(redis_.url());
    EXPECT_OK(r);
    return r.ok() ? *r : nullptr;
  }
  testing::RedisServer redis_;  // started by its constructor
};

// The claims origin models are fetched under: one holder at a time; only the
// holder renews or releases; a claim not renewed lapses and another takes it.
TEST_F(RegistryTest, AClaimHasOneHolderWhoAloneRenewsOrReleasesItAndItLapsesUnrenewed) {
  auto registry = Open();
  ASSERT_TRUE(*registry->Claim("origin-lease:v1", "a", milliseconds(60000)));
  EXPECT_FALSE(*registry->Claim("origin-lease:v1", "b", milliseconds(60000)));
  EXPECT_TRUE(*registry->Renew("origin-lease:v1", "a", milliseconds(60000)));
  EXPECT_FALSE(*registry->Renew("origin-lease:v1", "b", milliseconds(60000)));
  ASSERT_OK(registry->Release("origin-lease:v1", "b"));  // not b's: kept
  EXPECT_EQ(registry->Get("origin-lease:v1")->value_or(""), "a");
  ASSERT_OK(registry->Release("origin-lease:v1", "a"));
  EXPECT_FALSE(registry->Get("origin-lease:v1")->has_value());

  ASSERT_TRUE(*registry->Claim("origin-lease:v2", "a", milliseconds(300)));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(*registry->Renew("origin-lease:v2", "a", milliseconds(60000)));
  EXPECT_TRUE(*registry->Claim("origin-lease:v2", "b", milliseconds(60000)));

  ASSERT_OK(registry->Put("origin-root:v1", std::string(64, 'a'), milliseconds(60000)));
  EXPECT_EQ(registry->Get("origin-root:v1")->value_or(""), std::string(64, 'a'));
  // A value longer than any the registry writes is refused, not read.
  ASSERT_OK(registry->Put("origin-root:v2", std::string(4096, 'a'), milliseconds(60000)));
  EXPECT_FALSE(registry->Get("origin-root:v2").ok());
  // Whether a value is there, whatever its length.
  EXPECT_TRUE(*registry->Exists("origin-root:v2"));
  EXPECT_FALSE(*registry->Exists("origin-root:v3"));
  ASSERT_OK(registry->Delete("origin-root:v2"));
  EXPECT_FALSE(*registry->Exists("origin-root:v2"));
}

TEST_F(RegistryTest, HoldersAreListedUntilTheirEntriesExpire) {
  auto registry = Open();
  ASSERT_OK(registry->Announce("aa", "127.0.0.2:1", milliseconds(400)));
  ASSERT_OK(registry->Announce("aa", "127.0.0.3:1", milliseconds(60000)));
  ASSERT_OK(registry->Announce("bb", "127.0.0.4:1", milliseconds(60000)));
  Result<std::vector<std::string>> all = registry->Holders("aa", "", 10);
  ASSERT_OK(all);
  std::sort(all->begin(), all->end());
  EXPECT_EQ(*all, (std::vector<std::string>{"127.0.0.2:1", "127.0.0.3:1"}));
  // The asker itself is left out; the limit holds.
  EXPECT_EQ(*registry->Holders("aa", "127.0.0.3:1", 10), std::vector<std::string>{"127.0.0.2:1"});
  EXPECT_EQ(registry->Holders("aa", "", 1)->size(), 1u);
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(*registry->Holders("aa", "", 10), std::vector<std::string>{"127.0.0.3:1"});
}

// Whatever else wrote to the key is skipped: the registry's content is peer input.
TEST_F(RegistryTest, EntriesThatAreNotAddressesAreSkipped) {
  auto registry = Open();
  ASSERT_OK(registry->Announce("cc", "127.0.0.2:1", milliseconds(60000)));
  redisContext* c = redisConnect("127.0.0.1", redis_.port());
  ASSERT_NE(c, nullptr);
  const std::string far = std::to_string(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count() +
      60000);
  freeReplyObject(redisCommand(c, "ZADD seedd:swarm:cc %s %s", far.c_str(), "not an address"));
  freeReplyObject(redisCommand(c, "ZADD seedd:swarm:cc %s %s", far.c_str(), "host:99999"));
  redisFree(c);
  EXPECT_EQ(*registry->Holders("cc", "", 10), std::vector<std::string>{"127.0.0.2:1"});
}

TEST_F(RegistryTest, ARegistryThatIsDownIsAClearErrorAtStart) {
  redis_.Stop();
  Result<std::shared_ptr<SwarmRegistry>> r = SwarmRegistry::Open(redis_.url());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("redis"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(SwarmRegistry::Open("http://127.0.0.1:1").ok());
}

// A daemon serving a model announces it; a fetcher whose only seed is down
// finds that daemon in the registry and completes from it.
TEST_F(RegistryTest, AFetcherWhoseSeedIsDownCompletesFromADaemonInTheRegistry) {
  DaemonOptions o;
  o.seed.listen = HostPort{"127.0.0.1", 0};
  o.seed.token = testing::kToken;
  o.cache_dir = dir_.path() / "holder";
  o.models = {{"tiny", model_}};
  o.weight_chunk_bytes = 256 * 1024;
  o.registry_url = redis_.url();
  Result<std::unique_ptr<Daemon>> holder = Daemon::Create(o);
  ASSERT_OK(holder);
  Result<std::optional<HostPort>> bound = (*holder)->Start();
  ASSERT_OK(bound);
  const std::string holder_addr = (*bound)->ToString();
  Manifest m = ManifestFrom(**bound);
  auto registry = Open();
  ASSERT_TRUE(testing::WaitUntil([&] {
    Result<std::vector<std::string>> h = registry->Holders(m.root_digest, "", 10);
    return h.ok() && *h == std::vector<std::string>{holder_addr};
  }));
  uint16_t down_port = 0;
  testing::ListenLoopback(&down_port);  // closed at once: nobody listens there
  const HostPort down{"127.0.0.1", down_port};
  m.sources.clear();
  FetchOptions options = Options();
  FetchStats stats;
  // Without the registry the seed is all there is.
  EXPECT_FALSE(FetchModel(m, {down}, dir_.path() / "alone", options, &stats).ok());
  options.registry = registry;
  stats = FetchStats{};
  ASSERT_OK(FetchModel(m, {down}, dir_.path() / "dest", options, &stats));
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.peers, std::vector<std::string>{holder_addr});
  (*holder)->Stop();
}

// Anyone who can write to the registry's Redis (no token needed) can list a
// listener of theirs as a holder. Every fetcher then connects to it: it must
// learn neither the token nor anything it could replay (data_auth.h).
TEST_F(RegistryTest, AListenerEnteredInTheRegistryNeverReceivesTheToken) {
  const HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  uint16_t port = 0;
  UniqueFd listener = testing::ListenLoopback(&port);
  std::string received;
  std::atomic<int> connections{0};
  std::thread stranger([&] {
    for (;;) {
      UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) return;
      ++connections;
      timeval tv{2, 0};
      ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      // Answers as a daemon would if it did not have to prove anything.
      char buf[4096];
      const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
      if (n > 0) received.append(buf, static_cast<size_t>(n));
      testing::SendAll(fd.get(), EncodeJsonFrame(Json{{"status", "ok"}, {"chunks", 1}}));
      received += testing::ReadToEof(fd.get());
    }
  });
  auto registry = Open();
  const std::string entry = "127.0.0.1:" + std::to_string(port);
  ASSERT_OK(registry->Announce(m.root_digest, entry, milliseconds(60000)));
  m.sources.clear();
  FetchOptions options = Options();
  options.registry = registry;
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {origin}, dir_.path() / "dest", options, &stats));
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "dest"));
  ::shutdown(listener.get(), SHUT_RDWR);
  stranger.join();
  EXPECT_GE(connections.load(), 1) << "the registry's entry was never tried";
  EXPECT_EQ(received.find(testing::kToken), std::string::npos) << received;
  EXPECT_EQ(received.find("proof"), std::string::npos) << received;
  EXPECT_NE(std::find(stats.sources_dropped.begin(), stats.sources_dropped.end(), entry),
            stats.sources_dropped.end());
}

}  // namespace
}  // namespace seedd
