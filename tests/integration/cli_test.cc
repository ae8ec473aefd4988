// The first hour with seedctl, with the real binaries on loopback: pulls that
// wait for sources, pull destinations people have (a volume's mount point, a
// directory already up to date), ls, gc and housekeeping, and errors that say
// what to do.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "seedd/json_text.h"
#include "support/daemon_process.h"
#include "support/process.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::Process;
using testing::RunCommand;

constexpr char kHash[] = "00112233445566778899aabbccddeeff";

using testing::Has;

class CliTest : public testing::DaemonProcessTest {
 protected:
  // A daemon on `listen`; returns once it is ready, its address in *addr.
  std::unique_ptr<Process> Daemon(const std::string& listen, std::vector<std::string> extra,
                                  std::string* addr, const fs::path& cache = {}) {
    return StartDaemon(std::move(extra), addr, cache, listen);
  }
  std::vector<std::string> Pull(const std::string& source, const fs::path& into,
                                std::vector<std::string> extra = {},
                                const std::string& name = "m") {
    return PullArgs(source, into, std::move(extra), name);
  }
};

// A mistyped command or a long flag with one dash is named with what was meant,
// in one line, exit status 2.
TEST_F(CliTest, AMistypedCommandOrAOneDashFlagIsNamedWithWhatWasMeant) {
  auto pul = RunCommand({SEEDCTL_BIN, "pul", "--source", "127.0.0.1:1"});
  EXPECT_EQ(pul.status, 2);
  EXPECT_EQ(pul.err, "seedctl: unknown command 'pul' (did you mean pull?); see --help\n");
  auto odd = RunCommand({SEEDCTL_BIN, "warm"});
  EXPECT_EQ(odd.status, 2);
  EXPECT_TRUE(Has(odd.err, "unknown command 'warm'; the commands: request, fetch")) << odd.err;
  auto one_dash = RunCommand({SEEDCTL_BIN, "pull", "-source", "127.0.0.1:1", "--model", "m",
                              "--into", (dir_.path() / "x").string()});
  EXPECT_EQ(one_dash.status, 2);
  EXPECT_EQ(one_dash.err, "seedctl: '-source' takes two dashes: --source; see --help\n");
  auto daemon = RunCommand({SEEDD_BIN, "-listen", "127.0.0.1:0"});
  EXPECT_EQ(daemon.status, 2);
  EXPECT_EQ(daemon.err, "seedd: '-listen' takes two dashes: --listen; see --help\n");
}

// --check-config opens what it names without side effects: a missing
// certificate, a model directory that is not there, a cache directory that
// cannot be written and a store URL of no known scheme are each named, exit 1.
TEST_F(CliTest, CheckConfigNamesEachFileItCannotUseAndFails) {
  auto bad = RunCommand(
      {SEEDD_BIN, "--token-file", token_file().string(), "--cache-dir", "/proc/1/seedd-cache",
       "--model", "m=" + model().string(), "--model", "gone=" + (dir_.path() / "gone").string(),
       "--tls-cert", (dir_.path() / "missing.crt").string(), "--tls-key",
       (dir_.path() / "missing.key").string(), "--store", "bogus://x", "--check-config"});
  EXPECT_EQ(bad.status, 1) << bad.err;
  EXPECT_TRUE(Has(bad.err, "missing.crt")) << bad.err;
  EXPECT_TRUE(
      Has(bad.err, "--model gone: " + (dir_.path() / "gone").string() + " is not a directory"))
      << bad.err;
  EXPECT_TRUE(Has(bad.err, "--cache-dir /proc/1/seedd-cache: /proc/1 cannot be written"))
      << bad.err;
  EXPECT_TRUE(Has(bad.err, "unknown scheme 'bogus'")) << bad.err;
  EXPECT_TRUE(Has(bad.err, "configuration has 4 problem(s)")) << bad.err;
  EXPECT_FALSE(Has(bad.out, "configuration OK"));
  auto good =
      RunCommand({SEEDD_BIN, "--token-file", token_file().string(), "--cache-dir",
                  (dir_.path() / "new" / "cache").string(), "--model", "m=" + model().string(),
                  "--store", "redis://127.0.0.1:1/0", "--check-config"});
  EXPECT_EQ(good.status, 0) << good.err;
  EXPECT_EQ(good.out, "seedd: configuration OK\n");
  EXPECT_FALSE(fs::exists(dir_.path() / "new")) << "--check-config created the cache directory";
}

