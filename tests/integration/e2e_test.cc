// End to end with the real binaries: seedd daemons and seedctl on loopback.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <random>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/json_text.h"
#include "seedd/seed_transport.h"
#include "support/process.h"
#include "support/servers.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using std::chrono::seconds;
using testing::Process;
using testing::RunCommand;
using testing::TempDir;

const char kHash[] = "00112233445566778899aabbccddeeff";
const char kToken[] = "e2e-token-4b1d-7c0e";

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::filesystem::path& p, const std::string& data) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

std::string RandomBytes(size_t n) {
  std::mt19937_64 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(TokenFile(), std::string(kToken) + "\n");
    std::filesystem::permissions(
        TokenFile(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  std::filesystem::path TokenFile() const { return dir_.path() / "token"; }

  // Starts a daemon on a free port; returns its address from the ready line.
  std::unique_ptr<Process> StartDaemon(const std::filesystem::path& cache, std::string* addr,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {SEEDD_BIN,      "--listen",           "127.0.0.1:0",
                                     "--token-file", TokenFile().string(), "--cache-dir",
                                     cache.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(argv);
    auto line = p->ReadLine(seconds(10));
    EXPECT_TRUE(line.has_value()) << p->Stderr();
    const std::string prefix = "seedd: serving on ";
    EXPECT_EQ(line.value_or("").rfind(prefix, 0), 0u) << line.value_or("");
    *addr = line.value_or("").substr(prefix.size());
    return p;
  }

  testing::RunResult Fetch(const std::string& source, const std::filesystem::path& cache,
                           const std::string& file, const std::string& token_file = "") {
    return RunCommand({SEEDCTL_BIN, "fetch", "--source", source, "--token-file",
                       token_file.empty() ? TokenFile().string() : token_file, "--namespace",
                       "triton", "--config-hash", kHash, "--filename", file, "--cache-dir",
                       cache.string()});
  }

  TempDir dir_;
};

TEST_F(E2eTest, AColdDaemonAdoptsAWarmDaemonsFileByteIdentical) {
  const std::string data = RandomBytes(3 << 20);
  WriteFile(dir_.path() / "a" / "triton" / kHash / "kernels.bin", data);
  std::string a_addr;
  std::string b_addr;
  auto a = StartDaemon(dir_.path() / "a", &a_addr);
  auto b = StartDaemon(dir_.path() / "b", &b_addr);

  auto fetched = Fetch(a_addr, dir_.path() / "b", "kernels.bin");
  ASSERT_EQ(fetched.status, 0) << fetched.err;
  EXPECT_NE(
      fetched.out.find("fetched triton/" + std::string(kHash) + "/kernels.bin (3145728 bytes)"),
      std::string::npos)
      << fetched.out;
  EXPECT_EQ(ReadFile(dir_.path() / "b" / "triton" / kHash / "kernels.bin"), data);

  // B now serves what it adopted.
  auto again = Fetch(b_addr, dir_.path() / "c", "kernels.bin");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(ReadFile(dir_.path() / "c" / "triton" / kHash / "kernels.bin"), data);

  a->Signal(SIGTERM);
  b->Signal(SIGINT);
  EXPECT_EQ(a->Wait(seconds(10)), 0) << a->Stderr();
  EXPECT_EQ(b->Wait(seconds(10)), 0) << b->Stderr();
}

TEST_F(E2eTest, SeedctlRequestExitStatusFollowsTheResponse) {
  WriteFile(dir_.path() / "a" / "triton" / kHash / "k.bin", "kernel");
  std::string addr;
  auto a = StartDaemon(dir_.path() / "a", &addr);
  auto request = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {SEEDCTL_BIN, "request",      "--source",
                                     addr,        "--token-file", TokenFile().string(),
                                     "--kind",    "artifact"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  };
  auto ok = request({"--param", "namespace=triton", "--param", std::string("config_hash=") + kHash,
                     "--param", "filename=k.bin"});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"status\":\"ok\""), std::string::npos);
  auto miss = request({"--param", "namespace=triton", "--param",
                       std::string("config_hash=") + kHash, "--param", "filename=none"});
  EXPECT_EQ(miss.status, 3);
  EXPECT_EQ(miss.out, "{\"status\":\"miss\"}\n");
  auto error = request({"--param-json", "namespace=7"});
  EXPECT_EQ(error.status, 4);
  EXPECT_EQ(error.out,
            "{\"message\":\"field 'namespace' must be a string\",\"status\":\"error\"}\n");
  auto bad_json = request({"--param-json", "namespace={"});
  EXPECT_EQ(bad_json.status, 2);
  auto down = RunCommand({SEEDCTL_BIN, "request", "--source", "127.0.0.1:1", "--token-file",
                          TokenFile().string(), "--kind", "artifact"});
  EXPECT_EQ(down.status, 2);
  EXPECT_NE(down.err.find("seedctl: 127.0.0.1:1: connect: Connection refused"), std::string::npos)
      << down.err;
}

TEST_F(E2eTest, SeedctlFetchReportsMissErrorAndNoResponse) {
  std::string addr;
  auto a = StartDaemon(dir_.path() / "a", &addr);
  EXPECT_EQ(Fetch(addr, dir_.path() / "b", "absent.bin").status, 3);
  WriteFile(dir_.path() / "wrong-token", "not-the-token");
  auto wrong = Fetch(addr, dir_.path() / "b", "absent.bin", (dir_.path() / "wrong-token").string());
  EXPECT_EQ(wrong.status, 4);
  // The source's reason and what to do, not only "status error".
  EXPECT_NE(wrong.err.find("seedctl: " + addr +
                           " answered: Unauthorized request (check that both daemons read the "
                           "same token)"),
            std::string::npos)
      << wrong.err;
  EXPECT_EQ(Fetch("127.0.0.1:1", dir_.path() / "b", "absent.bin").status, 2);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "b" / "triton" / kHash / "absent.bin"));
}

