// Models from where fleets keep them: an OCI registry (Debian's docker-registry)
// holding ModelPack artifacts pushed by skopeo, fetched by seedd and verified
// against the layers' digests, then served to the swarm.
#include "seedd/origins.h"

#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "common/crypto.h"
#include "support/daemon_process.h"
#include "support/fake_http.h"
#include "support/servers.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::OciRegistryServer;
using testing::PushModelPack;
using testing::RunCommand;

std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// `files` (path -> bytes) written below `dir`.
void WriteFiles(const fs::path& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [path, bytes] : files) {
    fs::create_directories((dir / path).parent_path());
    std::ofstream(dir / path, std::ios::binary) << bytes;
  }
}

// A TCP proxy on the loopback in front of `port` whose answers trickle at
// `rate` bytes per second per connection (requests pass at once): an upstream
// slow enough that a piece takes seconds to land.
class SlowProxy {
 public:
  SlowProxy(uint16_t port, size_t rate) : target_(port), rate_(rate) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "proxy: " << std::strerror(errno);
    }
    port_ = ntohs(addr.sin_port);
    accepter_ = std::thread([this] { Accept(); });
  }
  ~SlowProxy() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    accepter_.join();
    ::close(listener_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void Accept() {
    for (;;) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0 || stop_) {
        if (client >= 0) ::close(client);
        return;
      }
      const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(target_);
      if (::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(upstream);
        continue;
      }
      fds_.push_back(client);
      fds_.push_back(upstream);
      pumps_.emplace_back([client, upstream] { Pump(client, upstream, 0); });
      pumps_.emplace_back([this, client, upstream] { Pump(upstream, client, rate_); });
    }
  }
  // From `from` to `to`, at most `rate` bytes a second (0: as they come).
  static void Pump(int from, int to, size_t rate) {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0) break;
      if (send(to, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      if (rate > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(n * 1000000 / rate));
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  const uint16_t target_;
  const size_t rate_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accepter_;
  std::vector<int> fds_;  // only the accepter adds, before the destructor reads
  std::vector<std::thread> pumps_;
};

// A model of five files (defined below).
std::map<std::string, std::string> AModel();

class OriginsTest : public testing::DaemonProcessTest {
 protected:
  std::string Push(OciRegistryServer& registry, const std::string& repo_tag,
                   const std::map<std::string, std::string>& files) {
    return PushModelPack(dir_.path() / ("layout-" + std::to_string(layouts_++)),
                         "docker://" + registry.host() + "/" + repo_tag, files);
  }
  // Changes the byte at `at` of the blob `digest` in the registry's storage: a
  // blob that no longer matches the digest it is listed under.
  static void ChangeBlob(OciRegistryServer& registry, const std::string& digest,
                         std::streamoff at) {
    std::fstream blob(registry.BlobData(digest), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(blob.good());
    blob.seekp(at);
    blob.put('\x42');
  }
  // A daemon serving as "m" the files of `model` with one byte of its second
  // shard changed (*forged: those files; *addr: its address).
  std::unique_ptr<testing::Process> ServeForged(const std::map<std::string, std::string>& model,
                                                std::map<std::string, std::string>* forged,
                                                std::string* addr) {
    *forged = model;
    (*forged)["model-00002-of-00002.bin"][10] ^= 1;
    const fs::path dir = dir_.path() / "forged";
    WriteFiles(dir, *forged);
    return StartDaemon({"--model", "m=" + dir.string()}, addr, dir_.path() / "liar-cache");
  }
  // Every file below `dir`, by relative path.
  static std::map<std::string, std::string> Files(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file())
        out[fs::relative(e.path(), dir).string()] = testing::ReadAll(e.path());
    }
    return out;
  }
  // Sets KEY_PREFIX<index> and KEY_PREFIX<index>.<piece> to `value` (and its
  // options, e.g. PX 1500) in `redis` for each of AModel()'s 5 files and each
  // piece its largest file travels as (3 of 1 MiB with --origin-range-mib 1).
  static void SetForEachFile(const testing::RedisServer& redis, const std::string& key_prefix,
                             const std::vector<std::string>& value) {
    for (int k = 0; k < 5; ++k) {
      for (const std::string suffix : {"", ".0", ".1", ".2"}) {
        std::vector<std::string> args = {"SET", key_prefix + std::to_string(k) + suffix};
        args.insert(args.end(), value.begin(), value.end());
        RedisCli(redis, std::move(args));
      }
    }
  }
  // A daemon serving models/test:v1 of `registry` with `redis` as its registry
  // (files over 1 MiB fetched in pieces of 1 MiB); a pull from it must bring
  // `model`. Its log, once stopped.
  std::string ServeAndPull(OciRegistryServer& registry, const testing::RedisServer& redis,
                           const std::map<std::string, std::string>& model) {
    std::string addr;
    auto daemon =
        StartDaemon({"--model", "m=oci://" + registry.host() + "/models/test:v1", "--registry",
                     redis.url(), "--log-level", "info", "--origin-range-mib", "1"},
                    &addr, dir_.path() / "cache");
    auto pulled = RunCommand(PullArgs(addr, dir_.path() / "into"));
    EXPECT_EQ(pulled.status, 0) << pulled.err;
    EXPECT_EQ(Files(dir_.path() / "into"), model);
    daemon->Signal(SIGTERM);
    EXPECT_TRUE(daemon->Wait(std::chrono::seconds(20)).has_value());
    return daemon->Stderr();
  }
  // A daemon of a fleet serving `url` (m=...) with `redis`, large files in
  // pieces of 1 MiB, its cache cache-`i`; not waited for.
  std::unique_ptr<testing::Process> StartFleetDaemon(const std::string& url,
                                                     const testing::RedisServer& redis, int i) {
    std::string unused;
    return StartDaemon({"--model", url, "--registry", redis.url(), "--log-level", "info",
                        "--origin-range-mib", "1"},
                       &unused, dir_.path() / ("cache-" + std::to_string(i)), "127.0.0.1:0",
                       /*wait_ready=*/false);
  }
  // Waits until `redis` holds `count` keys matching `pattern` (`what` names
  // them if they never come; `daemon` is the one to write them).
  static void WaitForKeys(const testing::RedisServer& redis, const std::string& pattern,
                          size_t count, const std::string& what, testing::Process& daemon) {
    for (int tries = 0;; ++tries) {
      ASSERT_LT(tries, 500) << what << " never seen:\n" << daemon.Stderr();
      const std::string keys = RedisCli(redis, {"KEYS", pattern});
      if (!keys.empty() &&
          static_cast<size_t>(std::count(keys.begin(), keys.end(), '\n')) + 1 >= count) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Pulls the model from each of `daemons` (once ready) into into-<i>, which
  // must hold `model`; their addresses in *addrs.
  void PullFromEach(std::vector<std::unique_ptr<testing::Process>>& daemons,
                    const std::map<std::string, std::string>& model,
                    std::vector<std::string>* addrs) {
    for (size_t i = 0; i < daemons.size(); ++i) {
      addrs->push_back(ReadyAddress(*daemons[i]));
      auto pulled =
          RunCommand(PullArgs(addrs->back(), dir_.path() / ("into-" + std::to_string(i))));
      ASSERT_EQ(pulled.status, 0) << pulled.err;
      EXPECT_EQ(Files(dir_.path() / ("into-" + std::to_string(i))), model);
    }
  }
  // Stops `daemons`; the parts they fetched from upstream, summed (their logs
  // in *logs).
  static void StopAndCountUpstream(std::vector<std::unique_ptr<testing::Process>>& daemons,
                                   int* upstream, std::string* logs) {
    for (auto& d : daemons) {
      d->Signal(SIGTERM);
      ASSERT_TRUE(d->Wait(std::chrono::seconds(20)).has_value());
      std::smatch m;
      const std::string log = d->Stderr();
      ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(from upstream \((\d+) parts\))"))) << log;
      *upstream += std::stoi(m[1]);
      *logs += log;
    }
  }
  // redis-cli --raw ARGS... against `redis`: its output, trailing newlines cut.
  static std::string RedisCli(const testing::RedisServer& redis, std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/redis-cli", "-p", std::to_string(redis.port()), "--raw"});
    auto r = RunCommand(args);
    EXPECT_EQ(r.status, 0) << r.err;
    std::string out = r.out;
    out.erase(out.find_last_not_of('\n') + 1);
    return out;
  }
  // A first daemon fetches the whole model; the registry is then set as if it
  // were still fetching the shard's first piece (file 1, piece 0: its claim
  // held elsewhere, its live record naming the first daemon, its part not
  // published), with the piece's digest list replaced by other digests when
  // `lying_list`. A second daemon then pulls that piece from the first "as it
  // lands"; the part is published again once it is pulling. Both daemons must
  // serve the model byte for byte; the second's log in *second.
  void PullAsIfLanding(bool lying_list, std::string* second) {
    testing::RedisServer redis;
    OciRegistryServer registry;
    const auto model = AModel();
    const std::string hex = Push(registry, "models/test:v1", model).substr(7);
    const std::string url = "m=oci://" + registry.host() + "/models/test:v1";
    std::vector<std::unique_ptr<testing::Process>> daemons;
    daemons.push_back(StartFleetDaemon(url, redis, 0));
    const std::string first = ReadyAddress(*daemons[0]);
    const std::string id = "1.0";
    const std::string part_key = "seedd:origin-part:" + hex + ":" + id;
    const std::string list_key = "seedd:origin-digests:" + hex + ":" + id;
    const std::string part = RedisCli(redis, {"GET", part_key});
    ASSERT_FALSE(part.empty());
    ASSERT_EQ(RedisCli(redis, {"LLEN", list_key}), "4");  // still listed (60 s)
    if (lying_list) {
      RedisCli(redis, {"DEL", list_key});
      for (int c = 0; c < 4; ++c)
        RedisCli(redis, {"RPUSH", list_key, Sha256Hex("not chunk " + std::to_string(c))});
    }
    const std::string landing_root = Sha256Hex("seedd-landing:" + hex + ":" + id);
    const Json live = {
        {"root", landing_root}, {"holder", first}, {"offset", 0}, {"length", uint64_t{1} << 20}};
    RedisCli(redis, {"DEL", part_key, "seedd:origin-root:" + hex});
    RedisCli(redis,
             {"SET", "seedd:origin-lease:" + hex + ":" + id, "a-daemon-elsewhere", "PX", "60000"});
    RedisCli(redis, {"SET", "seedd:origin-live:" + hex + ":" + id, live.dump(), "PX", "60000"});
    daemons.push_back(StartFleetDaemon(url, redis, 1));
    // The second daemon in the landing piece's swarm: the part published again.
    for (int tries = 0;
         std::stoi("0" + RedisCli(redis, {"ZCARD", "seedd:swarm:" + landing_root})) < 2; ++tries) {
      ASSERT_LT(tries, 500) << daemons[1]->Stderr();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    RedisCli(redis, {"SET", part_key, part, "PX", "600000"});
    const std::string second_addr = ReadyAddress(*daemons[1]);
    for (const std::string& addr : {first, second_addr}) {
      auto pulled = RunCommand(PullArgs(addr, dir_.path() / ("into-" + addr)));
      ASSERT_EQ(pulled.status, 0) << pulled.err;
      EXPECT_EQ(Files(dir_.path() / ("into-" + addr)), model);
    }
    int upstream = 0;
    std::string logs;
    ASSERT_NO_FATAL_FAILURE(StopAndCountUpstream(daemons, &upstream, &logs));
    *second = daemons[1]->Stderr();
  }
  // AModel() pushed with `file` changed upstream after its digest was
  // recorded; a fleet daemon fetching it must fail (not hang). Its log in
  // *log, the version's hex in *hex.
  void FailOnACorruptFile(const testing::RedisServer& redis, const std::string& file,
                          std::string* log, std::string* hex) {
    OciRegistryServer registry;
    auto model = AModel();
    *hex = Push(registry, "models/test:v1", model).substr(7);
    ASSERT_NO_FATAL_FAILURE(ChangeBlob(registry, "sha256:" + Sha256Hex(model[file]), 1000));
    std::string addr;
    auto daemon =
        StartDaemon({"--model", "m=oci://" + registry.host() + "/models/test:v1", "--registry",
                     redis.url(), "--log-level", "info", "--origin-range-mib", "1"},
                    &addr, dir_.path() / "cache", "127.0.0.1:0", /*wait_ready=*/false);
    auto status = daemon->Wait(std::chrono::seconds(30));
    ASSERT_TRUE(status.has_value()) << "still running after 30 s:\n" << daemon->Stderr();
    EXPECT_NE(*status, 0);
    *log = daemon->Stderr();
  }
  // The registry behind a proxy answering at 512 KiB/s (a 1 MiB piece takes
  // about 2 s to land); a second daemon started while the first fetches the
  // shard's piece 0 must pull it as it lands, byte for byte, no landing pull
  // failing, each piece fetched from upstream once. With `stale_list`, the
  // piece's digest list holds two digests of an earlier holder at the start.
  void LandWhileASecondDaemonJoins(bool stale_list) {
    testing::RedisServer redis;
    OciRegistryServer registry;
    const auto model = AModel();
    const std::string hex = Push(registry, "models/test:v1", model).substr(7);
    if (stale_list) {
      for (const char* left : {"left by a daemon", "that died"}) {
        RedisCli(redis, {"RPUSH", "seedd:origin-digests:" + hex + ":1.0", Sha256Hex(left)});
      }
    }
    SlowProxy slow(registry.port(), 512 << 10);
    const std::string url = "m=oci://" + slow.host() + "/models/test:v1";
    std::vector<std::unique_ptr<testing::Process>> daemons;
    daemons.push_back(StartFleetDaemon(url, redis, 0));
    // The shard's first piece landing at the first daemon, with no part yet
    // (the shard is file 1 of the listing: config.json, model-00001, ...).
    ASSERT_NO_FATAL_FAILURE(
        WaitForKeys(redis, "seedd:origin-live:" + hex + ":1.0", 1, "piece 0 landing", *daemons[0]));
    daemons.push_back(StartFleetDaemon(url, redis, 1));
    std::vector<std::string> addrs;
    ASSERT_NO_FATAL_FAILURE(PullFromEach(daemons, model, &addrs));
    int upstream = 0;
    std::string logs;
    ASSERT_NO_FATAL_FAILURE(StopAndCountUpstream(daemons, &upstream, &logs));
    EXPECT_TRUE(Has(daemons[1]->Stderr(),
                    "pulled piece 0 of model-00001-of-00002.bin (1.00 MiB) from the fleet while it "
                    "landed upstream"))
        << daemons[1]->Stderr() << daemons[0]->Stderr();
    // No landing pull failed: a piece whose file is complete at the daemon
    // serving it is served from the whole file from then on, not lost with its
    // own copy.
    EXPECT_FALSE(Has(logs, "but does not serve it")) << logs;
    EXPECT_FALSE(Has(logs, "while it lands upstream failed")) << logs;
    // 3 pieces of the shard and 3 other files (the duplicate tokenizer
    // copied): each fetched from upstream once.
    EXPECT_EQ(upstream, 6) << logs;
  }
  int layouts_ = 0;
};

std::string Md5HexOf(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_md5(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

std::map<std::string, std::string> AModel() {
  return {{"model-00001-of-00002.bin", RandomBytes(3 << 20, 1)},
          {"model-00002-of-00002.bin", RandomBytes(1 << 20, 2)},
          {"config.json", R"({"architectures": ["Test"]})"},
          {"tokenizer/tokenizer.json", RandomBytes(100000, 3)},
          // The same bytes under a second path: fetched once.
          {"tokenizer.json", RandomBytes(100000, 3)}};
}

TEST_F(OriginsTest, AModelPackPushedBySkopeoIsServedByADaemonAndPulledThroughTheSwarmByteForByte) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);

  std::string origin_addr;
  auto origin = StartDaemon(
      {"--model", "m=oci://" + registry.host() + "/models/test:v1", "--log-level", "info"},
      &origin_addr, dir_.path() / "origin-cache");
  std::string relay_addr;
  auto relay = StartDaemon({"--source", origin_addr, "--pull", "m", "--log-level", "info"},
                           &relay_addr, dir_.path() / "relay-cache");
  // --verify sha256 checks every file against the manifest's SHA-256, which for
  // a model from a registry is its layer digest: verified from registry to engine.
  auto pulled = RunCommand(
      PullArgs(relay_addr, dir_.path() / "into", {"--wait", "60", "--verify", "sha256"}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  origin->Signal(SIGTERM);
  ASSERT_TRUE(origin->Wait(std::chrono::seconds(20)).has_value());
  const std::string log = origin->Stderr();
  EXPECT_TRUE(Has(log, "every file matched its upstream digest")) << log;
  // The duplicated tokenizer came from upstream once.
  EXPECT_TRUE(Has(log, "97.7 KiB reused locally")) << log;

  // Restarted, the daemon finds the version held and fetches nothing.
  auto again = StartDaemon(
      {"--model", "m=oci://" + registry.host() + "/models/test:v1", "--log-level", "info"},
      &origin_addr, dir_.path() / "origin-cache");
  again->Signal(SIGTERM);
  ASSERT_TRUE(again->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(again->Stderr(), "is held already")) << again->Stderr();
}

// A restart while the registry is down serves the copy fetched earlier (as
// recorded) and says so; with nothing held, the daemon does not start.
TEST_F(OriginsTest, ARestartWithTheRegistryDownServesTheCopyFetchedEarlierAndSaysSo) {
  const auto model = AModel();
  auto registry = std::make_unique<OciRegistryServer>();
  Push(*registry, "models/test:v1", model);
  const std::string url = "m=oci://" + registry->host() + "/models/test:v1";
  std::string origin_addr;
  {
    auto first = StartDaemon({"--model", url, "--log-level", "info"}, &origin_addr,
                             dir_.path() / "origin-cache");
    first->Signal(SIGTERM);
    ASSERT_TRUE(first->Wait(std::chrono::seconds(20)).has_value());
  }
  registry.reset();  // down

  auto again = StartDaemon({"--model", url, "--log-level", "info"}, &origin_addr,
                           dir_.path() / "origin-cache");
  auto pulled = RunCommand(PullArgs(origin_addr, dir_.path() / "into", {"--wait", "30"}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);
  again->Signal(SIGTERM);
  ASSERT_TRUE(again->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(again->Stderr(), "the upstream cannot be reached")) << again->Stderr();
  EXPECT_TRUE(Has(again->Stderr(), "serving the copy fetched from it earlier")) << again->Stderr();

  // Another cache, nothing held: the daemon exits naming the URL.
  std::string unused;
  auto none = StartDaemon({"--model", url}, &unused, dir_.path() / "empty-cache", "127.0.0.1:0",
                          /*wait_ready=*/false);
  const auto exited = none->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(exited.has_value());
  EXPECT_NE(*exited, 0);
  EXPECT_TRUE(Has(none->Stderr(), "/v2/models/test/manifests/v1")) << none->Stderr();
}

// seedctl pull --from takes the upstream's URL: no daemon, every file checked
// against its layer digest, nothing left beside the directory; a directory
// holding other files is refused before anything moves, or swapped with
// --replace.
TEST_F(OriginsTest, SeedctlPullFromARegistryUrlFetchesTheModelWithNoDaemon) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  const fs::path into = dir_.path() / "engine" / "model";
  fs::create_directories(into);  // a volume's mount point: exists, empty
  auto pulled = RunCommand({SEEDCTL_BIN, "pull", "--from", url, "--into", into.string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(into), model);
  EXPECT_TRUE(Has(pulled.out, "every file matched its upstream digest")) << pulled.out;
  std::vector<std::string> beside;
  for (const auto& e : fs::directory_iterator(into.parent_path())) {
    beside.push_back(e.path().filename().string());
  }
  EXPECT_EQ(beside, std::vector<std::string>{"model"});

  auto model2 = model;
  model2["config.json"] = R"({"architectures": ["Test2"]})";
  Push(registry, "models/test:v2", model2);
  const std::string url2 = "oci://" + registry.host() + "/models/test:v2";
  auto refused = RunCommand({SEEDCTL_BIN, "pull", "--from", url2, "--into", into.string()});
  EXPECT_EQ(refused.status, 4);
  EXPECT_TRUE(Has(refused.err, "pass --replace")) << refused.err;
  EXPECT_EQ(Files(into), model);
  auto replaced =
      RunCommand({SEEDCTL_BIN, "pull", "--from", url2, "--into", into.string(), "--replace"});
  ASSERT_EQ(replaced.status, 0) << replaced.err;
  EXPECT_EQ(Files(into), model2);

  auto missing = RunCommand({SEEDCTL_BIN, "pull", "--from", url + "-missing", "--into",
                             (dir_.path() / "other").string()});
  EXPECT_EQ(missing.status, 3) << missing.err;
  EXPECT_TRUE(Has(missing.err, "/v2/models/test/manifests/v1-missing")) << missing.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "other"));
  auto both = RunCommand({SEEDCTL_BIN, "pull", "--from", url, "--source", "127.0.0.1:1", "--into",
                          (dir_.path() / "other").string()});
  EXPECT_EQ(both.status, 2) << both.err;
}

// --check-config reads an origin URL's form without reaching the upstream: a
// malformed one is named, a well-formed one is OK with nothing listening.
TEST_F(OriginsTest, CheckConfigNamesAMalformedOriginUrlWithoutReachingTheUpstream) {
  auto bad = RunCommand({SEEDD_BIN, "--token-file", token_file().string(), "--cache-dir",
                         (dir_.path() / "cache").string(), "--model",
                         "m=oci://registry.internal/Models/M:v1", "--check-config"});
  EXPECT_EQ(bad.status, 1) << bad.err;
  EXPECT_TRUE(Has(bad.err,
                  "--model m: oci://registry.internal/Models/M:v1: 'Models/M' is not a "
                  "repository"))
      << bad.err;
  auto good = RunCommand({SEEDD_BIN, "--token-file", token_file().string(), "--cache-dir",
                          (dir_.path() / "cache").string(), "--model",
                          "m=oci://127.0.0.1:1/models/m:v1", "--model",
                          "n=s3://bucket/models/n?endpoint=http://127.0.0.1:1", "--check-config"});
  EXPECT_EQ(good.status, 0) << good.err;
  EXPECT_EQ(good.out, "seedd: configuration OK\n");
}

TEST_F(OriginsTest, ABlobChangedUpstreamAfterItsDigestWasRecordedIsRefusedNamingTheFile) {
  OciRegistryServer registry;
  auto model = AModel();
  Push(registry, "models/test:v1", model);
  const std::string digest = "sha256:" + Sha256Hex(model["model-00002-of-00002.bin"]);
  ASSERT_NO_FATAL_FAILURE(ChangeBlob(registry, digest, 1000));
  const fs::path root = dir_.path() / "origins" / "m";
  Result<OriginCopy> copy =
      CopyFromOrigin("oci://" + registry.host() + "/models/test:v1", root, OriginAccess{});
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kDataLoss) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "model-00002-of-00002.bin")) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "expected " + digest)) << copy.status().ToString();
  // Nothing under a final name: no version directory, no record.
  for (const auto& e : fs::directory_iterator(root)) ADD_FAILURE() << "left " << e.path();

  // A daemon told to serve it refuses to start, saying why.
  std::string addr;
  auto daemon = StartDaemon({"--model", "m=oci://" + registry.host() + "/models/test:v1"}, &addr,
                            dir_.path() / "cache", "127.0.0.1:0", /*wait_ready=*/false);
  auto status = daemon->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(*status, 0);
  EXPECT_TRUE(Has(daemon->Stderr(), "--model m: model-00002-of-00002.bin: digest sha256:"))
      << daemon->Stderr();
}