// A cache directory that exists but cannot be written is refused at start, by
// a write, with the reason; not later as if every peer had failed.
TEST_F(CliTest, ADaemonRefusesACacheDirectoryItCannotWrite) {
  auto r = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", token_file().string(),
                       "--cache-dir", "/proc/1"});
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(Has(r.err, "the cache directory /proc/1 cannot be written (")) << r.err;
  EXPECT_TRUE(Has(r.err, "give it a writable --cache-dir")) << r.err;
  EXPECT_FALSE(Has(r.out, "serving on")) << r.out;
}

// A pull whose destination cannot be made (a path under a regular file) ends
// at once with the local error: not retried, the peer not blamed.
TEST_F(CliTest, APullIntoABadPathEndsAtOnceWithTheLocalError) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  std::ofstream(dir_.path() / "file") << "x";
  auto r = RunCommand(Pull(addr, dir_.path() / "file" / "dest", {"--timeout", "600"}));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(Has(r.err, "Not a directory")) << r.err;
  EXPECT_FALSE(Has(r.err, "retrying")) << r.err;
  EXPECT_FALSE(Has(r.err, "source")) << r.err;
}

// A model of thousands of small files in hundreds of directories (a compile
// cache's shape), some empty and one all zeros (no chunk is written to them),
// pulls whole with seedctl held to 128 descriptors: files and directories are
// opened a bounded number at a time, and those no chunk reached are still made.
TEST_F(CliTest, AModelOfThousandsOfSmallFilesPullsWithinASmallDescriptorLimit) {
  const fs::path small = dir_.path() / "small";
  for (int i = 0; i < 3000; ++i) {
    const fs::path p = small / ("g" + std::to_string(i % 10)) / ("d" + std::to_string(i % 300)) /
                       ("f" + std::to_string(i) + ".bin");
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    if (i % 500 != 7) out << std::string(100 + i % 900, static_cast<char>('a' + i % 26)) << i;
  }
  std::ofstream(small / "zeros.bin", std::ios::binary) << std::string(64 * 1024, '\0');
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "small=" + small.string()}, &addr);
  std::vector<std::string> argv = {"/usr/bin/prlimit", "--nofile=128:128"};
  for (std::string& a : Pull(addr, dir_.path() / "dest", {}, "small")) argv.push_back(std::move(a));
  auto r = RunCommand(argv);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(testing::SameTree(small, dir_.path() / "dest"));
  EXPECT_EQ(fs::file_size(dir_.path() / "dest" / "g7" / "d7" / "f7.bin"), 0u);
  EXPECT_EQ(fs::file_size(dir_.path() / "dest" / "zeros.bin"), 64u * 1024);
}

// Without --timeout a pull at a wrong address gives up soon (15 s), saying
// each round at once and asking whether the address is right.
TEST_F(CliTest, APullAtAWrongAddressFailsFastAndAsksAboutTheAddress) {
  auto r = RunCommand(Pull("127.0.0.1:1", dir_.path() / "dest"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(Has(r.err,
                  "seedctl: no source answered (127.0.0.1:1: connect: Connection refused); "
                  "retrying in"))
      << r.err;
  EXPECT_TRUE(Has(r.err, "gave up after 15 s; is the address right? (--wait SECONDS")) << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
}

// --progress json: one JSON object per line on stdout, progress then done; a
// failing pull's retries and its end are events too. Sizes elsewhere in MiB.
TEST_F(CliTest, PullProgressAsJsonLinesForPrograms) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  auto r = RunCommand(Pull(addr, dir_.path() / "dest", {"--progress", "json"}));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<Json> events;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    Result<Json> j = ParseJson(line);
    ASSERT_TRUE(j.ok()) << "not JSON: " << line;
    events.push_back(*j);
  }
  ASSERT_GE(events.size(), 2u) << r.out;
  EXPECT_EQ(events.front()["event"], "progress") << r.out;
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(model())) {
    if (e.is_regular_file()) total += e.file_size();
  }
  EXPECT_EQ(events.front()["total_bytes"], total) << r.out;
  EXPECT_EQ(events.back()["event"], "done") << r.out;
  EXPECT_EQ(events.back()["total_bytes"], total) << r.out;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));

  auto failed = RunCommand(
      Pull("127.0.0.1:1", dir_.path() / "other", {"--progress", "json", "--timeout", "1"}));
  EXPECT_EQ(failed.status, 2) << failed.err;
  EXPECT_TRUE(Has(failed.out, "{\"event\":\"retry\"")) << failed.out;
  EXPECT_TRUE(Has(failed.out, "{\"code\":\"Unavailable\",\"event\":\"error\"")) << failed.out;
}