TEST_F(E2eTest, TheTokenCanComeFromTheEnvironmentAndIsNeverLogged) {
  Process p({SEEDD_BIN, "--listen", "127.0.0.1:0", "--cache-dir", (dir_.path() / "a").string(),
             "--log-level", "trace"},
            {std::string("SEEDD_TOKEN=") + kToken});
  auto line = p.ReadLine(seconds(10));
  ASSERT_TRUE(line.has_value()) << p.Stderr();
  std::string addr = line->substr(line->rfind(' ') + 1);
  EXPECT_EQ(Fetch(addr, dir_.path() / "b", "absent.bin").status, 3);
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0);
  EXPECT_EQ(p.Stderr().find(kToken), std::string::npos);
}

TEST_F(E2eTest, BadFlagsAndMissingTokensExitTwoWithOneLine) {
  auto no_token = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0"}, {"SEEDD_TOKEN="});
  EXPECT_EQ(no_token.status, 2);
  EXPECT_EQ(no_token.err,
            "seedd: no token: pass --token-file FILE (a file holding the fleet's token, e.g. made "
            "with `openssl rand -hex 32 > FILE`) or set SEEDD_TOKEN to the token itself\n");
  auto missing = RunCommand({SEEDD_BIN, "--token-file", (dir_.path() / "nope").string()});
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "seedd: cannot read the token file " + (dir_.path() / "nope").string() +
                             ": No such file or directory\n");
  auto bad_flag = RunCommand({SEEDD_BIN, "--no-such-flag"});
  EXPECT_EQ(bad_flag.status, 2);
  EXPECT_EQ(std::count(bad_flag.err.begin(), bad_flag.err.end(), '\n'), 1) << bad_flag.err;
  auto bad_addr =
      RunCommand({SEEDD_BIN, "--listen", "nohost", "--token-file", TokenFile().string()});
  EXPECT_EQ(bad_addr.status, 2);
  EXPECT_NE(bad_addr.err.find("--listen: invalid address 'nohost'"), std::string::npos);
  auto ctl = RunCommand({SEEDCTL_BIN, "fetch", "--source", "127.0.0.1:1"});
  EXPECT_EQ(ctl.status, 2);
}

