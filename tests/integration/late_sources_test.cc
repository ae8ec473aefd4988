// Sources may start later, and may come back: a daemon pulling at start waits
// for its origin, with backoff, until --pull-timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using testing::kToken;
using testing::SameTree;

// A loopback port nobody listens on now (bound, read, released).
uint16_t FreePort() {
  uint16_t port = 0;
  UniqueFd fd = testing::ListenLoopback(&port);
  return port;
}

class LateSourcesTest : public testing::WeightsFixture {
 protected:
  DaemonOptions Puller(const HostPort& source) {
    DaemonOptions o;
    o.seed.listen = HostPort{"127.0.0.1", 0};
    o.seed.source = source;
    o.seed.token = kToken;
    o.cache_dir = dir_.path() / "target";
    o.pulls = {"tiny"};
    o.pull_timeout = std::chrono::seconds(60);
    return o;
  }
  // An origin daemon serving model_ on `port`.
  std::unique_ptr<Daemon> Origin(uint16_t port) {
    DaemonOptions o;
    o.seed.listen = HostPort{"127.0.0.1", port};
    o.seed.token = kToken;
    o.cache_dir = dir_.path() / "origin";
    o.models = {{"tiny", model_}};
    o.weight_chunk_bytes = 256 * 1024;
    auto d = Daemon::Create(o);
    EXPECT_OK(d);
    EXPECT_OK((*d)->Start());
    return std::move(*d);
  }
  std::filesystem::path Current() {
    return dir_.path() / "target" / "weights" / "tiny" / "current";
  }
};

TEST_F(LateSourcesTest, ADaemonStartedBeforeItsOriginPullsOnceTheOriginIsUp) {
  const HostPort origin_addr{"127.0.0.1", FreePort()};
  testing::LogCapture logs;
  auto puller = Daemon::Create(Puller(origin_addr));
  ASSERT_OK(puller);
  Status started;
  std::thread start([&] { started = (*puller)->Start().status(); });
  // The puller retries while nothing listens there...
  ASSERT_TRUE(testing::WaitUntil([&] {
    return logs.Contains(spdlog::level::warn, "no source answered; retrying in");
  })) << logs.Dump();
  // ...and the origin comes up later.
  std::unique_ptr<Daemon> origin = Origin(origin_addr.port);
  start.join();
  ASSERT_OK(started);
  EXPECT_TRUE(SameTree(model_, Current()));
  (*puller)->Stop();
  origin->Stop();
}

TEST_F(LateSourcesTest, AnOriginThatGoesAwayMidPullIsUsedAgainWhenItIsBack) {
  const uint16_t port = FreePort();
  // The first origin hands out the manifest, holds the data connections, then dies.
  Result<IndexedModel> index = IndexModel("tiny", model_, [] {
    BuildOptions b;
    b.chunk_size = 256 * 1024;
    return b;
  }());
  ASSERT_OK(index);
  auto served =
      std::make_shared<WeightServer>(std::vector<ServedModel>{ServeIndexed(std::move(*index))});
  std::mutex mu;
  std::condition_variable cv;
  bool die = false;
  std::atomic<int> held{0};
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", port};
  config.token = kToken;
  TransportOptions options;
  options.stream_handlers["weight_data"] = [&](Conn&, const Json&) {
    ++held;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return die; });
  };
  auto first = SeedTransport::Create({NewWeightShardsSeedable(served)}, config, options);
  ASSERT_OK(first);
  ASSERT_OK((*first)->StartListener());
  testing::LogCapture logs;
  auto puller = Daemon::Create(Puller(HostPort{"127.0.0.1", port}));
  ASSERT_OK(puller);
  Status started;
  std::thread start([&] { started = (*puller)->Start().status(); });
  ASSERT_TRUE(testing::WaitUntil([&] { return held > 0; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    die = true;
  }
  cv.notify_all();
  (*first)->Close();  // killed mid-pull
  ASSERT_TRUE(testing::WaitUntil([&] { return logs.Contains(spdlog::level::warn, "retrying in"); },
                                 std::chrono::seconds(30)))
      << logs.Dump();
  std::unique_ptr<Daemon> back = Origin(port);  // restarted on the same address
  start.join();
  ASSERT_OK(started);
  EXPECT_TRUE(SameTree(model_, Current()));
  (*puller)->Stop();
  back->Stop();
}

TEST_F(LateSourcesTest, APullFromASourceThatRefusesSaysWhatItSaid) {
  const uint16_t port = FreePort();
  std::unique_ptr<Daemon> origin = Origin(port);
  DaemonOptions o = Puller(HostPort{"127.0.0.1", port});
  o.seed.token = "another-token";
  o.pull_timeout = std::chrono::seconds(1);
  auto puller = Daemon::Create(o);
  ASSERT_OK(puller);
  Status s = (*puller)->Start().status();
  EXPECT_NE(s.message().find("a source answered with an error (127.0.0.1:"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("Unauthorized request (check that both daemons read the same token)"),
            std::string::npos)
      << s.message();
  origin->Stop();
}

TEST_F(LateSourcesTest, APullGivesUpAtItsTimeoutSayingWhy) {
  DaemonOptions o = Puller(HostPort{"127.0.0.1", FreePort()});
  o.pull_timeout = std::chrono::seconds(1);
  auto puller = Daemon::Create(o);
  ASSERT_OK(puller);
  Status s = (*puller)->Start().status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("no source answered, and --pull-timeout (1 s) has passed"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace seedd
