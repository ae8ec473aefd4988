// Signatures between real seedd and seedctl processes: a publisher's --sign-key,
// its consumers' --trust-key. A signed manifest passes through a relaying
// daemon with its signature; a manifest or compile cache bundle that is
// unsigned or signed by another key is refused before anything is installed,
// the error naming the keys. Keys are made by the openssl CLI.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "support/daemon_process.h"

namespace seedd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kKey = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";

class SignaturesTest : public DaemonProcessTest {
 protected:
  void SetUp() override {
    DaemonProcessTest::SetUp();
    std::string error;
    ASSERT_TRUE(MakeSigningKeys(keys(), {"publisher", "stranger"}, &error)) << error;
    RunResult fp =
        RunCommand({SEEDCTL_BIN, "key", "fingerprint", (keys() / "publisher.pub.pem").string()});
    ASSERT_EQ(fp.status, 0) << fp.err;
    publisher_fp_ = fp.out.substr(0, fp.out.find(' '));
    ASSERT_EQ(publisher_fp_.rfind("ed25519:", 0), 0u) << fp.out;
  }
  fs::path keys() const { return dir_.path() / "keys"; }
  std::string pem(const std::string& name) const { return (keys() / (name + ".pem")).string(); }
  static std::string Stop(std::unique_ptr<Process>& p) {
    p->Signal(SIGTERM);
    p->Wait(std::chrono::seconds(20));
    return p->Stderr();
  }
  std::string publisher_fp_;
};

TEST_F(SignaturesTest, ASignedManifestPassesThroughARelayAndOnlyATrustedKeysIsPulled) {
  std::string origin, relay, plain;
  auto a = StartDaemon({"--model", "m=" + model().string(), "--sign-key", pem("publisher")},
                       &origin, dir_.path() / "a");
  // A daemon that pulls with --trust-key and serves the model on, signature and all.
  uint16_t admin_port = 0;
  { UniqueFd probe = ListenLoopback(&admin_port); }
  const std::string admin = "127.0.0.1:" + std::to_string(admin_port);
  auto b = StartDaemon({"--source", origin, "--pull", "m", "--trust-key", pem("publisher.pub"),
                        "--admin-listen", admin},
                       &relay, dir_.path() / "b");
  RunResult status = RunCommand({SEEDCTL_BIN, "status", "--admin", admin});
  EXPECT_TRUE(Has(status.out, "sha256 chunks, signed by " + publisher_fp_))
      << status.out << status.err;
  RunResult through =
      RunCommand(PullArgs(relay, dir_.path() / "via-relay", {"--trust-key", pem("publisher.pub")}));
  ASSERT_EQ(through.status, 0) << through.err;
  EXPECT_TRUE(SameTree(model(), dir_.path() / "via-relay"));

  // Trusting another key: refused before a byte moves, the signer named.
  RunResult stranger =
      RunCommand(PullArgs(origin, dir_.path() / "stranger", {"--trust-key", pem("stranger.pub")}));
  EXPECT_NE(stranger.status, 0);
  EXPECT_TRUE(Has(stranger.err, "signed by " + publisher_fp_ + ", which is not trusted"))
      << stranger.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "stranger"));

  // An origin that does not sign: refused by a consumer that trusts a key.
  auto u = StartDaemon({"--model", "m=" + model().string()}, &plain, dir_.path() / "u");
  RunResult unsigned_pull =
      RunCommand(PullArgs(plain, dir_.path() / "unsigned", {"--trust-key", pem("publisher.pub")}));
  EXPECT_NE(unsigned_pull.status, 0);
  EXPECT_TRUE(Has(unsigned_pull.err, "is not signed; trusted keys: " + publisher_fp_))
      << unsigned_pull.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "unsigned"));
  // Without --trust-key nothing is checked: unsigned fleets work as before.
  RunResult any = RunCommand(PullArgs(plain, dir_.path() / "any"));
  EXPECT_EQ(any.status, 0) << any.err;
  Stop(u);
  Stop(b);
  Stop(a);
}