// A file larger than range_bytes comes as parallel ranged GETs of the blob,
// written in place and checked whole against the layer digest: a byte changed
// in one range is refused naming the file.
TEST_F(OriginsTest, ALargeFileIsFetchedAsParallelRangedGetsAndCheckedWhole) {
  OciRegistryServer registry;
  auto model = AModel();
  Push(registry, "models/test:v1", model);
  OriginAccess access;
  access.range_bytes = 1 << 20;  // the 3 MiB file in 3 ranges; the others whole
  access.range_streams = 3;
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "a", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->ranged_gets, 3u);
  EXPECT_EQ(Files(copy->dir), model);
  EXPECT_EQ(copy->bytes_fetched, copy->total_bytes - 100000);  // a tokenizer twice

  const std::string digest = "sha256:" + Sha256Hex(model["model-00001-of-00002.bin"]);
  ASSERT_NO_FATAL_FAILURE(ChangeBlob(registry, digest, (2 << 20) + 5));  // in the third range
  Result<OriginCopy> bad = CopyFromOrigin(url, dir_.path() / "b", access);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
  EXPECT_TRUE(Has(bad.status().message(), "model-00001-of-00002.bin: digest sha256:"))
      << bad.status().ToString();
  EXPECT_TRUE(Has(bad.status().message(), "expected " + digest)) << bad.status().ToString();
  for (const auto& e : fs::directory_iterator(dir_.path() / "b"))
    ADD_FAILURE() << "left " << e.path();
}