// --order index: each file is reported once, as soon as it is whole and
// verified, at a path under the staging directory that holds its bytes then.
TEST_F(CliTest, PullInIndexOrderReportsEachFileAsItIsWholeAndVerified) {
  const fs::path big = dir_.path() / "big";
  fs::create_directories(big);
  for (int i = 1; i <= 4; ++i) {
    std::string bytes(600 * 1024, '\0');
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((k * 131 + i) % 251);
    std::ofstream(big / ("shard-" + std::to_string(i) + ".bin"), std::ios::binary) << bytes;
  }
  std::ofstream(big / "config.json") << "{}";
  std::string addr;
  auto origin =
      Daemon("127.0.0.1:0", {"--model", "m=" + big.string(), "--chunk-mib", "0.25"}, &addr);
  auto r = RunCommand(Pull(addr, dir_.path() / "dest", {"--progress", "json", "--order", "index"}));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> ready;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    Result<Json> j = ParseJson(line);
    ASSERT_TRUE(j.ok()) << line;
    if ((*j)["event"] != "file_ready") continue;
    ready.push_back((*j)["path"].get<std::string>());
    EXPECT_NE((*j)["at"].get<std::string>().find(".seedd"), std::string::npos) << line;
  }
  std::vector<std::string> all;
  for (const auto& e : fs::directory_iterator(big)) all.push_back(e.path().filename().string());
  std::vector<std::string> sorted_ready = ready;
  std::sort(sorted_ready.begin(), sorted_ready.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(sorted_ready, all) << r.out;  // each once
  EXPECT_TRUE(testing::SameTree(big, dir_.path() / "dest"));
  auto bad = RunCommand(Pull(addr, dir_.path() / "x", {"--order", "random"}));
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(Has(bad.err, "--order")) << bad.err;
}

// Under systemd (Type=notify) the daemon says READY=1 only once its --pull is
// done, the model in place; STATUS= lines come before it, STOPPING=1 at the end.
TEST_F(CliTest, UnderSystemdTheDaemonIsReadyOnlyOnceItsPullIsDone) {
  std::string origin_addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &origin_addr);
  const fs::path socket_path = dir_.path() / "notify";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const fs::path cache = dir_.path() / "target-cache";
  Process target({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", token_file().string(),
                  "--cache-dir", cache.string(), "--source", origin_addr, "--pull", "m"},
                 {"NOTIFY_SOCKET=" + socket_path.string()});
  std::vector<std::string> messages;
  bool model_in_place_at_ready = false;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) != 1) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    messages.emplace_back(buf, static_cast<size_t>(n));
    if (messages.back().rfind("READY=1", 0) == 0) {
      model_in_place_at_ready = testing::SameTree(model(), cache / "weights" / "m" / "current");
      break;
    }
  }
  ASSERT_FALSE(messages.empty()) << target.Stderr();
  EXPECT_EQ(messages.front(), "STATUS=starting");
  ASSERT_EQ(messages.back().rfind("READY=1\nSTATUS=serving on 127.0.0.1:", 0), 0u)
      << messages.back();
  EXPECT_TRUE(model_in_place_at_ready);
  target.Signal(SIGTERM);
  EXPECT_EQ(target.Wait(seconds(30)), 0) << target.Stderr();
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))),
            "STOPPING=1\nSTATUS=stopping");
  ::close(fd);
}

