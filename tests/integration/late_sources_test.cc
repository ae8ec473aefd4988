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
#include "seedd/weights.h"
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
    return logs.Contains(spdlog::level::warn, "no source answered (127.0.0.1:");
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
  EXPECT_NE(s.message().find("a source refused (127.0.0.1:"), std::string::npos) << s.message();
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
  // Which source, what went wrong with it, and which setting ran out.
  EXPECT_NE(s.message().find("no source answered (127.0.0.1:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Connection refused"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("; gave up after --pull-timeout (1 s)"), std::string::npos)
      << s.message();
}

// A source whose weight_shards kind answers every model with the manifest of
// another ("tiny"): a confused or lying origin.
class WrongModelSeedable final : public Seedable {
 public:
  explicit WrongModelSeedable(Json manifest) : manifest_(std::move(manifest)) {}
  std::string_view kind() const override { return kWeightShardsKind; }
  Result<Json> RequestParams(const Json& ctx) const override { return ctx; }
  Result<std::optional<Json>> Resolve(const Json&) const override {
    return std::optional<Json>(manifest_);
  }
  Result<Json> ValidatePayload(const Json& payload) const override { return payload; }
  Status Install(const Json&, const Json&) override { return Status::Internal("not a target"); }

 private:
  Json manifest_;
};

// seedctl pull (the library's PullModel) and the daemon's --pull run one
// pipeline: both refuse a manifest of another model than the one asked for,
// in the same words, and write nothing; the person at a terminal is told at
// once, the daemon retries until its --pull-timeout.
TEST_F(LateSourcesTest, TheLibraryAndTheDaemonRefuseTheManifestOfAnotherModelAlike) {
  const HostPort origin = Serve(model_);
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", 0};
  config.token = kToken;
  auto liar = SeedTransport::Create(
      {std::make_shared<WrongModelSeedable>(ManifestFrom(origin).ToJson())}, config);
  ASSERT_OK(liar);
  const HostPort addr = **(*liar)->StartListener();
  const std::string said = addr.ToString() + " sent the manifest of model 'tiny', not 'other'";

  PullOptions pull;
  pull.sources = {addr.ToString()};
  pull.token = kToken;
  pull.timeout = std::chrono::seconds(30);
  const auto asked = std::chrono::steady_clock::now();
  Result<PullResult> pulled = PullModel("other", dir_.path() / "into", pull);
  EXPECT_EQ(pulled.status().code(), StatusCode::kFailedPrecondition) << pulled.status().ToString();
  EXPECT_NE(pulled.status().message().find(said), std::string::npos) << pulled.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));  // not retried
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "into"));

  DaemonOptions o = Puller(addr);
  o.pulls = {"other"};
  o.pull_timeout = std::chrono::seconds(1);
  auto daemon = Daemon::Create(o);
  ASSERT_OK(daemon);
  Status started = (*daemon)->Start().status();
  EXPECT_NE(started.message().find("a source refused (" + said + ")"), std::string::npos)
      << started.ToString();
  EXPECT_NE(started.message().find("gave up after --pull-timeout (1 s)"), std::string::npos)
      << started.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "target" / "weights" / "other" / "current"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "target" / "weights" / "tiny"));
  (*liar)->Close();
}

}  // namespace
}  // namespace seedd