// `--verify upstream=oci://...@sha256:...`: the registry vouches for the model
// whichever daemon sends it. A daemon serving other bytes under the model's name
// is refused before any byte moves, naming the file and both digests.
TEST_F(OriginsTest, AnUpstreamPinVouchesForThePulledModelAndRefusesADaemonServingOtherBytes) {
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string manifest = Push(registry, "models/test:v1", model);
  const std::string pinned = "oci://" + registry.host() + "/models/test@" + manifest;
  std::string origin_addr;
  auto origin = StartDaemon({"--model", "m=oci://" + registry.host() + "/models/test:v1"},
                            &origin_addr, dir_.path() / "origin-cache");
  auto pulled =
      RunCommand(PullArgs(origin_addr, dir_.path() / "into", {"--verify", "upstream=" + pinned}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  // The same layout with one shard's bytes changed, served as "m".
  std::map<std::string, std::string> forged;
  std::string liar_addr;
  auto liar = ServeForged(model, &forged, &liar_addr);
  auto refused =
      RunCommand(PullArgs(liar_addr, dir_.path() / "into-2", {"--verify", "upstream=" + pinned}));
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err,
                  "model-00002-of-00002.bin: the manifest says sha256:" +
                      Sha256Hex(forged["model-00002-of-00002.bin"]) +
                      ", the upstream sha256:" + Sha256Hex(model.at("model-00002-of-00002.bin"))))
      << refused.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "into-2"));
  // Without the pin the same daemon's bytes are pulled (chunks match its manifest).
  auto unpinned = RunCommand(PullArgs(liar_addr, dir_.path() / "into-3"));
  EXPECT_EQ(unpinned.status, 0) << unpinned.err;

  // A malformed URL is refused by the command line, before any connection.
  auto bad = RunCommand(PullArgs(origin_addr, dir_.path() / "into-4",
                                 {"--verify", "upstream=https://example.com/x"}));
  EXPECT_NE(bad.status, 0);
  EXPECT_TRUE(Has(bad.err, "not an origin URL")) << bad.err;
}

// `seedd --pull NAME=oci://...` takes the upstream's URL as `--model` does: a
// host with no daemon holding the model fetches it from the registry and
// serves it.
// libcurl is opened when an origin first needs it, not at start: a daemon
// serving a local model never maps it (its 27 libraries were half of what a
// daemon spent before it served), one serving a registry's model does.
TEST_F(OriginsTest, ADaemonLoadsLibcurlOnlyOnceAnUpstreamNeedsIt) {
  auto mapped = [](const testing::Process& p) {
    std::ifstream maps("/proc/" + std::to_string(p.pid()) + "/maps");
    std::stringstream text;
    text << maps.rdbuf();
    return text.str().find("libcurl") != std::string::npos;
  };
  std::string addr;
  auto local = StartDaemon({"--model", "m=" + model().string()}, &addr, dir_.path() / "local");
  EXPECT_FALSE(mapped(*local));
  OciRegistryServer registry;
  Push(registry, "models/test:v1", AModel());
  auto upstream = StartDaemon({"--model", "m=oci://" + registry.host() + "/models/test:v1"}, &addr,
                              dir_.path() / "upstream");
  // Fetched from upstream in the background after the ready line, perhaps.
  for (int i = 0; i < 200 && !mapped(*upstream); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(mapped(*upstream));
}

TEST_F(OriginsTest, PullTakesAnOriginUrlAndServesTheModelFromItsUpstream) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  std::string addr;
  auto daemon = StartDaemon(
      {"--pull", "m=oci://" + registry.host() + "/models/test:v1", "--log-level", "info"}, &addr,
      dir_.path() / "cache");
  auto pulled = RunCommand(PullArgs(addr, dir_.path() / "into"));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);
  daemon->Signal(SIGTERM);
  ASSERT_TRUE(daemon->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(daemon->Stderr(), "every file matched its upstream digest")) << daemon->Stderr();
  // The same model named twice is refused at once.
  auto twice = RunCommand({SEEDD_BIN, "--check-config", "--token-file", token_file().string(),
                           "--pull", "m=oci://" + registry.host() + "/models/test:v1", "--model",
                           "m=" + (dir_.path() / "into").string()});
  EXPECT_NE(twice.status, 0);
  EXPECT_TRUE(Has(twice.err, "m is given twice")) << twice.err;
}