TEST_F(E2eTest, AShortTokenIsRefusedAtStartAndOnReload) {
  const auto short_token = dir_.path() / "short";
  std::ofstream(short_token) << "s3cret\n";
  std::filesystem::permissions(short_token, std::filesystem::perms::owner_read);
  auto r = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", short_token.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "seedd: the token in " + short_token.string() +
                       " has 6 bytes; at least 16 are needed (e.g. openssl rand -hex 32)\n");
  auto env = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0"}, {"SEEDD_TOKEN=0123456789abcde"});
  EXPECT_EQ(env.status, 2);
  EXPECT_NE(env.err.find("the token in SEEDD_TOKEN has 15 bytes"), std::string::npos) << env.err;
}

TEST_F(E2eTest, ATlsListenerWithoutACaIsRefusedWhenItsOwnRequestsWouldBePlaintext) {
  std::string error;
  ASSERT_TRUE(testing::MakeTestPki(dir_.path() / "pki", &error)) << error;
  auto r = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", TokenFile().string(),
                       "--tls-cert", (dir_.path() / "pki" / "server.crt").string(), "--tls-key",
                       (dir_.path() / "pki" / "server.key").string(), "--source", "127.0.0.1:1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--tls-cert without --tls-ca: this daemon's own connections"),
            std::string::npos)
      << r.err;
}

TEST_F(E2eTest, AMisspelledStoreIsAStartupErrorListingTheSchemes) {
  auto r = RunCommand({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", TokenFile().string(),
                       "--store", "bogus://x"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "seedd: store bogus://x: unknown scheme 'bogus' (known schemes: file://, redis://, "
            "s3://)\n");
}

TEST_F(E2eTest, ADaemonServesWhatOnlyItsSharedRedisStoreHolds) {
  testing::RedisServer redis;
  const std::string data = RandomBytes(100000);
  WriteFile(dir_.path() / "value", data);
  const std::string key = std::string("triton/") + kHash + "/shared.bin";
  auto put = RunCommand(
      {SEEDCTL_BIN, "store", "put", "--store", redis.url(), key, (dir_.path() / "value").string()});
  ASSERT_EQ(put.status, 0) << put.err;
  std::string addr;
  auto a = StartDaemon(dir_.path() / "a", &addr, {"--store", redis.url()});
  auto fetched = Fetch(addr, dir_.path() / "b", "shared.bin");
  ASSERT_EQ(fetched.status, 0) << fetched.err;
  EXPECT_EQ(ReadFile(dir_.path() / "b" / "triton" / kHash / "shared.bin"), data);
  // The store going away at run time: a warning and a miss, and the daemon keeps serving.
  redis.Stop();
  EXPECT_EQ(Fetch(addr, dir_.path() / "c", "shared.bin").status, 3);
  a->Signal(SIGTERM);
  EXPECT_EQ(a->Wait(seconds(10)), 0);
  EXPECT_NE(a->Stderr().find("treating it as a miss"), std::string::npos) << a->Stderr();
}

TEST_F(E2eTest, SeedctlStoreGetPutLsRmAgainstS3) {
  testing::S3Server s3;
  std::vector<std::string> env = {"AWS_ACCESS_KEY_ID=S3RVER", "AWS_SECRET_ACCESS_KEY=S3RVER"};
  const std::string url = s3.url("ops");
  const std::string key = std::string("triton/") + kHash + "/k.bin";
  WriteFile(dir_.path() / "in", "store bytes");
  auto ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {SEEDCTL_BIN, "store"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, env);
  };
  EXPECT_EQ(ctl({"put", "--store", url, key, (dir_.path() / "in").string()}).status, 0);
  auto ls = ctl({"ls", "--store", url});
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_EQ(ls.out, key + "\n");
  auto get = ctl({"get", "--store", url, key});
  EXPECT_EQ(get.status, 0);
  EXPECT_EQ(get.out, "store bytes");
  EXPECT_EQ(ctl({"get", "--store", url, key, (dir_.path() / "out").string()}).status, 0);
  EXPECT_EQ(ReadFile(dir_.path() / "out"), "store bytes");
  EXPECT_EQ(ctl({"rm", "--store", url, key}).status, 0);
  auto miss = ctl({"get", "--store", url, key});
  EXPECT_EQ(miss.status, 3);
  EXPECT_NE(miss.err.find("not found"), std::string::npos);
  EXPECT_EQ(ctl({"get", "--store", url, "../etc/passwd"}).status, 2);
}

