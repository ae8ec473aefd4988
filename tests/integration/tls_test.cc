// TLS 1.3 between real seedd and seedctl processes, with a PKI made by the
// openssl CLI: verified control and data planes (a pull, and a relay's), a
// wrong CA, an expired certificate, mTLS without a client certificate, plain
// and TLS peers on each other's ports (each a clear error on both sides and
// nothing served), the plain compatibility listener, and certificates
// re-read on SIGHUP without dropping a connection.
#include "transport/tls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <fstream>
#include <thread>

#include "seedd/json_text.h"
#include "support/daemon_process.h"
#include "support/process.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "transport/client.h"
#include "wire/frame.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::Process;
using testing::RunCommand;

using testing::Has;

class TlsTest : public testing::DaemonProcessTest {
 protected:
  void SetUp() override {
    DaemonProcessTest::SetUp();
    std::string error;
    ASSERT_TRUE(testing::MakeTestPki(pki(), &error)) << error;
  }
  fs::path pki() const { return dir_.path() / "pki"; }
  std::string Pem(const std::string& name) const { return (pki() / name).string(); }

  // A daemon; its address in *addr once it reported ready.
  std::unique_ptr<Process> Daemon(const std::string& name, std::vector<std::string> extra,
                                  std::string* addr) {
    extra.insert(extra.end(), {"--log-level", "info"});
    return StartDaemon(std::move(extra), addr, dir_.path() / name);
  }
  std::vector<std::string> Tls(const std::string& cert) const {
    return {"--tls-cert", Pem(cert + ".crt"), "--tls-key", Pem(cert + ".key")};
  }
  testing::RunResult Ls(const std::string& addr, std::vector<std::string> extra) {
    std::vector<std::string> argv = {SEEDCTL_BIN, "ls",           "--source",
                                     addr,        "--token-file", token_file().string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  }
  testing::RunResult Pull(const std::string& addr, const fs::path& into,
                          std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        SEEDCTL_BIN, "pull",   "--source",    addr,           "--model",
        "m",         "--into", into.string(), "--token-file", token_file().string(),
        "--timeout", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  }
  // Waits until the daemon's log holds `text`.
  bool Logged(Process& p, const std::string& text) {
    return testing::WaitUntil([&] { return Has(p.Stderr(), text); });
  }
};

TEST_F(TlsTest, BothPlanesAreServedOverVerifiedTlsAndRelayed) {
  std::vector<std::string> args = {"--model", "m=" + model().string()};
  for (auto& s : Tls("server")) args.push_back(s);
  std::string origin_addr;
  auto origin = Daemon("origin", args, &origin_addr);
  const std::vector<std::string> client = {"--tls-ca", Pem("ca.crt")};
  auto ls = Ls(origin_addr, client);
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_TRUE(Has(ls.out, "m ")) << ls.out;
  auto pulled = Pull(origin_addr, dir_.path() / "dest", client);
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
  // A TLS daemon pulls at start over TLS, then relays over TLS to seedctl.
  std::vector<std::string> puller_args = {"--source", origin_addr, "--pull",
                                          "m",        "--tls-ca",  Pem("ca.crt")};
  for (auto& s : Tls("server")) puller_args.push_back(s);
  std::string puller_addr;
  auto puller = Daemon("puller", puller_args, &puller_addr);
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "puller" / "weights" / "m" / "current"))
      << puller->Stderr();
  auto relayed = Pull(puller_addr, dir_.path() / "relayed", client);
  ASSERT_EQ(relayed.status, 0) << relayed.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "relayed"));
}

TEST_F(TlsTest, AWrongCaIsRefusedOnBothSidesAndNothingIsServed) {
  std::vector<std::string> args = {"--model", "m=" + model().string()};
  for (auto& s : Tls("server")) args.push_back(s);
  std::string addr;
  auto origin = Daemon("origin", args, &addr);
  auto r = Pull(addr, dir_.path() / "dest", {"--tls-ca", Pem("other-ca.crt")});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(Has(r.err,
                  "the peer's certificate was refused: unable to get local issuer "
                  "certificate"))
      << r.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
  EXPECT_TRUE(Logged(*origin, "TLS handshake with 127.0.0.1 failed")) << origin->Stderr();
  // The certificate of another CA, seen by a client of the first.
  std::vector<std::string> stranger_args = {"--model", "m=" + model().string()};
  for (auto& s : Tls("stranger")) stranger_args.push_back(s);
  std::string stranger_addr;
  auto stranger = Daemon("stranger", stranger_args, &stranger_addr);
  auto s = Ls(stranger_addr, {"--tls-ca", Pem("ca.crt")});
  EXPECT_EQ(s.status, 2) << s.err;
  EXPECT_TRUE(Has(s.err, "certificate was refused")) << s.err;
}