TEST_F(OriginsTest, AMissingTagOrRepositoryIsNotFoundNamingTheUrlAndTheAnswer) {
  OciRegistryServer registry;
  Push(registry, "models/test:v1", AModel());
  for (const std::string ref : {"models/test:v2", "models/absent:v1"}) {
    Result<OriginCopy> copy = CopyFromOrigin("oci://" + registry.host() + "/" + ref,
                                             dir_.path() / "origins", OriginAccess{});
    ASSERT_FALSE(copy.ok()) << ref;
    EXPECT_EQ(copy.status().code(), StatusCode::kNotFound) << copy.status().ToString();
    const std::string tag = ref.substr(ref.find(':') + 1);
    const std::string repo = ref.substr(0, ref.find(':'));
    EXPECT_TRUE(Has(copy.status().message(),
                    "GET http://" + registry.host() + "/v2/" + repo + "/manifests/" + tag))
        << copy.status().ToString();
    EXPECT_TRUE(Has(copy.status().message(), "HTTP 404")) << copy.status().ToString();
  }
}

// A listing that names more than the disk holds is refused before a byte moves.
TEST_F(OriginsTest, AModelLargerThanTheFreeSpaceIsRefusedBeforeAnyByteMoves) {
  OciRegistryServer registry;
  Push(registry, "models/test:v1", AModel());
  // A 1 MiB tmpfs: the model is 4.2 MiB.
  const fs::path small = dir_.path() / "small";
  fs::create_directories(small);
  ASSERT_EQ(::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  Result<OriginCopy> copy =
      CopyFromOrigin("oci://" + registry.host() + "/models/test:v1", small / "m", OriginAccess{});
  const auto left = std::distance(fs::directory_iterator(small / "m"), fs::directory_iterator());
  ::umount(small.c_str());
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kResourceExhausted) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "not enough space")) << copy.status().ToString();
  EXPECT_EQ(left, 0);
}

TEST_F(OriginsTest, AnUnreachableRegistryIsUnavailableNamingTheUrl) {
  const uint16_t port = testing::FreePort();
  const std::string url = "oci://127.0.0.1:" + std::to_string(port) + "/models/test:v1";
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "origins", OriginAccess{});
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kUnavailable) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(),
                  "http://127.0.0.1:" + std::to_string(port) + "/v2/models/test/manifests/v1"))
      << copy.status().ToString();
}

TEST_F(OriginsTest, ARegistryThatAcceptsAndNeverAnswersIsCutOffByTheStallTimeout) {
  // A listener that takes the connection and the request and says nothing.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  OriginAccess access;
  access.stall_timeout = std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  Result<OriginCopy> copy =
      CopyFromOrigin("oci://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/models/test:v1",
                     dir_.path() / "origins", access);
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kDeadlineExceeded) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "nothing for 1 s")) << copy.status().ToString();
  EXPECT_LT(took, std::chrono::seconds(20));
}

TEST_F(OriginsTest, ARevisionSharingFilesCopiesThemLocallyAndFetchesOnlyWhatChanged) {
  OciRegistryServer registry;
  auto v1 = AModel();
  auto v2 = v1;
  v2["model-00002-of-00002.bin"] = RandomBytes(1 << 20, 9);  // a fine-tune of one shard
  Push(registry, "models/test:v1", v1);
  Push(registry, "models/test:v2", v2);
  const fs::path root = dir_.path() / "origins" / "m";
  Result<OriginCopy> first =
      CopyFromOrigin("oci://" + registry.host() + "/models/test:v1", root, OriginAccess{});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<OriginCopy> second =
      CopyFromOrigin("oci://" + registry.host() + "/models/test:v2", root, OriginAccess{});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Files(second->dir), v2);
  EXPECT_EQ(second->bytes_fetched, 1u << 20);
  EXPECT_EQ(second->bytes_reused, second->total_bytes - (1u << 20));
  EXPECT_NE(first->dir, second->dir);
  EXPECT_EQ(Files(first->dir), v1);  // the older version is untouched
}

TEST_F(OriginsTest, APinnedManifestDigestIsFetchedAndAnotherDigestIsNotFound) {
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string digest = Push(registry, "models/test:v1", model);
  Result<OriginCopy> copy = CopyFromOrigin("oci://" + registry.host() + "/models/test@" + digest,
                                           dir_.path() / "origins", OriginAccess{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->version, digest);
  EXPECT_EQ(Files(copy->dir), model);
  Result<OriginCopy> other =
      CopyFromOrigin("oci://" + registry.host() + "/models/test@sha256:" + std::string(64, 'a'),
                     dir_.path() / "origins", OriginAccess{});
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound) << other.status().ToString();
}

TEST_F(OriginsTest, ARegistryWithBasicAuthOverTlsNeedsTheCredentialsFileAndTheTrustedCa) {
  OciRegistryServer registry(OciRegistryServer::Auth::kBasicOverTls);
  const auto model = AModel();
  // skopeo reads the CA from a directory of *.crt files.
  const fs::path certs = dir_.path() / "certs";
  fs::create_directories(certs);
  fs::copy_file(registry.ca_file(), certs / "ca.crt");
  PushModelPack(dir_.path() / "layout", "docker://" + registry.host() + "/models/test:v1", model,
                {"--dest-creds", "seedd:seedd-test-password", "--dest-cert-dir", certs.string()});
  const std::string url = "oci://" + registry.host() + "/models/test:v1?plain-http=false";

  OriginAccess access;
  access.ca_file = registry.ca_file();
  Result<OriginCopy> anonymous = CopyFromOrigin(url, dir_.path() / "a", access);
  EXPECT_EQ(anonymous.status().code(), StatusCode::kUnauthenticated)
      << anonymous.status().ToString();
  EXPECT_TRUE(Has(anonymous.status().message(), "--origin-auth")) << anonymous.status().ToString();

  access.auth_file = dir_.path() / "auth.json";
  std::ofstream(access.auth_file) << R"({"auths": {")" << registry.host() << R"(": {"auth": ")"
                                  << Base64Encode("seedd:wrong") << R"("}}})";
  Result<OriginCopy> wrong = CopyFromOrigin(url, dir_.path() / "b", access);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated) << wrong.status().ToString();
  EXPECT_TRUE(Has(wrong.status().message(), "refused")) << wrong.status().ToString();

  std::ofstream(access.auth_file) << R"({"auths": {")" << registry.host() << R"(": {"auth": ")"
                                  << Base64Encode("seedd:seedd-test-password") << R"("}}})";
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "c", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);

  // Without the CA the registry's certificate is not trusted.
  access.ca_file.clear();
  Result<OriginCopy> untrusted = CopyFromOrigin(url, dir_.path() / "d", access);
  EXPECT_EQ(untrusted.status().code(), StatusCode::kUnavailable) << untrusted.status().ToString();
}

// A part record in the registry is peer input: one that is not a manifest of
// the listed file is ignored (and said), and the file is fetched from upstream.
TEST_F(OriginsTest, APartRecordThatLiesIsIgnoredAndTheFileFetchedFromUpstream) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string digest = Push(registry, "models/test:v1", model);
  SetForEachFile(redis, "seedd:origin-part:" + digest.substr(7) + ":",
                 {R"({"manifest": {"model": "x"}, "expected": "sha256:00"})"});
  const std::string log = ServeAndPull(registry, redis, model);
  EXPECT_TRUE(Has(log, "ignoring the registry's origin-part:")) << log;
  EXPECT_TRUE(Has(log, "from upstream (6 parts)")) << log;
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// An S3-compatible server (s3rver) holding a model's files below a prefix,
// uploaded with curl as any client would.
class S3OriginTest : public OriginsTest {
 protected:
  void SetUp() override {
    OriginsTest::SetUp();
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  }
  void Upload(const std::string& prefix, const std::map<std::string, std::string>& files) {
    for (const auto& [path, bytes] : files) {
      const fs::path tmp = dir_.path() / "upload";
      std::ofstream(tmp, std::ios::binary) << bytes;
      auto r = RunCommand(
          {"/usr/bin/curl", "-sS", "-f", "-X", "PUT", "--data-binary", "@" + tmp.string(),
           s3_.endpoint() + "/" + testing::S3Server::kBucket + "/" + prefix + "/" + path});
      ASSERT_EQ(r.status, 0) << r.err;
    }
  }
  std::string Url(const std::string& prefix) const { return s3_.url(prefix); }
  testing::S3Server s3_;
};

