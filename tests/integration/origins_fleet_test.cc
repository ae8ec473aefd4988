// Daemons configured alike (one --model URL, one Redis registry) fetch an
// upstream model once per fleet: who fetches which file or piece, pieces pulled
// from the fleet while they land upstream, digest lists and records that lie,
// and fetches taken over when their daemon dies.
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "seedd/origins.h"
#include "support/daemon_process.h"
#include "support/origins_fixture.h"
#include "support/servers.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::AModel;
using testing::Has;
using testing::OciRegistryServer;
using testing::OriginsTest;
using testing::RunCommand;

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