TEST_F(TlsTest, AnExpiredCertificateIsRefusedOnBothSides) {
  std::vector<std::string> args = {"--model", "m=" + model().string()};
  for (auto& s : Tls("expired")) args.push_back(s);
  std::string addr;
  auto origin = Daemon("origin", args, &addr);
  EXPECT_TRUE(Has(origin->Stderr(), "has expired: peers will refuse it")) << origin->Stderr();
  auto r = Ls(addr, {"--tls-ca", Pem("ca.crt")});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(Has(r.err, "the peer's certificate was refused: certificate has expired")) << r.err;
  EXPECT_TRUE(Logged(*origin, "TLS handshake with 127.0.0.1 failed")) << origin->Stderr();
  EXPECT_TRUE(Logged(*origin, "certificate expired")) << origin->Stderr();
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  std::vector<std::string> args = {"--model", "m=" + model().string(), "--tls-ca", Pem("ca.crt"),
                                   "--tls-client-auth"};
  for (auto& s : Tls("server")) args.push_back(s);
  std::string addr;
  auto origin = Daemon("origin", args, &addr);
  auto anonymous = Pull(addr, dir_.path() / "dest", {"--tls-ca", Pem("ca.crt")});
  EXPECT_EQ(anonymous.status, 2) << anonymous.err;
  EXPECT_TRUE(Has(anonymous.err, "requires a client certificate")) << anonymous.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
  EXPECT_TRUE(Logged(*origin, "the client sent no certificate")) << origin->Stderr();
  auto known = Pull(
      addr, dir_.path() / "dest",
      {"--tls-ca", Pem("ca.crt"), "--tls-cert", Pem("client.crt"), "--tls-key", Pem("client.key")});
  EXPECT_EQ(known.status, 0) << known.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "dest"));
}

TEST_F(TlsTest, PlainAndTlsPeersOnEachOthersPortsAreNamedOnBothSides) {
  std::vector<std::string> args = {"--model", "m=" + model().string(), "--listen-plain",
                                   "127.0.0.1:0"};
  for (auto& s : Tls("server")) args.push_back(s);
  std::string tls_addr;
  auto tls_daemon = Daemon("tls", args, &tls_addr);
  auto plain_client = Ls(tls_addr, {});
  EXPECT_EQ(plain_client.status, 4) << plain_client.err;
  EXPECT_TRUE(Has(plain_client.err, "this port speaks TLS")) << plain_client.err;
  EXPECT_TRUE(Logged(*tls_daemon, "A plain client connected from 127.0.0.1 to this TLS port"))
      << tls_daemon->Stderr();
  // The compatibility listener serves plain clients.
  const std::string log = tls_daemon->Stderr();
  const std::string key = "Serving plain TCP on ";
  ASSERT_TRUE(Has(log, key)) << log;
  const std::string plain_addr =
      log.substr(log.find(key) + key.size(),
                 log.find(' ', log.find(key) + key.size()) - (log.find(key) + key.size()));
  auto compat = Pull(plain_addr, dir_.path() / "compat", {});
  EXPECT_EQ(compat.status, 0) << compat.err;
  EXPECT_TRUE(testing::SameTree(model(), dir_.path() / "compat"));

  std::string plain_only;
  auto plain_daemon = Daemon("plain", {"--model", "m=" + model().string()}, &plain_only);
  auto tls_client = Pull(plain_only, dir_.path() / "dest", {"--tls-ca", Pem("ca.crt")});
  EXPECT_EQ(tls_client.status, 2) << tls_client.err;
  EXPECT_TRUE(Has(tls_client.err, "the peer does not speak TLS")) << tls_client.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "dest"));
  EXPECT_TRUE(Logged(*plain_daemon, "A TLS client connected from 127.0.0.1 to a plain port"))
      << plain_daemon->Stderr();
}

TEST_F(TlsTest, SighupReadsNewCertificatesAndKeepsOpenConnections) {
  const fs::path cert = dir_.path() / "live.crt";
  const fs::path key = dir_.path() / "live.key";
  fs::copy_file(pki() / "server.crt", cert);
  fs::copy_file(pki() / "server.key", key);
  std::string addr;
  auto origin = Daemon(
      "origin",
      {"--model", "m=" + model().string(), "--tls-cert", cert.string(), "--tls-key", key.string()},
      &addr);
  EXPECT_EQ(Ls(addr, {"--tls-ca", Pem("ca.crt")}).status, 0);
  // A TLS connection made before the reload, its request sent after it.
  TlsOptions options;
  options.ca = pki() / "ca.crt";
  auto ctx = TlsContext::Create(options);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  auto where = ParseHostPort(addr);
  ASSERT_TRUE(where.ok());
  auto fd = ConnectTcp(*where, std::chrono::seconds(5));
  ASSERT_TRUE(fd.ok());
  ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL) & ~O_NONBLOCK);
  auto conn = Conn::Connect(fd->get(), **ctx, "127.0.0.1",
                            std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();

  fs::copy_file(pki() / "stranger.crt", cert, fs::copy_options::overwrite_existing);
  fs::copy_file(pki() / "stranger.key", key, fs::copy_options::overwrite_existing);
  origin->Signal(SIGHUP);
  EXPECT_TRUE(Logged(*origin, "TLS certificate, key and CA read again")) << origin->Stderr();

  const std::string frame =
      EncodeJsonFrame(Json{{"kind", "catalog"}, {"prefix", ""}, {"token", testing::kToken}});
  ASSERT_TRUE((*conn)->SendAllBy(frame.data(), frame.size(),
                                 std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  auto body =
      ReadFrameBody(**conn, 1 << 20, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_TRUE(Has(*body, "\"status\":\"ok\"")) << *body;
  // New connections get the new certificate: a client of the old CA refuses it,
  // one of the new CA takes it.
  auto old_ca = Ls(addr, {"--tls-ca", Pem("ca.crt")});
  EXPECT_EQ(old_ca.status, 2) << old_ca.err;
  auto new_ca = Ls(addr, {"--tls-ca", Pem("other-ca.crt")});
  EXPECT_EQ(new_ca.status, 0) << new_ca.err;
  // A file that cannot be read keeps the certificate in use.
  fs::remove(key);
  origin->Signal(SIGHUP);
  EXPECT_TRUE(Logged(*origin, "keeping the TLS files in use")) << origin->Stderr();
  EXPECT_EQ(Ls(addr, {"--tls-ca", Pem("other-ca.crt")}).status, 0);
}

}  // namespace
}  // namespace seedd