TEST_F(SignaturesTest, ADaemonTrustingAKeyInstallsOnlyBundlesItSigned) {
  const fs::path warm = dir_.path() / "warm";
  WriteRandom(warm / "0c5d1e2f3a" / "kernel.so", 32 * 1024, 5);
  WriteRandom(warm / "0c5d1e2f3a" / "kernel.py", 500, 6);
  auto warmup = [&](const fs::path& dir, const fs::path& store) {
    fs::create_directories(store);
    return std::vector<std::string>{"--warmup",      "compile_cache:triton=" + dir.string(),
                                    "--compile-key", kKey,
                                    "--store",       "file://" + store.string(),
                                    "--log-level",   "info"};
  };
  // An unsigned bundle in one shared store, a signed one in another.
  std::string addr;
  auto plain = StartDaemon(warmup(warm, dir_.path() / "unsigned-store"), &addr, dir_.path() / "p");
  Stop(plain);
  auto args = warmup(warm, dir_.path() / "signed-store");
  args.insert(args.end(), {"--sign-key", pem("publisher")});
  auto signer = StartDaemon(args, &addr, dir_.path() / "s");
  Stop(signer);

  const fs::path cold = dir_.path() / "cold";
  args = warmup(cold, dir_.path() / "unsigned-store");
  args.insert(args.end(), {"--trust-key", pem("publisher.pub")});
  auto refusing = StartDaemon(args, &addr, dir_.path() / "c");
  std::string log = Stop(refusing);
  EXPECT_TRUE(Has(log, "is not signed; trusted keys: " + publisher_fp_)) << log;
  EXPECT_TRUE(Has(log, "compile_cache:triton: none")) << log;
  EXPECT_TRUE(!fs::exists(cold) || fs::is_empty(cold));

  args = warmup(cold, dir_.path() / "signed-store");
  args.insert(args.end(), {"--trust-key", pem("publisher.pub")});
  auto trusting = StartDaemon(args, &addr, dir_.path() / "c");
  log = Stop(trusting);
  EXPECT_TRUE(Has(log, "compile_cache:triton: shared store")) << log;
  EXPECT_TRUE(SameTree(warm, cold));
  // It cannot sign what it would publish: a signed bundle is not replaced by an unsigned one.
  EXPECT_TRUE(Has(log, "not published: this daemon trusts signed bundles only")) << log;

  // seedctl fetch checks the same, from a daemon serving its directory signed.
  args = warmup(warm, dir_.path() / "signed-store");
  args.insert(args.end(), {"--sign-key", pem("publisher")});
  auto serving = StartDaemon(args, &addr, dir_.path() / "s");
  auto fetch = [&](const std::string& key, const fs::path& into) {
    return RunCommand({SEEDCTL_BIN, "fetch", "--source", addr, "--token-file",
                       token_file().string(), "--kind", "compile_cache", "--namespace", "triton",
                       "--key", kKey, "--dir", into.string(), "--trust-key", pem(key)});
  };
  RunResult ok = fetch("publisher.pub", dir_.path() / "fetched");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(SameTree(warm, dir_.path() / "fetched"));
  RunResult refused = fetch("stranger.pub", dir_.path() / "refused");
  EXPECT_NE(refused.status, 0);
  EXPECT_TRUE(Has(refused.err, "signed by " + publisher_fp_ + ", which is not trusted"))
      << refused.err;
  EXPECT_TRUE(!fs::exists(dir_.path() / "refused") || fs::is_empty(dir_.path() / "refused"));
  Stop(serving);
}

TEST_F(SignaturesTest, AKeyThatIsNotEd25519IsRefusedAtStartNamingTheFile) {
  std::string error;
  ASSERT_TRUE(MakeTestPki(dir_.path() / "pki", &error)) << error;
  std::string addr;
  auto p = StartDaemon(
      {"--model", "m=" + model().string(), "--sign-key", (dir_.path() / "pki/server.key").string()},
      &addr, {}, "127.0.0.1:0", false);
  EXPECT_TRUE(p->Wait(std::chrono::seconds(20)).has_value());
  EXPECT_TRUE(Has(p->Stderr(), "server.key: not an Ed25519 key")) << p->Stderr();
}

}  // namespace
}  // namespace seedd::testing
