// SeedTransport over real loopback sockets: every behaviour of SPEC §2.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "common/crypto.h"
#include "seedd/artifact_kind.h"
#include "seedd/seed_transport.h"
#include "support/test_util.h"
#include "support/transport_fixture.h"
#include "transport/client.h"
#include "transport/handler.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ConnectRaw;
using testing::Header;
using testing::LogCapture;
using testing::ReadResponse;
using testing::SendAll;
using testing::WaitUntil;
using transport_testing::ArtifactRequest;
using transport_testing::KeyFields;
using transport_testing::kHash;
using transport_testing::kToken;
using transport_testing::TransportTest;

// The sockets of this process, and whether each is closed on exec.
std::vector<bool> SocketsCloseOnExec() {
  std::vector<bool> flags;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (ec || target.rfind("socket:", 0) != 0) continue;
    const int fd = std::stoi(e.path().filename().string());
    flags.push_back((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  return flags;
}

// A process the daemon starts (an autotune runner) that outlived it would hold
// its port and its peers' connections: no socket of the listener is inherited.
TEST_F(TransportTest, TheListenerAndAcceptedSocketsAreNotInheritedByChildren) {
  const size_t before = SocketsCloseOnExec().size();  // the listener's
  Result<UniqueFd> held = ConnectTcp(addr_, std::chrono::seconds(5));
  ASSERT_OK(held);
  ASSERT_TRUE(WaitUntil([&] { return SocketsCloseOnExec().size() >= before + 2; }));
  for (bool cloexec : SocketsCloseOnExec()) EXPECT_TRUE(cloexec);
}

TEST_F(TransportTest, ServesOkWithThePayload) {
  auto response = Client(addr_)->Request(ArtifactRequest());
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ((*response)["status"], "ok");
  EXPECT_EQ((*response)["payload"]["data"], Base64Encode("compiled"));
}

TEST_F(TransportTest, AnswersMissForAnAbsentKey) {
  auto response = Client(addr_)->Request(ArtifactRequest("absent.bin"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(*response, Json({{"status", "miss"}}));
}

TEST_F(TransportTest, AnswersUnsupportedKind) {
  auto response = Client(addr_)->Request(Json{{"kind", "weights"}});
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(*response, ErrorResponse("unsupported seed kind"));
}

TEST_F(TransportTest, ReturnsTheResolveErrorMessage) {
  Json req = ArtifactRequest();
  req["config_hash"] = "../../etc";
  auto response = Client(addr_)->Request(req);
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(*response, ErrorResponse("invalid config_hash"));
}

TEST_F(TransportTest, RejectsMissingWrongAndNonStringTokens) {
  const Json unauthorized = ErrorResponse("Unauthorized request");
  EXPECT_EQ(RawExchange(EncodeJsonFrame(ArtifactRequest())), unauthorized);
  Json req = ArtifactRequest();
  req["token"] = "wrong";
  EXPECT_EQ(RawExchange(EncodeJsonFrame(req)), unauthorized);
  req["token"] = 42;
  EXPECT_EQ(RawExchange(EncodeJsonFrame(req)), unauthorized);
  req["token"] = nullptr;
  EXPECT_EQ(RawExchange(EncodeJsonFrame(req)), unauthorized);
  EXPECT_EQ(*Client(addr_, "wrong")->Request(ArtifactRequest()), unauthorized);
}

TEST_F(TransportTest, ADaemonWithoutATokenCannotListen) {
  SeedConfig config;
  config.listen = HostPort{"127.0.0.1", 0};
  auto t = SeedTransport::Create({}, config);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "A daemon-to-daemon listener/source requires a token");
}

TEST_F(TransportTest, AHeaderAnnouncingOneTebibyteGetsAnErrorWithoutAllocation) {
  EXPECT_EQ(RawExchange(Header(1ull << 40)),
            ErrorResponse("Message size 1099511627776 exceeds limit 65536"));
}

TEST_F(TransportTest, ABodyThatIsNotJsonGetsAnError) {
  EXPECT_EQ(RawExchange(EncodeFrame("{\"kind\": nope")),
            ErrorResponse("Invalid request: not valid JSON"));
}

TEST_F(TransportTest, ARequestThatIsNotAnObjectIsUnauthorized) {
  EXPECT_EQ(RawExchange(EncodeFrame("[\"artifact\"]")), ErrorResponse("Unauthorized request"));
  EXPECT_EQ(server_->HandleRequest(Json::array()), ErrorResponse("unsupported seed kind"));
}

TEST_F(TransportTest, AStreamEndingInsideAFrameGetsAnError) {
  UniqueFd fd = ConnectRaw(addr_);
  SendAll(fd.get(), EncodeFrame("{\"kind\":\"artifact\"}").substr(0, 12));
  ::shutdown(fd.get(), SHUT_WR);
  EXPECT_EQ(ReadResponse(fd.get()),
            ErrorResponse("connection closed inside a message (4 of 19 bytes)"));
}

TEST_F(TransportTest, ListensOnIpv6Loopback) {
  auto v6 = Serve({NewArtifactSeedable(NewMemoryArtifactStore())}, {}, "::1");
  EXPECT_EQ(addr_.host, "::1");
  EXPECT_NE(addr_.port, 0);
  auto r = Client(addr_)->Request(ArtifactRequest());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["status"], "miss");
}

TEST_F(TransportTest, PortZeroReturnsTheBoundPort) {
  EXPECT_EQ(addr_.host, "127.0.0.1");
  EXPECT_NE(addr_.port, 0);
}

TEST_F(TransportTest, NoListenerConfiguredReturnsNothing) {
  auto t = Client(std::nullopt);
  auto bound = t->StartListener();
  ASSERT_TRUE(bound.ok());
  EXPECT_FALSE(bound->has_value());
  EXPECT_FALSE(t->Request(ArtifactRequest()).has_value());
}

// A one-shot server that answers any request with canned bytes.
class CannedServer {
 public:
  explicit CannedServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = testing::ListenLoopback(&port_);
    thread_ = std::thread([this] {
      conn_ = UniqueFd(::accept(fd_.get(), nullptr, nullptr));
      if (!conn_.valid()) return;
      ReadResponse(conn_.get());  // the request
      SendAll(conn_.get(), reply_);
    });
  }
  ~CannedServer() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
    conn_.Reset();
  }
  HostPort addr() const { return HostPort{"127.0.0.1", port_}; }

 private:
  std::string reply_;
  UniqueFd fd_;
  UniqueFd conn_;  // held open until destruction
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST_F(TransportTest, AMalformedResponseIsNoResponseWithAWarning) {
  LogCapture logs;
  CannedServer canned(EncodeFrame("[1, 2, 3]"));
  EXPECT_FALSE(Client(canned.addr())->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Source " + canned.addr().ToString() +
                                " sent a malformed response for artifact; falling back locally"))
      << logs.Dump();
}