TEST_F(S3OriginTest, APrefixIsServedByADaemonAndPulledByteForByteEachFileCheckedAgainstItsEtag) {
  const auto model = AModel();
  Upload("models/test", model);
  Upload("models/test-other", {{"stray.bin", "not this model"}});
  std::string addr;
  auto origin = StartDaemon({"--model", "m=" + Url("models/test"), "--log-level", "info"}, &addr,
                            dir_.path() / "origin-cache");
  auto pulled = RunCommand(PullArgs(addr, dir_.path() / "into"));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);
  origin->Signal(SIGTERM);
  ASSERT_TRUE(origin->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(origin->Stderr(), "every file matched its upstream digest")) << origin->Stderr();
}

// `--verify upstream=s3://...`: the bucket vouches for the model through its
// objects' ETags (the MD5 of a single-part object): the manifest must name
// exactly the listed objects and sizes, and each file's MD5 is checked before
// commit. A daemon serving other bytes of the same sizes under the model's
// name is refused naming the file and both digests, and nothing is committed.
TEST_F(S3OriginTest, AnS3UpstreamVouchesForThePulledModelThroughItsEtags) {
  const auto model = AModel();
  Upload("models/test", model);
  const std::string upstream = "upstream=" + Url("models/test");
  std::string origin_addr;
  auto origin = StartDaemon({"--model", "m=" + Url("models/test")}, &origin_addr,
                            dir_.path() / "origin-cache");
  auto pulled = RunCommand(PullArgs(origin_addr, dir_.path() / "into", {"--verify", upstream}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  std::map<std::string, std::string> forged;
  std::string liar_addr;
  auto liar = ServeForged(model, &forged, &liar_addr);
  auto refused = RunCommand(PullArgs(liar_addr, dir_.path() / "into-2", {"--verify", upstream}));
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err,
                  "model-00002-of-00002.bin: md5:" + Md5HexOf(forged["model-00002-of-00002.bin"]) +
                      ", the upstream's md5:" + Md5HexOf(model.at("model-00002-of-00002.bin"))))
      << refused.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "into-2"));
  // A file the bucket does not list is refused before any byte moves.
  Upload("models/test-less", {{"config.json", model.at("config.json")}});
  auto fewer = RunCommand(PullArgs(origin_addr, dir_.path() / "into-3",
                                   {"--verify", "upstream=" + Url("models/test-less")}));
  EXPECT_NE(fewer.status, 0);
  EXPECT_TRUE(Has(fewer.err, "which the upstream does not")) << fewer.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "into-3"));
}

TEST_F(S3OriginTest, ALargeObjectIsFetchedAsParallelRangedGetsAndCheckedAgainstItsEtag) {
  const auto model = AModel();
  Upload("models/test", model);
  OriginAccess access;
  access.range_bytes = 1 << 20;
  access.range_streams = 2;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/test"), dir_.path() / "o", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->ranged_gets, 3u);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_EQ(Files(copy->dir), model);
}

// `seedctl push s3://...` writes a model directory as one object per file,
// which `--model NAME=s3://...` and `seedctl pull --from` read back byte for
// byte, each checked; a file over S3's largest object (5 TiB) is refused before
// any byte moves.
TEST_F(S3OriginTest, SeedctlPushWritesADirectoryThatTheS3OriginReadsBack) {
  const auto model = AModel();
  const fs::path dir = dir_.path() / "to-push";
  WriteFiles(dir, model);
  fs::create_directories(dir / ".seedd-staging");
  std::ofstream(dir / ".seedd-staging" / "left-out", std::ios::binary) << "x";
  auto pushed = RunCommand({SEEDCTL_BIN, "push", Url("models/pushed"), "--from", dir.string()});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  EXPECT_TRUE(Has(pushed.out, "pushed " + Url("models/pushed") + " (5 files, 4.19 MiB)"))
      << pushed.out;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/pushed"), dir_.path() / "o", OriginAccess{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_TRUE(Has(pushed.out, copy->version)) << pushed.out;

  // A sparse file of 5 TiB and one byte: refused before any object is written.
  const fs::path big = dir_.path() / "big";
  fs::create_directories(big);
  {
    std::ofstream(big / "a.bin", std::ios::binary) << "a";
    std::ofstream huge(big / "huge.bin", std::ios::binary);
    huge.seekp((std::streamoff{5} << 40));
    huge.put('x');
  }
  auto refused = RunCommand({SEEDCTL_BIN, "push", Url("models/big"), "--from", big.string()});
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err, "huge.bin: 5497558138881 bytes")) << refused.err;
  EXPECT_TRUE(Has(refused.err, "nothing was sent")) << refused.err;
  Result<OriginCopy> none = CopyFromOrigin(Url("models/big"), dir_.path() / "n", OriginAccess{});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
}

// A file larger than the part size goes up as a multipart upload; a multipart
// object's ETag is no MD5 of its bytes on S3 ("<md5 of the parts' md5s>-N",
// written here into s3rver's record of the object, which keeps the MD5), so a
// reader takes the file's SHA-256 from the object's own headers
// (x-amz-meta-sha256) and checks the bytes against it: the object read back
// byte for byte and verified, ranged GETs and all, and the same object with
// its bytes changed refused naming the file, the digest and the expected
// SHA-256; `--verify upstream=` vouches through it. A part size out of S3's
// bounds is refused before anything is sent.
TEST_F(S3OriginTest, AFileLargerThanThePartSizeGoesUpInPartsAndIsVerifiedAgainstItsSha256) {
  auto model = AModel();
  model["model-big.bin"] = RandomBytes(12 << 20, 4);
  const fs::path dir = dir_.path() / "to-push";
  WriteFiles(dir, model);
  auto pushed = RunCommand(
      {SEEDCTL_BIN, "push", Url("models/parts"), "--from", dir.string(), "--part-mib", "5"});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  EXPECT_TRUE(Has(pushed.out, "(6 files, 16.2 MiB; 1 in parts)")) << pushed.out;
  const fs::path object =
      s3_.data_dir() / testing::S3Server::kBucket / "models" / "parts" / "model-big.bin";
  const fs::path md5 = object.string() + "._S3rver_object.md5";
  ASSERT_TRUE(fs::exists(md5)) << md5;
  std::ofstream(md5, std::ios::trunc) << Md5HexOf("parts' md5s") << "-3";
  OriginAccess access;
  access.range_bytes = 4 << 20;
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/parts"), dir_.path() / "o", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
  EXPECT_EQ(copy->files_unverified, 0u);
  EXPECT_EQ(copy->ranged_gets, 3u);  // the 12 MiB file's digest is known before its GET
  // The bucket vouches for a pull from daemons through that SHA-256 too.
  std::string addr;
  auto origin =
      StartDaemon({"--model", "m=" + Url("models/parts")}, &addr, dir_.path() / "origin-cache");
  auto pulled = RunCommand(
      PullArgs(addr, dir_.path() / "into", {"--verify", "upstream=" + Url("models/parts")}));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);

  std::string forged = model["model-big.bin"];
  forged[7 << 20] ^= 1;
  std::ofstream(object.string() + "._S3rver_object", std::ios::binary | std::ios::trunc) << forged;
  Result<OriginCopy> refused = CopyFromOrigin(Url("models/parts"), dir_.path() / "o2", access);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status().ToString();
  EXPECT_TRUE(
      Has(refused.status().message(), "model-big.bin: digest sha256:" + Sha256Hex(forged) +
                                          ", expected sha256:" + Sha256Hex(model["model-big.bin"])))
      << refused.status().ToString();

  auto bad = RunCommand(
      {SEEDCTL_BIN, "push", Url("models/parts-2"), "--from", dir.string(), "--part-mib", "4"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(Has(bad.err, "--part-mib")) << bad.err;
}

TEST_F(S3OriginTest, AnObjectChangedAfterItsEtagWasRecordedIsRefusedNamingTheFile) {
  const auto model = AModel();
  Upload("models/test", model);
  // s3rver keeps an object's bytes beside its MD5: changing the bytes alone
  // makes an object that no longer matches the ETag it lists.
  const fs::path object = s3_.data_dir() / testing::S3Server::kBucket / "models" / "test" /
                          "config.json._S3rver_object";
  ASSERT_TRUE(fs::exists(object)) << object;
  std::ofstream(object, std::ios::binary) << R"({"architectures": ["Evil"]})";
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/test"), dir_.path() / "o", OriginAccess{});
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kDataLoss) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "config.json: digest md5:")) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "expected md5:" + Md5HexOf(model.at("config.json"))))
      << copy.status().ToString();
}

TEST_F(S3OriginTest, AnEmptyPrefixOrAMissingBucketIsNotFoundNamingTheUrl) {
  Result<OriginCopy> copy = CopyFromOrigin(Url("models/none"), dir_.path() / "o", OriginAccess{});
  EXPECT_EQ(copy.status().code(), StatusCode::kNotFound) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "no object below the prefix 'models/none/'"))
      << copy.status().ToString();
  const std::string missing =
      "s3://no-such-bucket/models/test?endpoint=" + s3_.endpoint() + "&region=us-east-1";
  copy = CopyFromOrigin(missing, dir_.path() / "o", OriginAccess{});
  EXPECT_EQ(copy.status().code(), StatusCode::kNotFound) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "NoSuchBucket")) << copy.status().ToString();
}

