// Models from an OCI registry (Debian's docker-registry): ModelPack artifacts
// pushed by skopeo or by seedctl push, fetched by seedd and verified against
// the layers' digests, then served to the swarm; pins, revisions, stalls and
// missing tags, and registries with basic or token authentication over TLS.
#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/crypto.h"
#include "seedd/json_text.h"
#include "seedd/origins.h"
#include "seedd/units.h"
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
using testing::PushModelPack;
using testing::RandomBytes;
using testing::RunCommand;
using testing::WriteFiles;

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
  EXPECT_TRUE(Has(refused.err, "seedctl pull --replace")) << refused.err;
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

// `seedctl pull URL --into DIR` reads as `seedctl push URL --from DIR` writes:
// the URL alone is --from. A word that is no URL (a model's name) is refused
// with the flags that pull a model from daemons, and nothing is created.
TEST_F(OriginsTest, SeedctlPullTakesTheUpstreamUrlAsItsArgument) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  const fs::path into = dir_.path() / "engine";
  auto pulled = RunCommand({SEEDCTL_BIN, "pull", url, "--into", into.string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(into), model);
  EXPECT_TRUE(Has(pulled.out, "every file matched its upstream digest")) << pulled.out;

  const fs::path other = dir_.path() / "other";
  auto name = RunCommand({SEEDCTL_BIN, "pull", "llama", "--into", other.string()});
  EXPECT_EQ(name.status, 2) << name.err;
  EXPECT_TRUE(Has(name.err, "--source HOST:PORT --model llama")) << name.err;
  auto twice = RunCommand({SEEDCTL_BIN, "pull", url, "--from", url, "--into", other.string()});
  EXPECT_EQ(twice.status, 2) << twice.err;
  EXPECT_FALSE(fs::exists(other));
}

// A new revision pulled from its upstream over the directory holding the old
// one (--replace) copies the files that did not change (same path, and bytes
// that match the upstream's digest) and fetches the rest; a file whose bytes
// were changed by hand is fetched, not copied.
TEST_F(OriginsTest, ARevisionPulledOverItsPredecessorFetchesOnlyTheFilesThatChanged) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  auto model2 = model;
  model2["model-00002-of-00002.bin"] = RandomBytes(1 << 20, 9);  // a fine-tuned shard
  Push(registry, "models/test:v2", model2);
  const std::string base = "oci://" + registry.host() + "/models/test:";
  const fs::path into = dir_.path() / "engine";
  ASSERT_TRUE(PullFromOrigin(base + "v1", into, {}).ok());
  // Changed by hand, same size: not to be trusted.
  std::ofstream(into / "config.json", std::ios::trunc) << R"({"architectures": ["Tust"]})";

  OriginPullOptions options;
  options.replace = true;
  Result<OriginCopy> copy = PullFromOrigin(base + "v2", into, options);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(into), model2);
  const uint64_t changed = model2["model-00002-of-00002.bin"].size() + model2["config.json"].size();
  EXPECT_EQ(copy->bytes_fetched, changed);
  EXPECT_EQ(copy->bytes_reused, copy->total_bytes - changed);

  // The same through seedctl, into a new directory with the old one named.
  const fs::path other = dir_.path() / "other";
  auto pulled = RunCommand(
      {SEEDCTL_BIN, "pull", base + "v1", "--into", other.string(), "--reuse-from", into.string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(other), model);
  EXPECT_TRUE(Has(pulled.out, HumanBytes(model.at("model-00002-of-00002.bin").size() +
                                         model.at("config.json").size()) +
                                  " from upstream"))
      << pulled.out;
}

// A pull from an upstream whose cancel flag is set (Ctrl-C in seedctl, the
// Python package's KeyboardInterrupt) ends Cancelled: nothing moved into the
// destination and no staging left beside it.
TEST_F(OriginsTest, APullFromAnUpstreamThatIsCancelledMovesNothingIn) {
  OciRegistryServer registry;
  Push(registry, "models/test:v1", AModel());
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  OriginPullOptions options;
  options.cancel = std::make_shared<std::atomic<bool>>(true);
  const fs::path into = dir_.path() / "engine" / "model";
  fs::create_directories(into.parent_path());
  Result<OriginCopy> copy = PullFromOrigin(url, into, options);
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kCancelled) << copy.status().ToString();
  EXPECT_FALSE(fs::exists(into));
  EXPECT_TRUE(fs::is_empty(into.parent_path()));

  options.cancel->store(false);  // the same call, not stopped, lands the model
  copy = PullFromOrigin(url, into, options);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ(Files(into), AModel());
  EXPECT_EQ(copy->dir, into);
}