TEST_F(TransportTest, AResponseOverTheClientLimitIsNoResponse) {
  LogCapture logs;
  CannedServer canned(Header(kMaxResponseBytes + 1));
  EXPECT_FALSE(Client(canned.addr())->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "Message size 67108865 exceeds limit 67108864"))
      << logs.Dump();
}

TEST_F(TransportTest, EveryRequestHasAnAccessLogLineWithoutItsToken) {
  LogCapture logs;
  ASSERT_TRUE(Client(addr_)->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(Client(addr_, "wrong")->Request(ArtifactRequest()).has_value());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; }));
  EXPECT_TRUE(logs.Contains(spdlog::level::debug, "Control-channel access 127.0.0.1 artifact ok "))
      << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::debug,
                            "Control-channel access 127.0.0.1 - error: Unauthorized request"))
      << logs.Dump();
  EXPECT_FALSE(logs.Contains(spdlog::level::debug, kToken)) << logs.Dump();
}

TEST_F(TransportTest, APeerThatSpeaksHttpIsNamedAsNotSpeakingTheProtocol) {
  LogCapture logs;
  // What nginx answers to a seed request on its port.
  CannedServer http("HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n");
  EXPECT_FALSE(Client(http.addr())->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "the peer does not speak the seed protocol (it answered 'HTTP/1.1 "
                            "400 Bad Request'): an HTTP server, such as a daemon's --admin-listen "
                            "port: the seed protocol is on its --listen port"))
      << logs.Dump();
  EXPECT_FALSE(logs.Contains(spdlog::level::warn, "Message size")) << logs.Dump();
}

TEST_F(TransportTest, ASourceThatIsDownIsNoResponseWithAWarning) {
  LogCapture logs;
  HostPort down{"127.0.0.1", 1};
  EXPECT_FALSE(Client(down)->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(logs.Contains(
      spdlog::level::warn,
      "Cannot fetch artifact from 127.0.0.1:1 over D2D; falling back locally: connect: "
      "Connection refused"))
      << logs.Dump();
}

TEST_F(TransportTest, ASilentSourceHitsTheResponseDeadline) {
  LogCapture logs;
  CannedServer canned("");  // reads the request and answers nothing
  TransportOptions options;
  options.response_timeout = milliseconds(300);
  EXPECT_FALSE(Client(canned.addr(), kToken, options)->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "timed out waiting for the response"))
      << logs.Dump();
}