TEST_F(S3OriginTest, ARevisionUnderANewPrefixFetchesOnlyTheObjectsThatChanged) {
  auto v1 = AModel();
  auto v2 = v1;
  v2["model-00002-of-00002.bin"] = RandomBytes(1 << 20, 9);
  Upload("models/test/v1", v1);
  Upload("models/test/v2", v2);
  const fs::path root = dir_.path() / "origins" / "m";
  ASSERT_TRUE(CopyFromOrigin(Url("models/test/v1"), root, OriginAccess{}).ok());
  Result<OriginCopy> second = CopyFromOrigin(Url("models/test/v2"), root, OriginAccess{});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Files(second->dir), v2);
  EXPECT_EQ(second->bytes_fetched, 1u << 20);
  EXPECT_EQ(second->files_unverified, 0u);
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// The registry token protocol (Docker Hub, GHCR, Harbor): a 401 names the token
// realm; the token is asked for there with the auth file's basic credentials and
// the scope the challenge names, then sent as a Bearer token. Pushing asks for
// pull and push.
TEST_F(OriginsTest, ARegistryWithTokenAuthIsReachedWithATokenFromItsRealm) {
  OciRegistryServer registry(OciRegistryServer::Auth::kToken);
  const auto model = AModel();
  WriteFiles(dir_.path() / "src", model);
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  const fs::path auth = dir_.path() / "auth.json";
  std::ofstream(auth) << R"({"auths": {")" << registry.host() << R"(": {"auth": ")"
                      << Base64Encode("seedd:seedd-test-password") << R"("}}})";
  auto anonymous = RunCommand({SEEDCTL_BIN, "push", url, "--from", (dir_.path() / "src").string()});
  EXPECT_EQ(anonymous.status, 4) << anonymous.err;
  EXPECT_TRUE(Has(anonymous.err, "token for " + url)) << anonymous.err;
  EXPECT_TRUE(Has(anonymous.err, "HTTP 401")) << anonymous.err;
  auto pushed = RunCommand({SEEDCTL_BIN, "push", url, "--from", (dir_.path() / "src").string(),
                            "--origin-auth", auth.string()});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  OriginAccess access;
  access.auth_file = auth;
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "origins", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
  const std::string log = testing::ReadAll(registry.token_log());
  // The registry names the push scope's actions in either order.
  EXPECT_TRUE(Has(log, R"("scope": ["repository:models/test:pull,push"]}, "basic": true)") ||
              Has(log, R"("scope": ["repository:models/test:push,pull"]}, "basic": true)"))
      << log;
  EXPECT_TRUE(Has(log, R"("scope": ["repository:models/test:pull"]}, "basic": true)")) << log;
}

// seedctl push writes a directory as a ModelPack artifact that skopeo (a
// third-party client) copies and seedd reads back byte for byte; a second push
// of the same files sends no layer again.
TEST_F(OriginsTest, SeedctlPushWritesAModelPackThatSkopeoCopiesAndSeeddReadsBack) {
  OciRegistryServer registry;
  const auto model = AModel();
  WriteFiles(dir_.path() / "src", model);
  const std::string url = "oci://" + registry.host() + "/pushed/model:v1";
  auto pushed = RunCommand({SEEDCTL_BIN, "push", url, "--from", (dir_.path() / "src").string()});
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  EXPECT_TRUE(Has(pushed.out, "pushed " + url + " (5 files")) << pushed.out;
  const std::string pin = pushed.out.substr(pushed.out.find("pin it: ") + 8);
  auto again = RunCommand({SEEDCTL_BIN, "push", "oci://" + registry.host() + "/pushed/model:v2",
                           "--from", (dir_.path() / "src").string()});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_TRUE(Has(again.out, "; 0 B sent")) << again.out;

  auto copied = RunCommand({"/usr/bin/skopeo", "copy", "-q", "--src-tls-verify=false",
                            "docker://" + registry.host() + "/pushed/model:v1",
                            "dir:" + (dir_.path() / "skopeo").string()});
  ASSERT_EQ(copied.status, 0) << copied.err;
  EXPECT_TRUE(fs::exists(dir_.path() / "skopeo" / "manifest.json"));

  Result<OriginCopy> copy =
      CopyFromOrigin(pin.substr(0, pin.find('\n')), dir_.path() / "origins", OriginAccess{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir), model);
}

TEST_F(OriginsTest, SeedctlPushToARegistryWithBasicAuthNeedsTheCredentialsFile) {
  OciRegistryServer registry(OciRegistryServer::Auth::kBasicOverTls);
  fs::create_directories(dir_.path() / "src");
  std::ofstream(dir_.path() / "src" / "w.bin") << RandomBytes(4096, 5);
  const std::string url = "oci://" + registry.host() + "/pushed/model:v1?plain-http=false";
  const std::vector<std::string> base = {SEEDCTL_BIN,
                                         "push",
                                         url,
                                         "--from",
                                         (dir_.path() / "src").string(),
                                         "--origin-ca",
                                         registry.ca_file().string()};
  auto anonymous = RunCommand(base);
  EXPECT_EQ(anonymous.status, 4) << anonymous.err;
  EXPECT_TRUE(Has(anonymous.err, "--origin-auth")) << anonymous.err;
  const fs::path auth = dir_.path() / "auth.json";
  std::ofstream(auth) << R"({"auths": {")" << registry.host() << R"(": {"auth": ")"
                      << Base64Encode("seedd:seedd-test-password") << R"("}}})";
  auto argv = base;
  argv.insert(argv.end(), {"--origin-auth", auth.string()});
  auto pushed = RunCommand(argv);
  ASSERT_EQ(pushed.status, 0) << pushed.err;
  OriginAccess access;
  access.auth_file = auth;
  access.ca_file = registry.ca_file();
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "origins", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(copy->dir).at("w.bin"), RandomBytes(4096, 5));
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// Daemons configured alike (the same --model URL and --registry, started at
// once) fetch the version from upstream once: the first to claim it in the
// registry fetches it and publishes its root digest; the others pull it from
// the fleet, and every one then serves the same bytes.
TEST_F(OriginsTest, DaemonsConfiguredAlikeFetchAVersionFromUpstreamOnceAndPullItFromEachOther) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  const std::string url = "m=oci://" + registry.host() + "/models/test:v1";
  std::vector<std::unique_ptr<testing::Process>> daemons;
  for (int i = 0; i < 3; ++i) {
    std::string unused;
    daemons.push_back(StartDaemon({"--model", url, "--registry", redis.url(), "--log-level", "info",
                                   "--origin-range-mib", "1"},
                                  &unused, dir_.path() / ("cache-" + std::to_string(i)),
                                  "127.0.0.1:0", /*wait_ready=*/false));
  }
  std::vector<std::string> addrs;
  for (auto& d : daemons) addrs.push_back(ReadyAddress(*d));
  // Each of the 6 parts (the 4 distinct files, the tokenizer being there twice,
  // the largest as 3 pieces of 1 MiB) came from upstream to one daemon; every
  // daemon got the others from the fleet.
  int upstream = 0;
  std::string logs;
  for (size_t i = 0; i < daemons.size(); ++i) {
    auto pulled = RunCommand(PullArgs(addrs[i], dir_.path() / ("into-" + std::to_string(i))));
    ASSERT_EQ(pulled.status, 0) << pulled.err;
    EXPECT_EQ(Files(dir_.path() / ("into-" + std::to_string(i))), model);
    daemons[i]->Signal(SIGTERM);
    ASSERT_TRUE(daemons[i]->Wait(std::chrono::seconds(20)).has_value());
    const std::string log = daemons[i]->Stderr();
    logs += log;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        log, m,
        std::regex(R"(from upstream \((\d+) parts\), [^(]* from the fleet \((\d+) parts\))")))
        << log;
    upstream += std::stoi(m[1]);
    EXPECT_EQ(std::stoi(m[1]) + std::stoi(m[2]), 6) << log;
    EXPECT_TRUE(Has(log, "every file matched its upstream digest")) << log;
  }
  EXPECT_EQ(upstream, 6) << logs;
}

// A piece is served while it lands upstream: its chunks reach the fleet as their
// digests are published, not once the piece is whole. The registry answers
// through a proxy at 512 KiB/s, so each 1 MiB piece of the 3 MiB shard takes
// about 2 s to land; a second daemon started while the first is fetching the
// shard's first piece pulls that piece from it as it lands, byte for byte,
// and no piece is fetched from upstream twice.
TEST_F(OriginsTest, ASecondDaemonPullsAPieceFromTheFirstWhileItLandsUpstream) {
  ASSERT_NO_FATAL_FAILURE(LandWhileASecondDaemonJoins(/*stale_list=*/false));
}

// A daemon that died while a piece landed leaves the piece's digest list behind
// (here: two digests set by hand); the daemon that takes the piece over begins
// the list again, so the chunks' positions are its own and the fleet pulls the
// piece from it as it lands.
TEST_F(OriginsTest, ADigestListLeftByADaemonThatDiedIsBegunAgainByTheNextToFetchThePiece) {
  ASSERT_NO_FATAL_FAILURE(LandWhileASecondDaemonJoins(/*stale_list=*/true));
}

// A piece stays served as it landed once its file is complete at the daemon
// serving it (that copy of the piece is then gone: the file is served whole):
// a daemon still pulling the piece that way finishes (PullAsIfLanding).
TEST_F(OriginsTest, APieceIsServedAsItLandedFromTheWholeFileOnceTheFileIsComplete) {
  std::string second;
  ASSERT_NO_FATAL_FAILURE(PullAsIfLanding(/*lying_list=*/false, &second));
  EXPECT_TRUE(Has(second,
                  "pulled piece 0 of model-00001-of-00002.bin (1.00 MiB) from the fleet while it "
                  "landed upstream"))
      << second;
  EXPECT_FALSE(Has(second, "but does not serve it")) << second;
  EXPECT_TRUE(Has(second, "0 B from upstream (0 parts)")) << second;
}