// "FlashInfer autotune warmup: table from <source> in <s> s" → source.
std::string WarmupSource(const std::string& log) {
  const std::string marker = "FlashInfer autotune warmup: table from ";
  size_t p = log.find(marker);
  if (p == std::string::npos) return "no warmup line";
  p += marker.size();
  return log.substr(p, log.find(" in ", p) - p);
}

TEST_F(E2eTest, ThreeDaemonsTuneSeedFromAPeerAndSeedFromRedis) {
  testing::RedisServer redis;
  const std::vector<std::string> warmup = {"--warmup",          "flashinfer_autotune",
                                           "--autotune-shapes", "32x32x32,48x16x64",
                                           "--log-level",       "info"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), warmup.begin(), warmup.end());
    return extra;
  };
  std::string a_addr, b_addr, c_addr;
  auto a = StartDaemon(dir_.path() / "a", &a_addr, with({"--store", redis.url()}));
  auto b = StartDaemon(dir_.path() / "b", &b_addr, with({"--source", a_addr}));
  auto c = StartDaemon(dir_.path() / "c", &c_addr, with({"--store", redis.url()}));
  for (auto* p : {a.get(), b.get(), c.get()}) {
    p->Signal(SIGTERM);
    EXPECT_EQ(p->Wait(seconds(10)), 0);
  }
  const std::string a_log = a->Stderr(), b_log = b->Stderr(), c_log = c->Stderr();
  EXPECT_EQ(WarmupSource(a_log), "tuning on this host") << a_log;
  EXPECT_EQ(WarmupSource(b_log), "peer") << b_log;
  EXPECT_EQ(WarmupSource(c_log), "shared store") << c_log;
  EXPECT_NE(a_log.find("Published the FlashInfer autotune table"), std::string::npos);
  EXPECT_NE(b_log.find("Adopted remote flashinfer_autotune seed"), std::string::npos);
  EXPECT_NE(c_log.find("Adopted the FlashInfer autotune table from a shared store"),
            std::string::npos);
  // The same table everywhere, and neither B nor C timed a kernel.
  auto table = [&](const std::string& d) {
    for (auto& e :
         std::filesystem::recursive_directory_iterator(dir_.path() / d / "flashinfer_autotune")) {
      if (e.is_regular_file()) return ReadFile(e.path());
    }
    return std::string("missing");
  };
  EXPECT_EQ(table("b"), table("a"));
  EXPECT_EQ(table("c"), table("a"));
  EXPECT_NE(b_log.find("0 shape(s) tuned, 2 loaded"), std::string::npos) << b_log;
  EXPECT_NE(c_log.find("0 shape(s) tuned, 2 loaded"), std::string::npos) << c_log;
}

TEST_F(E2eTest, APullCompletesFromASecondSourceWhenTheFirstIsKilledMidway) {
  const auto model = dir_.path() / "model";
  WriteFile(model / "shard.bin", RandomBytes(96 << 20));
  WriteFile(model / "config.json", R"({"layers": 2})");
  std::string a_addr, b_addr;
  auto a = StartDaemon(dir_.path() / "a", &a_addr, {"--model", "m=" + model.string()});
  auto b = StartDaemon(dir_.path() / "b", &b_addr, {"--model", "m=" + model.string()});
  SeedConfig config;
  config.source = *ParseHostPort(a_addr);
  config.token = kToken;
  auto client = SeedTransport::Create({}, config);
  auto response = (*client)->Request(Json{{"kind", "weight_shards"}, {"model", "m"}});
  ASSERT_TRUE(response.has_value() && (*response)["status"] == "ok");
  auto manifest = ParseManifest((*response)["payload"]);
  ASSERT_TRUE(manifest.ok());
  FetchOptions options;
  options.token = kToken;
  options.connections_per_source = 1;
  options.pipeline = 1;
  bool killed = false;
  options.progress = [&](uint64_t done) {
    if (!killed && done >= (16ull << 20)) {  // a couple of chunks in: A dies
      a->Signal(SIGKILL);
      killed = true;
    }
  };
  FetchStats stats;
  Status s = FetchModel(*manifest, {*ParseHostPort(a_addr), *ParseHostPort(b_addr)},
                        dir_.path() / "dest", options, &stats);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(killed);
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "shard.bin"), ReadFile(model / "shard.bin"));
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "config.json"), R"({"layers": 2})");
}