TEST_F(CliTest, SeedctlPullWaitsForAnOriginThatStartsLater) {
  uint16_t port = 0;
  testing::ListenLoopback(&port);  // closed at once: a free port, nobody listening
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Process pull(Pull(addr, dir_.path() / "dest"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::string bound;
  auto origin = Daemon(addr, {"--model", "m=" + model().string()}, &bound);
  EXPECT_EQ(pull.Wait(seconds(60)), 0) << pull.Stderr();
  EXPECT_TRUE(Has(pull.Stderr(), "no source answered (" + addr + ": connect")) << pull.Stderr();
  EXPECT_TRUE(Has(pull.Stderr(), "retrying in")) << pull.Stderr();
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
}

TEST_F(CliTest, SeedctlPullUsesAnOriginThatGoesAwayMidPullWhenItIsBack) {
  auto stalled = std::make_unique<testing::StalledOrigin>(model());
  const std::string addr = stalled->addr();
  Process pull(Pull(addr, dir_.path() / "dest", {}, "tiny"));
  ASSERT_TRUE(testing::WaitUntil([&] { return stalled->held() > 0; })) << pull.Stderr();
  stalled.reset();  // gone mid-pull: its data connections end, then nothing listens
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::string bound;
  auto back = Daemon(addr, {"--model", "tiny=" + model().string()}, &bound);
  EXPECT_EQ(pull.Wait(seconds(60)), 0) << pull.Stderr() << "\ndaemon: " << back->Stderr();
  EXPECT_TRUE(Has(pull.Stderr(), "retrying in")) << pull.Stderr();
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
}

TEST_F(CliTest, SeedctlPullGivesUpAtItsTimeoutSayingWhy) {
  auto r = RunCommand(Pull("127.0.0.1:1", dir_.path() / "dest", {"--timeout", "1"}));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(Has(r.err, "no source answered (127.0.0.1:1: connect: Connection refused)")) << r.err;
  EXPECT_TRUE(Has(r.err, "gave up after 1 s; is the address right?")) << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
}

// A volume's mount point always exists and cannot be renamed: pulled into in
// place, then up to date, then refused with other files, then replaced when asked.
TEST_F(CliTest, APullIntoAMountPointFillsItThenIsUpToDateAndReplacesOnlyWhenAsked) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  const fs::path mnt = dir_.path() / "mnt";
  fs::create_directory(mnt);
  auto q = [](const std::string& s) { return "'" + s + "'"; };
  std::string pull;
  for (const auto& a : Pull(addr, mnt)) pull += q(a) + " ";
  const std::string script = "set -u; mount -t tmpfs none " + q(mnt.string()) + " || exit 99; " +
                             pull + "; echo first=$?; " + pull + "; echo again=$?; echo x > " +
                             q((mnt / "old.txt").string()) + "; " + pull + "; echo other=$?; " +
                             pull + " --replace; echo replaced=$?; cmp " +
                             q((model() / "w.bin").string()) + " " + q((mnt / "w.bin").string()) +
                             " && echo same; ls -A " + q(mnt.string());
  auto r = RunCommand({"/usr/bin/unshare", "-rm", "sh", "-c", script}, {}, seconds(120));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "pulled m (2 files, 3.00 MiB) from 1 source(s)")) << r.out;
  EXPECT_TRUE(Has(r.out, "first=0")) << r.out;
  EXPECT_TRUE(Has(r.out, "already holds m (root digest ")) << r.out;
  EXPECT_TRUE(Has(r.out, "again=0")) << r.out;
  EXPECT_TRUE(Has(
      r.err, "holds files that are not this version ('old.txt', 'sub', 'w.bin'); pass --replace"))
      << r.err;
  EXPECT_TRUE(Has(r.out, "other=4")) << r.out;
  EXPECT_TRUE(Has(r.out, "replaced=0")) << r.out;
  EXPECT_TRUE(Has(r.out, "same\nsub\nw.bin\n")) << r.out;  // old.txt and staging gone
}

// A pinned pull takes only the version it names: `seedctl pull --root-digest H`
// and `seedd --pull NAME@H` refuse any other manifest, say both digests and
// fetch nothing; with the source's own digest they pull as usual.
// A version's identity is its content: `seedctl manifest DIR` (named after the
// directory, chunk size left to its default) prints the root digest a daemon
// serving DIR as "llama" offers, so a pin taken from it pulls.
TEST_F(CliTest, AManifestsRootDigestDoesNotDependOnTheNameItIsServedAs) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "llama=" + model().string()}, &addr);
  auto printed = RunCommand({SEEDCTL_BIN, "manifest", model().string()});
  ASSERT_EQ(printed.status, 0) << printed.err;
  const std::string key = "\"root_digest\": \"";
  const size_t at = printed.out.find(key);
  ASSERT_NE(at, std::string::npos) << printed.out;
  const std::string root = printed.out.substr(at + key.size(), 64);
  EXPECT_TRUE(Has(printed.out, "\"model\": \"" + model().filename().string() + "\""));
  auto pinned = RunCommand(Pull(addr, dir_.path() / "dest", {"--root-digest", root}, "llama"));
  EXPECT_EQ(pinned.status, 0) << pinned.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
}