// Adopt: each outcome, its log line and its fallback.
class AdoptTest : public TransportTest {
 protected:
  void SetUp() override {
    TransportTest::SetUp();
    target_store_ = NewMemoryArtifactStore().release();
    target_ = NewArtifactSeedable(ArtifactStorePtr(target_store_));
  }
  bool Installed() {
    auto r = target_store_->Get(*ArtifactKey::Make("triton", kHash, "kernels.bin"));
    return r.ok() && r->has_value();
  }
  ArtifactStore* target_store_ = nullptr;  // owned by target_
  SeedablePtr target_;
};

TEST_F(AdoptTest, InstallsAValidPayloadAndLogsIt) {
  LogCapture logs;
  EXPECT_EQ(Client(addr_)->Adopt(*target_, KeyFields()), AdoptOutcome::kAdopted);
  EXPECT_TRUE(Installed());
  EXPECT_TRUE(logs.Contains(spdlog::level::info, "Adopted remote artifact seed"));
}

TEST_F(AdoptTest, AMissIsLoggedAtInfoAndFallsBack) {
  LogCapture logs;
  EXPECT_EQ(Client(addr_)->Adopt(*target_, KeyFields("absent.bin")), AdoptOutcome::kMiss);
  EXPECT_TRUE(logs.Contains(spdlog::level::info,
                            "No remote artifact seed adopted (status miss); using the local path"));
}

TEST_F(AdoptTest, AnErrorStatusIsLoggedAsAWarningAndFallsBack) {
  LogCapture logs;
  EXPECT_EQ(Client(addr_, "wrong-token")->Adopt(*target_, KeyFields()), AdoptOutcome::kNotOk);
  EXPECT_FALSE(Installed());
  EXPECT_TRUE(logs.Contains(
      spdlog::level::warn, "No remote artifact seed adopted (status error); using the local path"));
}

TEST_F(AdoptTest, AMissingStatusIsReportedAsNone) {
  LogCapture logs;
  CannedServer canned(EncodeFrame("{}"));
  EXPECT_EQ(Client(canned.addr())->Adopt(*target_, KeyFields()), AdoptOutcome::kNotOk);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "(status None)")) << logs.Dump();
}

// A store whose disk is full: every write fails as a local error.
class FullStore final : public ArtifactStore {
 public:
  Result<std::optional<std::string>> Get(const ArtifactKey&) override {
    return std::optional<std::string>();
  }
  Status Put(const ArtifactKey&, std::string_view) override {
    return Status::ResourceExhausted("write /var/cache/seedd/triton: No space left on device");
  }
  Result<std::vector<std::string>> List(std::string_view) override {
    return std::vector<std::string>();
  }
  Status Delete(const ArtifactKey&) override { return Status::Ok(); }
  std::string Describe() const override { return "full disk"; }
};

// A valid payload this host cannot write is logged as a local error, not as a
// rejection of the peer's seed.
TEST_F(AdoptTest, AValidPayloadThisHostCannotWriteIsALocalErrorNotARejection) {
  LogCapture logs;
  SeedablePtr full = NewArtifactSeedable(std::make_unique<FullStore>());
  EXPECT_EQ(Client(addr_)->Adopt(*full, KeyFields()), AdoptOutcome::kRejected);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Could not install the remote artifact seed on this host (a local "
                            "error, not the peer's); using the local path: "))
      << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "No space left on device")) << logs.Dump();
  EXPECT_FALSE(logs.Contains(spdlog::level::warn, "Rejected the remote")) << logs.Dump();
}

TEST_F(AdoptTest, APayloadThatFailsValidationIsRejectedWithTheReason) {
  LogCapture logs;
  Json payload = {{"filename", "kernels.bin"},
                  {"size", 4},
                  {"sha256", Sha256Hex("good")},
                  {"data", Base64Encode("evil")}};
  CannedServer canned(EncodeJsonFrame(Json{{"status", "ok"}, {"payload", payload}}));
  EXPECT_EQ(Client(canned.addr())->Adopt(*target_, KeyFields()), AdoptOutcome::kRejected);
  EXPECT_FALSE(Installed());
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Rejected the remote artifact seed; using the local path: sha256 "
                            "mismatch"))
      << logs.Dump();
}

TEST_F(AdoptTest, NoSourceAndADownSourceFallBack) {
  LogCapture logs;
  EXPECT_EQ(Client(std::nullopt)->Adopt(*target_, KeyFields()), AdoptOutcome::kNoResponse);
  EXPECT_TRUE(logs.lines().empty()) << logs.Dump();
  EXPECT_EQ(Client(HostPort{"127.0.0.1", 1})->Adopt(*target_, KeyFields()),
            AdoptOutcome::kNoResponse);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "Cannot fetch artifact from 127.0.0.1:1"));
  EXPECT_FALSE(Installed());
}

}  // namespace
}  // namespace seedd