// A landing piece's digest list is peer input: one whose digests are not those
// of the bytes served (a list or a holder that lies) gets every chunk refused,
// nothing of that pull is kept, and the piece comes from its published part,
// byte for byte.
TEST_F(OriginsTest, ALandingPieceWhoseDigestListLiesIsRefusedAndItsPartPulledInstead) {
  std::string second;
  ASSERT_NO_FATAL_FAILURE(PullAsIfLanding(/*lying_list=*/true, &second));
  EXPECT_TRUE(Has(second, "pulling piece 0 of model-00001-of-00002.bin from 127.0.0.1:")) << second;
  EXPECT_TRUE(Has(second, "while it lands upstream failed")) << second;
  EXPECT_FALSE(Has(second, "from the fleet while it landed upstream")) << second;
  EXPECT_TRUE(
      Has(second, "pulled piece 0 of model-00001-of-00002.bin (1.00 MiB) from the fleet in"))
      << second;
  EXPECT_TRUE(Has(second, "0 B from upstream (0 parts)")) << second;
}

// A file over the piece size (AModel()'s 3 MiB shard with --origin-range-mib 1:
// 3 pieces of 1 MiB)
// travels as pieces, each fetched from upstream by one daemon and pulled by the
// others as soon as it is published: here the last piece's claim is held by a
// daemon that died (it lapses after 4 s), and a second daemon pulls the first
// two pieces from the first before the last is fetched from upstream.
TEST_F(OriginsTest, TheFleetPullsTheFirstPiecesOfALargeFileWhileItsLastIsStillUpstream) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string digest = Push(registry, "models/test:v1", model);
  const std::string hex = digest.substr(7);
  for (int k = 0; k < 5; ++k) {
    RedisCli(redis, {"SET", "seedd:origin-lease:" + hex + ":" + std::to_string(k) + ".2",
                     "a-daemon-that-died", "PX", "4000"});
  }
  const std::string url = "m=oci://" + registry.host() + "/models/test:v1";
  std::vector<std::unique_ptr<testing::Process>> daemons;
  daemons.push_back(StartFleetDaemon(url, redis, 0));
  // The first two pieces published by the first daemon.
  ASSERT_NO_FATAL_FAILURE(WaitForKeys(redis, "seedd:origin-part:" + hex + ":*.[01]", 2,
                                      "pieces 0 and 1 published", *daemons[0]));
  daemons.push_back(StartFleetDaemon(url, redis, 1));
  std::string logs;
  int upstream = 0;
  std::vector<std::string> addrs;
  ASSERT_NO_FATAL_FAILURE(PullFromEach(daemons, model, &addrs));
  // Once the shard is whole, each daemon serves its pieces from the model's
  // copy (their own copies removed): each still pulls byte for byte.
  const std::string shard = "model-00001-of-00002.bin";
  for (size_t i = 0; i < daemons.size(); ++i) {
    auto ls = RunCommand({SEEDCTL_BIN, "ls", "--source", addrs[i], "--token-file", token_file()});
    ASSERT_EQ(ls.status, 0) << ls.err;
    int pieces = 0;
    for (int p = 0; p < 3; ++p) {
      std::smatch m;
      const std::regex name("(seedd-part-[0-9a-f]{16}-[0-9]+\\." + std::to_string(p) + ") ");
      ASSERT_TRUE(std::regex_search(ls.out, m, name)) << ls.out;
      const fs::path into = dir_.path() / ("piece-" + std::to_string(i) + "-" + std::to_string(p));
      auto pulled = RunCommand(PullArgs(addrs[i], into, {}, m[1]));
      ASSERT_EQ(pulled.status, 0) << pulled.err;
      EXPECT_EQ(testing::ReadAll(into / shard), model.at(shard).substr(p << 20, 1 << 20));
      ++pieces;
    }
    EXPECT_EQ(pieces, 3);
    // No piece's own copy is left (their directories are FILE.PIECE, pull-FILE.PIECE,
    // landing-FILE.PIECE).
    const fs::path parts = dir_.path() / ("cache-" + std::to_string(i)) / "weights" / "origins" /
                           "m" / (".parts-" + hex);
    ASSERT_TRUE(fs::is_directory(parts));
    for (const auto& e : fs::directory_iterator(parts)) {
      EXPECT_EQ(e.path().filename().string().find('.'), std::string::npos) << e.path();
    }
  }
  ASSERT_NO_FATAL_FAILURE(StopAndCountUpstream(daemons, &upstream, &logs));
  EXPECT_EQ(upstream, 6) << logs;  // every part once
  // When a line of the logs was written (its timestamp), or "" when absent.
  auto when = [](const std::string& log, const std::string& what) {
    const size_t at = log.find(what);
    if (at == std::string::npos) return std::string();
    const size_t line = log.rfind('\n', at);
    return log.substr(line == std::string::npos ? 0 : line + 1, 23);
  };
  const std::string second = daemons[1]->Stderr();
  const std::string first_pulled = when(second, "pulled piece 0 of " + shard);
  const std::string last_upstream = when(logs, "fetching piece 2 of " + shard);
  ASSERT_FALSE(first_pulled.empty()) << second;
  ASSERT_FALSE(when(second, "pulled piece 1 of " + shard).empty()) << second;
  ASSERT_FALSE(last_upstream.empty()) << logs;
  EXPECT_LT(first_pulled, last_upstream) << logs;
}

// A piece record is peer input: the record of piece 0 set under piece 1's key
// (a valid manifest of the right path and size, at another offset) is ignored,
// and piece 1 fetched from upstream; the other pieces are pulled from the
// daemon that published them, and the file comes out byte for byte.
TEST_F(OriginsTest, APieceRecordAtAnotherOffsetIsIgnoredAndThatPieceFetchedFromUpstream) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string hex = Push(registry, "models/test:v1", model).substr(7);
  const std::string url = "m=oci://" + registry.host() + "/models/test:v1";
  std::string first_addr;
  auto first = StartDaemon({"--model", url, "--registry", redis.url(), "--origin-range-mib", "1"},
                           &first_addr, dir_.path() / "cache-0");
  // The first shard is file 1 of the listing.
  const std::string key0 = "seedd:origin-part:" + hex + ":1.0";
  const std::string key1 = "seedd:origin-part:" + hex + ":1.1";
  std::string record0 = RedisCli(redis, {"GET", key0});
  record0.erase(record0.find_last_not_of('\n') + 1);
  RedisCli(redis, {"SET", key1, record0});
  RedisCli(redis,
           {"DEL", "seedd:origin-root:" + hex});  // so the next daemon fetches with the fleet
  std::string addr;
  auto second = StartDaemon(
      {"--model", url, "--registry", redis.url(), "--log-level", "info", "--origin-range-mib", "1"},
      &addr, dir_.path() / "cache-1");
  auto pulled = RunCommand(PullArgs(addr, dir_.path() / "into"));
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "into"), model);
  second->Signal(SIGTERM);
  ASSERT_TRUE(second->Wait(std::chrono::seconds(20)).has_value());
  const std::string log = second->Stderr();
  EXPECT_TRUE(Has(log, "ignoring the registry's " + key1.substr(6) + ": its offset is not 1048576"))
      << log;
  EXPECT_TRUE(Has(log, "fetching piece 1 of model-00001-of-00002.bin")) << log;
  EXPECT_TRUE(Has(log, "from upstream (1 parts)")) << log;
}

// A live record that names a daemon gone (here: set by hand for every piece,
// with the fetches' claims held by a daemon that died): the pull of the landing
// piece fails once, is not tried again from there, and the piece is fetched
// from upstream once the claim lapses.
TEST_F(OriginsTest, ALandingPieceWhoseDaemonIsGoneIsFetchedFromUpstreamOnceItsClaimLapses) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string digest = Push(registry, "models/test:v1", model);
  const std::string hex = digest.substr(7);
  SetForEachFile(redis, "seedd:origin-lease:" + hex + ":", {"a-daemon-that-died", "PX", "1500"});
  for (int k = 0; k < 5; ++k) {
    for (int p = 0; p < 3; ++p) {
      const std::string id = std::to_string(k) + "." + std::to_string(p);
      const Json record = {{"root", Sha256Hex("seedd-landing:" + hex + ":" + id)},
                           {"holder", "127.0.0.1:1"},
                           {"offset", static_cast<uint64_t>(p) << 20},
                           {"length", uint64_t{1} << 20},
                           {"digests", Json::array()}};
      RedisCli(redis, {"SET", "seedd:origin-live:" + hex + ":" + id, record.dump(), "PX", "60000"});
    }
  }
  const std::string log = ServeAndPull(registry, redis, model);
  EXPECT_TRUE(Has(log, "while it lands upstream failed")) << log;
  EXPECT_TRUE(Has(log, "from upstream (6 parts), 0 B from the fleet (0 parts)")) << log;
  // Each piece was tried once from the daemon gone (the 3 of the first shard
  // and the second shard, one piece of 1 MiB).
  size_t tries = 0;
  for (size_t at = log.find("from 127.0.0.1:1 while it lands"); at != std::string::npos;
       at = log.find("from 127.0.0.1:1 while it lands", at + 1)) {
    ++tries;
  }
  EXPECT_LE(tries, 4u) << log;
}

