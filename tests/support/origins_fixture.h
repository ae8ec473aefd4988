// The fixture of the origin tests (tests/integration/origins_*_test.cc):
// models from an OCI registry (Debian's docker-registry) and an S3-compatible
// server, a daemon serving them, a fleet of daemons sharing a Redis registry,
// and an upstream made slow by a proxy.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
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
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "support/daemon_process.h"
#include "support/servers.h"

namespace seedd::testing {

inline std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// `files` (path -> bytes) written below `dir`.
inline void WriteFiles(const std::filesystem::path& dir,
                       const std::map<std::string, std::string>& files) {
  for (const auto& [path, bytes] : files) {
    std::filesystem::create_directories((dir / path).parent_path());
    std::ofstream(dir / path, std::ios::binary) << bytes;
  }
}

// `bytes`' MD5, in hex (a single-part S3 object's ETag).
inline std::string Md5HexOf(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_md5(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

// A model of five files, two of them the same bytes under two paths.
inline std::map<std::string, std::string> AModel() {
  return {{"model-00001-of-00002.bin", RandomBytes(3 << 20, 1)},
          {"model-00002-of-00002.bin", RandomBytes(1 << 20, 2)},
          {"config.json", R"({"architectures": ["Test"]})"},
          {"tokenizer/tokenizer.json", RandomBytes(100000, 3)},
          // The same bytes under a second path: fetched once.
          {"tokenizer.json", RandomBytes(100000, 3)}};
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
    const std::filesystem::path dir = dir_.path() / "forged";
    WriteFiles(dir, *forged);
    return StartDaemon({"--model", "m=" + dir.string()}, addr, dir_.path() / "liar-cache");
  }
  // Every file below `dir`, by relative path.
  static std::map<std::string, std::string> Files(const std::filesystem::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.is_regular_file())
        out[std::filesystem::relative(e.path(), dir).string()] = testing::ReadAll(e.path());
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

}  // namespace seedd::testing