TEST_F(E2eTest, SeedctlPullFetchesAModelAndManifestDescribesIt) {
  const auto model = dir_.path() / "model";
  WriteFile(model / "a.bin", RandomBytes(5 << 20));
  WriteFile(model / "sub" / "b.json", "{}");
  std::string addr;
  auto a = StartDaemon(dir_.path() / "a", &addr, {"--model", "m=" + model.string()});
  auto pulled =
      RunCommand({SEEDCTL_BIN, "pull", "--source", addr, "--token-file", TokenFile().string(),
                  "--model", "m", "--into", (dir_.path() / "dest").string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_NE(pulled.out.find("pulled m (2 files, 5.00 MiB) from 1 source(s)"), std::string::npos)
      << pulled.out;
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "a.bin"), ReadFile(model / "a.bin"));
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "sub" / "b.json"), "{}");
  auto miss =
      RunCommand({SEEDCTL_BIN, "pull", "--source", addr, "--token-file", TokenFile().string(),
                  "--model", "nope", "--into", (dir_.path() / "x").string()});
  EXPECT_EQ(miss.status, 3);
  auto manifest = RunCommand({SEEDCTL_BIN, "manifest", model.string(), "--model", "m"});
  ASSERT_EQ(manifest.status, 0);
  auto parsed = ParseJson(manifest.out);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(ParseManifest(*parsed).ok());
}

TEST_F(E2eTest, AModelInTheHubCacheIsServedByItsHubNameAndPulledByteIdentical) {
  const auto hub = dir_.path() / "hub";
  const std::string weights = RandomBytes(3 << 20);
  testing::MakeHubModel(hub, "org/tiny", {{"model.bin", weights}, {"config.json", "{}"}}, "c0ffee");
  const std::string env = "HF_HUB_CACHE=" + hub.string();
  Process a({SEEDD_BIN, "--listen", "127.0.0.1:0", "--token-file", TokenFile().string(),
             "--cache-dir", (dir_.path() / "a").string(), "--model", "m=hf:org/tiny"},
            {env});
  auto line = a.ReadLine(seconds(10));
  ASSERT_TRUE(line.has_value()) << a.Stderr();
  const std::string addr = line->substr(std::string("seedd: serving on ").size());
  auto pulled =
      RunCommand({SEEDCTL_BIN, "pull", "--source", addr, "--token-file", TokenFile().string(),
                  "--model", "m", "--into", (dir_.path() / "dest").string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_NE(pulled.out.find("pulled m (2 files, 3.00 MiB)"), std::string::npos) << pulled.out;
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "model.bin"), weights);
  EXPECT_EQ(ReadFile(dir_.path() / "dest" / "config.json"), "{}");
  auto manifest = RunCommand({SEEDCTL_BIN, "manifest", "hf:org/tiny"}, {env});
  ASSERT_EQ(manifest.status, 0) << manifest.err;
  auto parsed = ParseJson(manifest.out);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)["model"], "tiny");
  EXPECT_EQ((*parsed)["files"].size(), 2u);
  // A model that is not there says where it looked.
  auto missing = RunCommand({SEEDCTL_BIN, "manifest", "hf:org/absent"}, {env});
  EXPECT_EQ(missing.status, 4);
  EXPECT_NE(missing.err.find("not in the Hugging Face cache " + hub.string()), std::string::npos)
      << missing.err;
}

