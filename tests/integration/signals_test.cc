// Stops that stop: SIGTERM and SIGINT are obeyed while a daemon pulls or warms
// up, and Ctrl-C stops `seedctl pull`, each saying that a rerun resumes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/seed_transport.h"
#include "seedd/tokens.h"
#include "support/process.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using std::chrono::seconds;
using testing::Process;

class SignalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(token_file(), std::ios::trunc) << testing::kToken << "\n";
    std::filesystem::permissions(token_file(), std::filesystem::perms::owner_read);
    testing::WriteRandom(dir_.path() / "model" / "w.bin", 1 << 20, 1);
  }
  std::filesystem::path token_file() const { return dir_.path() / "token"; }
  std::vector<std::string> Daemon(std::vector<std::string> extra) {
    std::vector<std::string> argv = {SEEDD_BIN,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--token-file",
                                     token_file().string(),
                                     "--cache-dir",
                                     (dir_.path() / "cache").string(),
                                     "--log-level",
                                     "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  testing::TempDir dir_;
};

TEST_F(SignalsTest, SigtermStopsADaemonWhilePulling) {
  testing::StalledOrigin origin(dir_.path() / "model");
  for (int sig : {SIGTERM, SIGINT}) {
    const int before = origin.held();
    Process seedd(Daemon({"--source", origin.addr(), "--pull", "tiny"}));
    ASSERT_TRUE(testing::WaitUntil([&] { return origin.held() > before; }));
    const auto sent = std::chrono::steady_clock::now();
    seedd.Signal(sig);
    // Before, nothing happened until the pull ended (here: never).
    EXPECT_EQ(seedd.Wait(seconds(10)), 0) << seedd.Stderr();
    EXPECT_LT(std::chrono::steady_clock::now() - sent, seconds(2));
    const std::string log = seedd.Stderr();
    EXPECT_NE(log.find(sig == SIGTERM ? "Received SIGTERM; stopping" : "Received SIGINT"),
              std::string::npos)
        << log;
    // The origin sent nothing: no chunk is said to be kept.
    EXPECT_NE(log.find("the pull was stopped before any chunk was verified"), std::string::npos)
        << log;
    EXPECT_EQ(log.find("are kept"), std::string::npos) << log;
    EXPECT_EQ(seedd.Stdout().find("serving on"), std::string::npos);  // it never said ready
  }
}

// A source that stops halfway through the manifest's frame (as a SIGSTOPped
// origin does): SIGTERM still ends the pulling daemon within 2 s (before, it
// waited for the frame until the source's deadline).
TEST_F(SignalsTest, SigtermStopsADaemonWaitingForAManifestThatStoppedHalfway) {
  uint16_t port = 0;
  UniqueFd listener = testing::ListenLoopback(&port);
  std::atomic<bool> begun{false};
  std::atomic<bool> done{false};
  std::thread origin([&] {
    UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    testing::ReadResponse(fd.get());  // the request
    testing::SendAll(fd.get(), testing::Header(100000) + "{\"status\": \"ok\", ");
    begun = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  Process seedd(Daemon({"--source", "127.0.0.1:" + std::to_string(port), "--pull", "tiny"}));
  ASSERT_TRUE(testing::WaitUntil([&] { return begun.load(); })) << seedd.Stderr();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto sent = std::chrono::steady_clock::now();
  seedd.Signal(SIGTERM);
  const auto status = seedd.Wait(seconds(30));
  const auto took = std::chrono::steady_clock::now() - sent;
  done = true;
  ::shutdown(listener.get(), SHUT_RDWR);
  origin.join();
  EXPECT_EQ(status, 0) << seedd.Stderr();
  EXPECT_LT(took, seconds(2)) << seedd.Stderr();
}

TEST_F(SignalsTest, SigtermStopsADaemonWhileItsAutotunePassRuns) {
  const auto started = dir_.path() / "tuning";
  const auto script = dir_.path() / "tune.sh";
  std::ofstream(script) << "#!/bin/sh\ntouch '" << started.string() << "'\nexec sleep 60\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  Process seedd(Daemon(
      {"--warmup", "flashinfer_autotune", "--autotune-runner", "command:" + script.string()}));
  ASSERT_TRUE(testing::WaitUntil([&] { return std::filesystem::exists(started); }));
  const auto sent = std::chrono::steady_clock::now();
  seedd.Signal(SIGTERM);
  EXPECT_EQ(seedd.Wait(seconds(10)), 0) << seedd.Stderr();
  EXPECT_LT(std::chrono::steady_clock::now() - sent, seconds(2));
  EXPECT_NE(seedd.Stderr().find("the autotune command was stopped"), std::string::npos)
      << seedd.Stderr();
}

TEST_F(SignalsTest, CtrlCStopsSeedctlPullAndSaysARerunResumes) {
  testing::StalledOrigin origin(dir_.path() / "model");
  Process pull({SEEDCTL_BIN, "pull", "--source", origin.addr(), "--token-file",
                token_file().string(), "--model", "tiny", "--into",
                (dir_.path() / "dest").string()});
  ASSERT_TRUE(testing::WaitUntil([&] { return origin.held() > 0; }));
  pull.Signal(SIGINT);
  EXPECT_EQ(pull.Wait(seconds(10)), 130) << pull.Stderr();
  EXPECT_NE(pull.Stderr().find("stopped: the pull was stopped"), std::string::npos)
      << pull.Stderr();
  EXPECT_NE(pull.Stderr().find("rerun the same command to resume"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "dest"));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / ".dest.seedd-staging"));  // kept
}