TEST_F(CliTest, APinnedPullRefusesAnyOtherVersion) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  auto printed = RunCommand({SEEDCTL_BIN, "manifest", model().string(), "--model", "m"});
  ASSERT_EQ(printed.status, 0) << printed.err;
  const std::string key = "\"root_digest\": \"";
  const size_t at = printed.out.find(key);
  ASSERT_NE(at, std::string::npos) << printed.out;
  const std::string root = printed.out.substr(at + key.size(), 64);
  const std::string other(64, 'a');

  auto wrong = RunCommand(Pull(addr, dir_.path() / "dest", {"--root-digest", other}));
  EXPECT_EQ(wrong.status, 4) << wrong.err;
  EXPECT_TRUE(Has(wrong.err, "at root digest " + root + ", not the pinned " + other)) << wrong.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
  auto bad = RunCommand(Pull(addr, dir_.path() / "dest", {"--root-digest", "abc"}));
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(Has(bad.err, "is not a root digest")) << bad.err;
  auto right = RunCommand(Pull(addr, dir_.path() / "dest", {"--root-digest", root}));
  EXPECT_EQ(right.status, 0) << right.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));

  const fs::path cache = dir_.path() / "pinned-cache";
  auto refused = RunCommand(
      {SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", token_file().string(), "--cache-dir",
       cache.string(), "--source", addr, "--pull", "m@" + other, "--pull-timeout", "1"},
      {}, seconds(60));
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err, "not the pinned " + other)) << refused.err;
  EXPECT_FALSE(fs::exists(cache / "weights" / "m" / "current"));
  std::string pinned_addr;
  auto pinned = Daemon("127.0.0.1:0", {"--source", addr, "--pull", "m@" + root}, &pinned_addr,
                       dir_.path() / "pinned-ok");
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "pinned-ok" / "weights" / "m" / "current"));
}

// An origin hands out manifests with SHA-256 per chunk by default (the same
// root digest seedctl manifest prints by default, and with --chunk-digest
// sha256); a daemon pulls it with --verify sha256 and relays it under that same
// manifest, and seedctl pulls from that relay, byte-identical at each hop.
// --chunk-digest xxh3 makes another version.
TEST_F(CliTest, Sha256ChunksAreTheDefaultAndTravelFromOriginThroughARelayToSeedctl) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  auto manifest = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {SEEDCTL_BIN, "manifest", model().string(), "--model", "m"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto printed = RunCommand(argv);
    EXPECT_EQ(printed.status, 0) << printed.err;
    return printed.out;
  };
  auto root_of = [](const std::string& text) {
    const std::string key = "\"root_digest\": \"";
    const size_t at = text.find(key);
    return at == std::string::npos ? std::string() : text.substr(at + key.size(), 64);
  };
  const std::string sha = manifest({"--chunk-digest", "sha256"});
  EXPECT_EQ(manifest({}), sha);
  const std::string xxh3 = manifest({"--chunk-digest", "xxh3"});
  EXPECT_TRUE(Has(sha, "\"chunk_digest\": \"sha256\"")) << sha;
  EXPECT_FALSE(Has(xxh3, "\"chunk_digest\"")) << xxh3;
  const std::string sha_root = root_of(sha);
  const std::string xxh3_root = root_of(xxh3);
  ASSERT_EQ(sha_root.size(), 64u);
  EXPECT_NE(sha_root, xxh3_root);

  std::string relay_addr;
  auto relay = Daemon(
      "127.0.0.1:0",
      {"--source", addr, "--pull", "m@" + sha_root, "--verify", "sha256", "--log-level", "info"},
      &relay_addr, dir_.path() / "relay");
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "relay" / "weights" / "m" / "current"));
  auto pulled = RunCommand(Pull(relay_addr, dir_.path() / "dest", {"--root-digest", sha_root}));
  EXPECT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
  // The XXH3 version of the same files is another version: a pin on it is refused.
  auto other = RunCommand(Pull(addr, dir_.path() / "other", {"--root-digest", xxh3_root}));
  EXPECT_EQ(other.status, 4) << other.err;
  auto bad = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0", "--model", "m=" + model().string(),
                         "--chunk-digest", "md5"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_TRUE(Has(bad.err, "--chunk-digest")) << bad.err;
}