TEST_F(E2eTest, ADaemonPullsAModelAtStartThenServesIt) {
  const auto model = dir_.path() / "model";
  WriteFile(model / "w.bin", RandomBytes(3 << 20));
  WriteFile(model / "config.json", "{}");
  std::string a_addr, b_addr;
  auto a = StartDaemon(dir_.path() / "a", &a_addr, {"--model", "m=" + model.string()});
  auto b = StartDaemon(dir_.path() / "b", &b_addr, {"--source", a_addr, "--pull", "m"});
  const auto current = dir_.path() / "b" / "weights" / "m" / "current";
  ASSERT_TRUE(std::filesystem::is_symlink(current));
  EXPECT_EQ(ReadFile(current / "w.bin"), ReadFile(model / "w.bin"));
  // B serves what it pulled: C pulls from B alone.
  auto pulled =
      RunCommand({SEEDCTL_BIN, "pull", "--source", b_addr, "--token-file", TokenFile().string(),
                  "--model", "m", "--into", (dir_.path() / "c").string()});
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_EQ(ReadFile(dir_.path() / "c" / "w.bin"), ReadFile(model / "w.bin"));
  // A restart finds the model in place and does not fetch it again.
  b->Signal(SIGTERM);
  EXPECT_EQ(b->Wait(seconds(10)), 0);
  a->Signal(SIGKILL);
  a->Wait(seconds(10));
  auto again = StartDaemon(dir_.path() / "b", &b_addr,
                           {"--source", a_addr, "--pull", "m", "--log-level", "info"});
  again->Signal(SIGTERM);
  EXPECT_EQ(again->Wait(seconds(10)), 0);
  const std::string log = again->Stderr();
  EXPECT_NE(log.find("serving the local copy"), std::string::npos) << log;
  EXPECT_EQ(log.find("Pulled model"), std::string::npos) << log;
}

TEST_F(E2eTest, ADaemonPullsFromEverySourceAndSkipsOneThatIsDown) {
  const auto model = dir_.path() / "model";
  WriteFile(model / "w.bin", RandomBytes(3 << 20));
  std::string a_addr, b_addr;
  auto a = StartDaemon(dir_.path() / "a", &a_addr, {"--model", "m=" + model.string()});
  // The first source listens nowhere: the manifest and the bytes come from A.
  const std::string down = "127.0.0.1:" + std::to_string(testing::FreePort());
  auto b = StartDaemon(dir_.path() / "b", &b_addr,
                       {"--source", down, "--source", a_addr, "--pull", "m"});
  const auto current = dir_.path() / "b" / "weights" / "m" / "current";
  ASSERT_TRUE(std::filesystem::is_symlink(current));
  EXPECT_EQ(ReadFile(current / "w.bin"), ReadFile(model / "w.bin"));
}

TEST_F(E2eTest, BothProgramsSayTheirVersionAndRevision) {
  for (const char* bin : {SEEDD_BIN, SEEDCTL_BIN}) {
    auto v = RunCommand({bin, "--version"});
    EXPECT_EQ(v.status, 0) << v.err;
    EXPECT_NE(v.out.find(" 0.1.0 (git "), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(" build)"), std::string::npos) << v.out;
  }
}

TEST_F(E2eTest, AModelNameGivenTwiceIsAnError) {
  auto r = RunCommand({SEEDD_BIN, "--token-file", TokenFile().string(), "--model",
                       "m=" + dir_.path().string(), "--model", "m=/elsewhere"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--model: m is given twice"), std::string::npos) << r.err;
}

TEST_F(E2eTest, HelpExplainsEveryFlag) {
  auto seedd_help = RunCommand({SEEDD_BIN, "--help"});
  EXPECT_EQ(seedd_help.status, 0);
  for (const char* flag :
       {"--listen", "--source", "--token-file", "--cache-dir", "--log-level", "--store", "--warmup",
        "--autotune-runner", "--autotune-root", "--config-hash", "--dp-rank", "--rank",
        "--no-autotune", "--model", "--pull", "--advertise", "--chunk-mib"}) {
    EXPECT_NE(seedd_help.out.find(flag), std::string::npos) << flag;
  }
  auto fetch_help = RunCommand({SEEDCTL_BIN, "fetch", "--help"});
  EXPECT_EQ(fetch_help.status, 0);
  for (const char* flag :
       {"--source", "--token-file", "--namespace", "--config-hash", "--filename", "--cache-dir"}) {
    EXPECT_NE(fetch_help.out.find(flag), std::string::npos) << flag;
  }
  auto request_help = RunCommand({SEEDCTL_BIN, "request", "--help"});
  for (const char* flag : {"--kind", "--param", "--param-json"}) {
    EXPECT_NE(request_help.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace seedd