// A fleet rotates its token without a restart: while clients keep asking, the
// token file goes "old" -> "old\nnew" -> (clients send new) -> "new\nold" ->
// "new" (each token of 20 bytes), each followed by SIGHUP; no request fails,
// and "old" is refused at the
// end. A file that cannot be read on SIGHUP keeps the tokens in use.
TEST_F(SignalsTest, SighupRotatesTheTokenWhileRequestsRun) {
  auto write = [&](const std::string& text) {
    std::filesystem::permissions(token_file(), std::filesystem::perms::owner_all);
    std::ofstream(token_file(), std::ios::trunc) << text;
    std::filesystem::permissions(token_file(), std::filesystem::perms::owner_read);
  };
  write("old-token-0123456789\n");
  Process seedd(Daemon({}));
  auto line = seedd.ReadLine(seconds(30));
  ASSERT_TRUE(line.has_value()) << seedd.Stderr();
  Result<HostPort> addr = ParseHostPort(line->substr(std::string("seedd: serving on ").size()));
  ASSERT_OK(addr);
  auto client_tokens =
      std::make_shared<TokenRing>(std::vector<std::string>{"old-token-0123456789"});
  auto client = [&](std::shared_ptr<const TokenRing> tokens) {
    SeedConfig config;
    config.source = *addr;
    config.token = tokens->Sent();
    TransportOptions options;
    options.tokens = std::move(tokens);
    return SeedTransport::Create({}, config, options);
  };
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::mutex mu;
  std::string first_failure;
  std::vector<std::thread> load;
  for (int t = 0; t < 4; ++t) {
    load.emplace_back([&] {
      auto transport = client(client_tokens);
      ASSERT_OK(transport);
      while (!stop) {
        std::optional<Json> r = (*transport)->Request(Json{{"kind", "catalog"}});
        if (r.has_value() && (*r)["status"] == "ok") {
          ++ok;
          continue;
        }
        ++failed;
        std::lock_guard<std::mutex> lock(mu);
        if (first_failure.empty()) first_failure = r.has_value() ? r->dump() : "no response";
      }
    });
  }
  int reloads = 0;
  auto reload = [&](const std::string& text) {
    write(text);
    seedd.Signal(SIGHUP);
    ++reloads;
    ASSERT_TRUE(testing::WaitUntil([&] {
      const std::string log = seedd.Stderr();
      size_t n = 0;
      for (size_t at = log.find("Received SIGHUP"); at != std::string::npos;
           at = log.find("Received SIGHUP", at + 1)) {
        ++n;
      }
      return n >= static_cast<size_t>(reloads);
    })) << seedd.Stderr();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // requests in between
  };
  reload(
      "old-token-0123456789\nnew-token-0123456789\n");  // new accepted everywhere, old still sent
  client_tokens->Replace({"new-token-0123456789", "old-token-0123456789"});  // the clients send new
  reload("new-token-0123456789\nold-token-0123456789\n");
  reload("b\x01d\n");                // unreadable: the tokens in use stay
  reload("new-token-0123456789\n");  // old refused
  stop = true;
  for (auto& t : load) t.join();
  EXPECT_EQ(failed.load(), 0) << first_failure;
  EXPECT_GT(ok.load(), 20);
  const std::string log = seedd.Stderr();
  EXPECT_NE(log.find("Received SIGHUP; 2 token(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("keeping the current tokens"), std::string::npos) << log;
  auto stale =
      client(std::make_shared<const TokenRing>(std::vector<std::string>{"old-token-0123456789"}));
  ASSERT_OK(stale);
  std::optional<Json> refused = (*stale)->Request(Json{{"kind", "catalog"}});
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ((*refused)["status"], "error");
  EXPECT_EQ((*refused)["message"], "Unauthorized request");
  seedd.Signal(SIGTERM);
  EXPECT_EQ(seedd.Wait(seconds(10)), 0) << seedd.Stderr();
}

}  // namespace
}  // namespace seedd