// seedd --config FILE sets flags from TOML (dashes or underscores), the command
// line overrides it, and every mistake in it names the file, line and key.
TEST_F(CliTest, AConfigFileSetsFlagsTheCommandLineOverridesAndErrorsNameTheLine) {
  uint16_t busy_port = 0;
  UniqueFd busy = testing::ListenLoopback(&busy_port);  // the file's address is taken
  const fs::path config = dir_.path() / "seedd.toml";
  std::ofstream(config) << "# settings of one daemon\n"
                        << "listen = \"127.0.0.1:" << busy_port << "\"\n"
                        << "token_file = \"" << token_file().string() << "\"\n"
                        << "cache-dir = \"" << (dir_.path() / "cache").string() << "\"\n"
                        << "model = [\"m=" << model().string() << "\"]\n"
                        << "chunk-mib = 0.25\n"
                        << "chunk-digest = \"sha256\"\n"
                        << "no-autotune = true\n"
                        << "log-level = \"warn\"\n";
  auto refused = RunCommand({SEEDD_BIN, "--config", config.string()});
  EXPECT_EQ(refused.status, 2) << refused.err;  // the file's --listen was used
  EXPECT_TRUE(Has(refused.err, std::to_string(busy_port))) << refused.err;

  Process daemon({SEEDD_BIN, "--config", config.string(), "--listen", "127.0.0.1:0"});
  auto line = daemon.ReadLine(seconds(30));
  ASSERT_TRUE(line.has_value()) << daemon.Stderr();
  const std::string addr = line->substr(std::string("seedd: serving on ").size());
  auto printed = RunCommand({SEEDCTL_BIN, "manifest", model().string(), "--model", "m",
                             "--chunk-mib", "0.25", "--chunk-digest", "sha256"});
  const std::string key = "\"root_digest\": \"";
  ASSERT_NE(printed.out.find(key), std::string::npos) << printed.err;
  const std::string root = printed.out.substr(printed.out.find(key) + key.size(), 64);
  // The daemon's manifest is the one with the file's chunk size and digest.
  auto pulled = RunCommand(Pull(addr, dir_.path() / "dest", {"--root-digest", root}));
  EXPECT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));

  auto error_of = [&](const std::string& text) {
    std::ofstream(config, std::ios::trunc) << text;
    auto r = RunCommand({SEEDD_BIN, "--config", config.string()});
    EXPECT_EQ(r.status, 2) << r.err;
    return r.err;
  };
  const std::string file = config.string();
  std::string err = error_of("listen = \"127.0.0.1:0\"\n\nchunk-mb = 2\n");
  EXPECT_TRUE(Has(err, file + ":3: key 'chunk-mb': unknown key (did you mean 'chunk-mib'?)"))
      << err;
  err = error_of("chunk-mib = 0\n");
  EXPECT_TRUE(Has(err, file + ":1: key 'chunk-mib': --chunk-mib: Value 0 is neither auto nor a "
                              "size from 0.0625 to 1024 MiB"))
      << err;
  err = error_of("\nlisten = \"nowhere\"\n");
  EXPECT_TRUE(Has(err, file + ":2: key 'listen': --listen: invalid address 'nowhere'")) << err;
  err = error_of("source = \"127.0.0.1:1\"\nlisten = [\"a:1\", \"b:2\"]\n");
  EXPECT_TRUE(Has(err, file + ":2: key 'listen': takes one value, not an array")) << err;
  err = error_of("no-autotune = \"yes\"\n");
  EXPECT_TRUE(Has(err, file + ":1: key 'no-autotune': expects true or false")) << err;
  err = error_of("listen = \n");
  EXPECT_TRUE(Has(err, file + ":1:")) << err;
  err = error_of("[daemon]\nlisten = \"127.0.0.1:0\"\n");
  EXPECT_TRUE(Has(err, file + ":1: key 'daemon': a table")) << err;
}

TEST_F(CliTest, TheSummaryCountsOnlySourcesThatDelivered) {
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr);
  auto r = RunCommand(Pull(addr, dir_.path() / "dest", {"--source", "127.0.0.1:1"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "from 1 source(s) and 0 relay(s)")) << r.out;
}

