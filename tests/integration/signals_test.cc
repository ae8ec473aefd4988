// Stops that stop: SIGTERM and SIGINT are obeyed while a daemon pulls or warms
// up, and Ctrl-C stops `seedctl pull`, each saying that a rerun resumes.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "kinds/weights/data_plane.h"
#include "seedd/seed_transport.h"
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
    EXPECT_NE(log.find("the next start resumes"), std::string::npos) << log;
    EXPECT_EQ(seedd.Stdout().find("serving on"), std::string::npos);  // it never said ready
  }
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

}  // namespace
}  // namespace seedd