// Claims whose holder died (here: set by hand on every file, with a short life)
// lapse and the waiting daemon takes the fetch over.
TEST_F(OriginsTest, AFleetFetchWhoseDaemonDiedIsTakenOverOnceItsClaimLapses) {
  testing::RedisServer redis;
  OciRegistryServer registry;
  const auto model = AModel();
  const std::string digest = Push(registry, "models/test:v1", model);
  SetForEachFile(redis, "seedd:origin-lease:" + digest.substr(7) + ":",
                 {"a-daemon-that-died", "PX", "1500"});
  const std::string log = ServeAndPull(registry, redis, model);
  EXPECT_TRUE(Has(log, "is being fetched from upstream by another daemon of the fleet")) << log;
  EXPECT_TRUE(Has(log, "from upstream (6 parts), 0 B from the fleet (0 parts)")) << log;
}

// A daemon of a fleet whose upstream sends a file that does not match its
// digest fails at once, naming the file, instead of waiting for the files its
// one upstream stream was to fetch next; its claims are released for another
// daemon to try, not left to lapse.
TEST_F(OriginsTest, AFleetFetchWithACorruptFileUpstreamFailsAtOnceAndReleasesItsClaims) {
  testing::RedisServer redis;
  std::string log, hex;
  ASSERT_NO_FATAL_FAILURE(FailOnACorruptFile(redis, "model-00001-of-00002.bin", &log, &hex));
  EXPECT_TRUE(Has(log, "model-00001-of-00002.bin: digest sha256:")) << log;
  const std::string keys = RedisCli(redis, {"KEYS", "seedd:origin-[ls]*"});
  EXPECT_EQ(keys.find("origin-"), std::string::npos) << "claims left behind:\n" << keys;
}

// A file of one piece travels as one (served while it lands): when it does not
// match its upstream digest, the fleet's record of that piece is dropped with
// the failure, so that the next try fetches it from upstream again rather than
// pulling the same bytes from the daemon that published them.
TEST_F(OriginsTest, AOnePieceFileThatDoesNotMatchItsDigestLeavesNoRecordOfItsPiece) {
  testing::RedisServer redis;
  std::string log, hex;
  ASSERT_NO_FATAL_FAILURE(FailOnACorruptFile(redis, "model-00002-of-00002.bin", &log, &hex));
  EXPECT_TRUE(Has(log, "fetching piece 0 of model-00002-of-00002.bin")) << log;
  EXPECT_TRUE(Has(log, "model-00002-of-00002.bin: digest sha256:")) << log;
  const std::string keys = RedisCli(redis, {"KEYS", "seedd:origin-part:" + hex + ":2*"});
  EXPECT_EQ(keys.find("origin-part"), std::string::npos) << keys << log;
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// An object uploaded in parts has no MD5 ETag; the x-amz-checksum-sha256 it was
// uploaded with (sent back on a GET with x-amz-checksum-mode) is checked
// instead. s3rver does not store checksums: a scripted HTTP server answers the
// listing and the GET as S3 does.
// An upstream that answers a ranged GET with the whole object (HTTP 200) gets
// one GET instead; nothing of the ignored answer is written.
TEST(S3OriginRanges, AnUpstreamThatIgnoresRangesIsAskedForTheWholeObject) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  const std::string body = RandomBytes(300000, 8);
  const std::string listing =
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated><Contents>"
      "<Key>m/w.bin</Key><Size>300000</Size><ETag>&quot;" +
      Md5HexOf(body) + "&quot;</ETag></Contents></ListBucketResult>";
  testing::FakeHttpServer s3({testing::FakeHttpServer::Response(200, "OK", listing),
                              testing::FakeHttpServer::Response(200, "OK", body)});
  testing::TempDir dir;
  OriginAccess access;
  access.range_bytes = 100000;
  access.range_streams = 1;
  Result<OriginCopy> copy =
      CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "a", access);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(copy->ranged_gets, 0u);
  EXPECT_EQ(testing::ReadAll(copy->dir / "w.bin"), body);
  EXPECT_EQ(s3.requests(), 3);  // the listing, the ignored range, the whole GET
}

// A model of one file, w.bin, of `mib` MiB pushed in parts of 5 MiB to a
// scripted S3 server answering `answers` (the first: the upload's start, with
// UploadId `id`).
Result<OriginPush> PushInParts(const testing::TempDir& dir, int mib, const std::string& id,
                               std::vector<std::string> answers,
                               std::unique_ptr<testing::FakeHttpServer>* s3) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  WriteFiles(dir.path() / "model", {{"w.bin", RandomBytes(static_cast<size_t>(mib) << 20, 9)}});
  answers.insert(answers.begin(),
                 testing::FakeHttpServer::Response(
                     200, "OK",
                     "<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>bucket</Bucket>"
                     "<Key>m/w.bin</Key><UploadId>" +
                         id + "</UploadId></InitiateMultipartUploadResult>"));
  *s3 = std::make_unique<testing::FakeHttpServer>(std::move(answers));
  OriginAccess access;
  access.push_part_bytes = 5 << 20;
  return PushToRegistry("s3://bucket/m?endpoint=" + (*s3)->endpoint(), dir.path() / "model", access,
                        nullptr);
}

// A multipart upload whose part fails is aborted (S3 bills the parts of an
// upload until it completes or is aborted): s3rver does not implement the
// abort, so a scripted server answers as S3 does and fails part 2.
TEST(S3OriginPush, AMultipartUploadWhosePartFailsIsAbortedAndThePushFailsNamingThePart) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(
      dir, 12, "up-42",
      {"HTTP/1.1 200 OK\r\nETag: \"part-1\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
       testing::FakeHttpServer::Response(500, "Internal Server Error",
                                         "<Error><Code>InternalError</Code></Error>"),
       "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
      &s3);
  ASSERT_FALSE(push.ok());
  EXPECT_TRUE(Has(push.status().ToString(), "part 2 of w.bin")) << push.status().ToString();
  const std::vector<std::string> lines = s3->request_lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(Has(lines[0], "POST ") && Has(lines[0], "uploads")) << lines[0];
  EXPECT_TRUE(Has(lines[1], "PUT ") && Has(lines[1], "partNumber=1")) << lines[1];
  EXPECT_TRUE(Has(lines[2], "PUT ") && Has(lines[2], "partNumber=2")) << lines[2];
  EXPECT_TRUE(Has(lines[3], "DELETE ") && Has(lines[3], "uploadId=up-42") &&
              !Has(lines[3], "partNumber"))
      << lines[3];
  EXPECT_FALSE(Has(push.status().ToString(), "not aborted")) << push.status().ToString();
}

// An UploadId too long to put in URLs and errors is refused before any part
// is sent.
TEST(S3OriginPush, AnUploadIdOverItsBoundIsRefusedBeforeAnyPart) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(dir, 11, std::string(5000, 'u'), {}, &s3);
  ASSERT_FALSE(push.ok());
  EXPECT_TRUE(Has(push.status().ToString(), "an UploadId of 5000 bytes (at most 1024)"))
      << push.status().ToString();
  EXPECT_EQ(s3->requests(), 1);
}

// An upload the store would not abort is named, with what the store answered,
// for its owner to abort (its parts are billed until then).
TEST(S3OriginPush, AMultipartUploadThatCouldNotBeAbortedIsNamedInTheError) {
  testing::TempDir dir;
  std::unique_ptr<testing::FakeHttpServer> s3;
  Result<OriginPush> push = PushInParts(
      dir, 11, "up-7",
      {testing::FakeHttpServer::Response(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>"),
       testing::FakeHttpServer::Response(405, "Method Not Allowed",
                                         "<Error><Code>MethodNotAllowed</Code></Error>")},
      &s3);
  ASSERT_FALSE(push.ok());
  const std::string error = push.status().ToString();
  EXPECT_TRUE(Has(error, "the multipart upload up-7 of w.bin was not aborted")) << error;
  EXPECT_TRUE(Has(error, "HTTP 405")) << error;
  EXPECT_TRUE(Has(error, "part 1 of w.bin")) << error;
  EXPECT_EQ(s3->requests(), 3);
}

TEST(S3OriginChecksums, AMultipartObjectIsCheckedAgainstItsSha256ChecksumAndRefusedWhenItDiffers) {
  setenv("AWS_ACCESS_KEY_ID", "test", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  const std::string body = RandomBytes(100000, 7);
  auto answers = [&](const std::string& checksum_of) {
    const std::string listing =
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated><Contents>"
        "<Key>m/w.bin</Key><Size>100000</Size><ETag>&quot;0123456789abcdef0123456789abcdef-2"
        "&quot;</ETag></Contents></ListBucketResult>";
    std::string sha;
    const std::string hex = Sha256Hex(checksum_of);
    for (size_t i = 0; i < hex.size(); i += 2) {
      sha += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    return std::vector<std::string>{
        testing::FakeHttpServer::Response(200, "OK", listing),
        "HTTP/1.1 200 OK\r\nx-amz-checksum-sha256: " + Base64Encode(sha) +
            "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body};
  };
  testing::TempDir dir;
  {
    testing::FakeHttpServer s3(answers(body));
    Result<OriginCopy> copy =
        CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "a", OriginAccess{});
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    EXPECT_EQ(copy->files_unverified, 0u);
    EXPECT_EQ(testing::ReadAll(copy->dir / "w.bin"), body);
  }
  {
    testing::FakeHttpServer s3(answers("other bytes"));
    Result<OriginCopy> copy =
        CopyFromOrigin("s3://bucket/m?endpoint=" + s3.endpoint(), dir.path() / "b", OriginAccess{});
    ASSERT_FALSE(copy.ok());
    EXPECT_EQ(copy.status().code(), StatusCode::kDataLoss) << copy.status().ToString();
    EXPECT_TRUE(Has(copy.status().message(), "w.bin: digest sha256:" + Sha256Hex(body)))
        << copy.status().ToString();
  }
}

}  // namespace
}  // namespace seedd