TEST_F(CliTest, SeedctlLsListsModelsAndArtifactKeys) {
  const fs::path cache = dir_.path() / "cache";
  testing::WriteRandom(cache / "triton" / kHash / "kernel.bin", 100, 1);
  testing::WriteRandom(cache / "vllm" / kHash / "graph.bin", 100, 2);
  std::string addr;
  auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &addr, cache);
  auto ls = RunCommand({SEEDCTL_BIN, "ls", "--source", addr, "--token-file", token_file()});
  ASSERT_EQ(ls.status, 0) << ls.err;
  EXPECT_TRUE(Has(ls.out, "MODEL")) << ls.out;
  EXPECT_TRUE(Has(ls.out, "m ")) << ls.out;
  // Aligned columns: each row's digest starts where the header's does; the
  // size in binary units, then the files.
  const size_t header_digest = ls.out.find("ROOT DIGEST");
  const size_t row = ls.out.find("\nm ");
  ASSERT_NE(row, std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find_first_not_of(' ', row + 2) - (row + 1), header_digest) << ls.out;
  EXPECT_TRUE(Has(ls.out, "3.00 MiB       2")) << ls.out;
  EXPECT_TRUE(Has(ls.out, std::string("triton/") + kHash + "/kernel.bin")) << ls.out;
  EXPECT_TRUE(Has(ls.out, std::string("vllm/") + kHash + "/graph.bin")) << ls.out;
  auto some = RunCommand(
      {SEEDCTL_BIN, "ls", "--source", addr, "--token-file", token_file(), "--prefix", "triton/"});
  ASSERT_EQ(some.status, 0) << some.err;
  EXPECT_TRUE(Has(some.out, "kernel.bin"));
  EXPECT_FALSE(Has(some.out, "graph.bin"));
}

// Three checkpoints pulled in turn: the daemon keeps --keep-versions (2) of them,
// current included; seedctl gc keeps fewer when asked.
TEST_F(CliTest, PullsKeepTheNewestVersionsAndGcRemovesMoreByHand) {
  const fs::path cache = dir_.path() / "puller";
  for (unsigned seed = 1; seed <= 3; ++seed) {
    testing::WriteRandom(model() / "w.bin", 1 << 20, 10 + seed);
    std::string origin_addr;
    auto origin = Daemon("127.0.0.1:0", {"--model", "m=" + model().string()}, &origin_addr,
                         dir_.path() / ("origin" + std::to_string(seed)));
    std::string addr;
    auto puller =
        Daemon("127.0.0.1:0", {"--source", origin_addr, "--pull", "m", "--log-level", "info"},
               &addr, cache);
    puller->Signal(SIGTERM);
    puller->Wait(seconds(10));
    if (seed == 3) {
      EXPECT_TRUE(Has(puller->Stderr(), "removed 1 old version(s)")) << puller->Stderr();
    }
  }
  auto versions = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(cache / "weights" / "m")) {
      n += e.is_directory() && !e.is_symlink() && e.path().filename().string()[0] != '.';
    }
    return n;
  };
  EXPECT_EQ(versions(), 2u);
  const fs::path current = fs::read_symlink(cache / "weights" / "m" / "current");
  auto dry = RunCommand(
      {SEEDCTL_BIN, "gc", "--cache-dir", cache.string(), "--keep-versions", "1", "--dry-run"});
  ASSERT_EQ(dry.status, 0) << dry.err;
  EXPECT_TRUE(Has(dry.out, "would remove 1 item(s)")) << dry.out;
  EXPECT_EQ(versions(), 2u);
  auto gc = RunCommand({SEEDCTL_BIN, "gc", "--cache-dir", cache.string(), "--keep-versions", "1"});
  ASSERT_EQ(gc.status, 0) << gc.err;
  EXPECT_EQ(versions(), 1u);
  EXPECT_TRUE(fs::exists(cache / "weights" / "m" / current));
}

TEST_F(CliTest, StorePutRefusesAKeyNoDaemonWouldServe) {
  const std::string store = "file://" + (dir_.path() / "store").string();
  fs::create_directory(dir_.path() / "store");
  auto r = RunCommand(
      {SEEDCTL_BIN, "store", "put", "--store", store, "triton/xyz/a.bin", token_file().string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r.err,
                  "no daemon would serve 'triton/xyz/a.bin': invalid config_hash "
                  "(expected 16-128 lowercase hex digits"))
      << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "store" / "triton"));
  auto ok = RunCommand({SEEDCTL_BIN, "store", "put", "--store", store,
                        std::string("triton/") + kHash + "/a.bin", token_file().string()});
  EXPECT_EQ(ok.status, 0) << ok.err;
}