// --progress json from an upstream is what it is from daemons: JSON lines on
// stdout (progress, then done or error), no summary for a person among them.
TEST_F(OriginsTest, SeedctlPullFromAnUpstreamWithJsonProgressPrintsOnlyJsonEvents) {
  OciRegistryServer registry;
  const auto model = AModel();
  Push(registry, "models/test:v1", model);
  const std::string url = "oci://" + registry.host() + "/models/test:v1";
  const auto events = [](const std::string& out) {
    std::vector<Json> lines;
    size_t at = 0;
    while (at < out.size()) {
      const size_t end = out.find('\n', at);
      Result<Json> j = ParseJson(out.substr(at, end - at));
      EXPECT_TRUE(j.ok()) << "not a JSON line: " << out.substr(at, end - at);
      if (j.ok()) lines.push_back(*j);
      at = end == std::string::npos ? out.size() : end + 1;
    }
    return lines;
  };
  auto pulled = RunCommand(
      {SEEDCTL_BIN, "pull", url, "--into", (dir_.path() / "a").string(), "--progress", "json"});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(Files(dir_.path() / "a"), model);
  std::vector<Json> lines = events(pulled.out);
  ASSERT_FALSE(lines.empty());
  const Json& done = lines.back();
  EXPECT_EQ(done.value("event", ""), "done") << DumpJson(done);
  EXPECT_EQ(done.value("files", size_t{0}), model.size()) << DumpJson(done);
  EXPECT_EQ(done.value("version", std::string()).rfind("sha256:", 0), 0u) << DumpJson(done);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i].value("event", ""), "progress") << DumpJson(lines[i]);
  }

  auto missing = RunCommand({SEEDCTL_BIN, "pull", url + "-missing", "--into",
                             (dir_.path() / "b").string(), "--progress", "json"});
  EXPECT_EQ(missing.status, 3) << missing.err;
  lines = events(missing.out);
  ASSERT_EQ(lines.size(), 1u) << missing.out;
  EXPECT_EQ(lines[0].value("event", ""), "error");
  EXPECT_EQ(lines[0].value("code", ""), "NotFound");
  EXPECT_TRUE(Has(lines[0].value("message", ""), "v1-missing")) << DumpJson(lines[0]);
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
  // libcurl's account, not only its code's text ("Couldn't connect to server").
  EXPECT_TRUE(Has(copy.status().message(), "port " + std::to_string(port)))
      << copy.status().ToString();
}

// An https URL (plain-http=false) to a registry that speaks plain HTTP fails in
// the handshake, and the error says how to ask for plain HTTP.
TEST_F(OriginsTest, HttpsToAPlainHttpRegistryFailsNamingThePlainHttpParameter) {
  OciRegistryServer registry;
  Push(registry, "models/test:v1", AModel());
  const std::string url = "oci://" + registry.host() + "/models/test:v1?plain-http=false";
  Result<OriginCopy> copy = CopyFromOrigin(url, dir_.path() / "origins", OriginAccess{});
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), StatusCode::kUnavailable) << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "https://" + registry.host() + "/v2/"))
      << copy.status().ToString();
  EXPECT_TRUE(Has(copy.status().message(), "?plain-http=true")) << copy.status().ToString();
  size_t files = 0;  // nothing fetched, nothing kept
  if (fs::exists(dir_.path() / "origins")) {
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "origins")) {
      files += e.is_regular_file();
    }
  }
  EXPECT_EQ(files, 0u);
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
  // The error says what is wrong and which flag fixes it.
  EXPECT_TRUE(Has(untrusted.status().message(), "certificate")) << untrusted.status().ToString();
  EXPECT_TRUE(Has(untrusted.status().message(), "--origin-ca FILE"))
      << untrusted.status().ToString();
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