TEST_F(CliTest, APortThatAcceptsAndSaysNothingIsNamedAtTheTimeout) {
  uint16_t port = 0;
  UniqueFd silent = testing::ListenLoopback(&port);  // the kernel accepts; nobody answers
  const auto start = std::chrono::steady_clock::now();
  auto r = RunCommand({SEEDCTL_BIN, "request", "--source", "127.0.0.1:" + std::to_string(port),
                       "--token-file", token_file(), "--kind", "artifact", "--timeout", "0.5"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r.err, "no response began in time")) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

TEST_F(CliTest, AMisspelledFlagSuggestsTheRightOneAndGlobalFlagsComeAnywhere) {
  auto r = RunCommand(
      {SEEDCTL_BIN, "pull", "--source", "h:1", "--model", "m", "--into", "d", "--tokenfile", "t"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r.err, "(did you mean --token-file?)")) << r.err;
  auto d = RunCommand({SEEDD_BIN, "--keep-version", "3"});
  EXPECT_EQ(d.status, 2);
  EXPECT_TRUE(Has(d.err, "(did you mean --keep-versions?)")) << d.err;
  auto after = RunCommand({SEEDCTL_BIN, "manifest", model().string(), "--log-level", "error"});
  EXPECT_EQ(after.status, 0) << after.err;
  auto no_token = RunCommand({SEEDCTL_BIN, "ls", "--source", "127.0.0.1:1"}, {"SEEDD_TOKEN="});
  EXPECT_EQ(no_token.status, 2);
  EXPECT_TRUE(Has(no_token.err, "pass --token-file FILE")) << no_token.err;
  EXPECT_TRUE(Has(no_token.err, "set SEEDD_TOKEN to the token itself")) << no_token.err;
}

// A source name that resolves to several addresses (a Kubernetes headless
// service) is a seed at each: three daemons on 127.0.0.2-4 behind one name in
// /etc/hosts (bound over it in a private mount namespace), one pull connects to
// every one of them.
TEST_F(CliTest, ASourceNameWithSeveralAddressesIsASeedAtEach) {
  testing::WriteRandom(model() / "w.bin", 128 << 20, 4);  // long enough to reach all three
  std::string first;
  auto a = Daemon("127.0.0.2:0", {"--model", "m=" + model().string(), "--log-level", "debug"},
                  &first, dir_.path() / "a");
  const std::string port = first.substr(first.rfind(':') + 1);
  std::string addr;
  auto b = Daemon("127.0.0.3:" + port, {"--model", "m=" + model().string(), "--log-level", "debug"},
                  &addr, dir_.path() / "b");
  auto c = Daemon("127.0.0.4:" + port, {"--model", "m=" + model().string(), "--log-level", "debug"},
                  &addr, dir_.path() / "c");
  const fs::path hosts = dir_.path() / "hosts";
  std::ofstream(hosts) << "127.0.0.1 localhost\n127.0.0.2 seeds.test\n127.0.0.3 seeds.test\n"
                          "127.0.0.4 seeds.test\n";
  auto q = [](const std::string& s) { return "'" + s + "'"; };
  std::string pull;
  for (const auto& arg : Pull("seeds.test:" + port, dir_.path() / "dest", {"--log-level", "info"}))
    pull += q(arg) + " ";
  const std::string script =
      "mount --bind " + q(hosts.string()) + " /etc/hosts || exit 99; " + pull;
  auto r = RunCommand({"/usr/bin/unshare", "-rm", "sh", "-c", script}, {}, seconds(120));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const std::string resolved = "source seeds.test:" + port + " resolves to 3 addresses";
  const size_t at = r.err.find(resolved);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(resolved, at + 1), std::string::npos) << "said twice:\n" << r.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
  for (auto* d : {a.get(), b.get(), c.get()}) {
    d->Signal(SIGTERM);
    d->Wait(seconds(10));
    EXPECT_TRUE(Has(d->Stderr(), "weight_data")) << d->Stderr();
  }
}

}  // namespace
}  // namespace seedd
