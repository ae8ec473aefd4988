// SeedTransport over real loopback sockets: every behaviour of SPEC §2.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <random>
#include <thread>

#include "common/crypto.h"
#include "seedd/artifact_kind.h"
#include "seedd/seed_transport.h"
#include "support/test_util.h"
#include "transport/client.h"
#include "transport/handler.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ConnectFrom;
using testing::ConnectRaw;
using testing::Header;
using testing::LogCapture;
using testing::ReadResponse;
using testing::SendAll;
using testing::WaitUntil;

const char kToken[] = "s3cret-token";
const char kHash[] = "0123456789abcdef";

Json KeyFields(const std::string& file = "kernels.bin") {
  return Json{{"namespace", "triton"}, {"config_hash", kHash}, {"filename", file}};
}

Json ArtifactRequest(const std::string& file = "kernels.bin") {
  Json r = KeyFields(file);
  r["kind"] = "artifact";
  return r;
}

// A seedable whose Resolve blocks until released; for concurrency tests.
class SlowSeedable final : public Seedable {
 public:
  std::string_view kind() const override { return "slow"; }
  Result<Json> RequestParams(const Json&) const override { return Json::object(); }
  Result<std::optional<Json>> Resolve(const Json&) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    return std::optional<Json>(Json("slow answer"));
  }
  Result<Json> ValidatePayload(const Json& p) const override { return p; }
  Status Install(const Json&, const Json&) override { return Status::Ok(); }

  void WaitEntered(int n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int entered_ = 0;
  bool released_ = false;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = NewMemoryArtifactStore();
    ASSERT_TRUE(store->Put(*ArtifactKey::Make("triton", kHash, "kernels.bin"), "compiled").ok());
    slow_ = std::make_shared<SlowSeedable>();
    server_ = Serve({NewArtifactSeedable(std::move(store)), slow_});
  }
  void TearDown() override {
    slow_->Release();
    if (server_) server_->Close();
  }

  std::unique_ptr<SeedTransport> Serve(std::vector<SeedablePtr> seedables,
                                       TransportOptions options = {},
                                       const std::string& host = "127.0.0.1") {
    SeedConfig config;
    config.listen = HostPort{host, 0};
    config.token = kToken;
    auto t = SeedTransport::Create(std::move(seedables), config, options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    auto bound = (*t)->StartListener();
    EXPECT_TRUE(bound.ok()) << bound.status().ToString();
    addr_ = **bound;
    return std::move(*t);
  }

  std::unique_ptr<SeedTransport> Client(std::optional<HostPort> source,
                                        const std::string& token = kToken,
                                        TransportOptions options = {}) {
    SeedConfig config;
    config.source = std::move(source);
    config.token = token;
    auto t = SeedTransport::Create({}, config, options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(*t);
  }

  // Sends raw bytes and returns the parsed response (null when the peer sent none).
  Json RawExchange(const std::string& bytes) {
    UniqueFd fd = ConnectRaw(addr_);
    EXPECT_TRUE(fd.valid());
    SendAll(fd.get(), bytes);
    return ReadResponse(fd.get());
  }

  std::shared_ptr<SlowSeedable> slow_;
  std::unique_ptr<SeedTransport> server_;
  HostPort addr_;
};

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

TEST_F(TransportTest, ATricklingPeerIsCutAtTheDeadlineWhileOthersAreServed) {
  UniqueFd trickler = ConnectRaw(addr_);
  ASSERT_TRUE(trickler.valid());
  const auto start = std::chrono::steady_clock::now();
  std::atomic<bool> cut{false};
  std::thread t([&] {
    std::string frame = EncodeJsonFrame(ArtifactRequest());
    for (char c : frame) {
      if (::send(trickler.get(), &c, 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(seconds(1));
      if (cut) break;
    }
  });
  auto client = Client(addr_);
  int served = 0;
  while (std::chrono::steady_clock::now() - start < seconds(3)) {
    auto r = client->Request(ArtifactRequest());
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ((*r)["status"], "ok");
    ++served;
    std::this_thread::sleep_for(milliseconds(50));
  }
  Json response = ReadResponse(trickler.get());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  cut = true;
  t.join();
  EXPECT_EQ(response, ErrorResponse("Timed out after 5 s reading the request"));
  EXPECT_GE(elapsed, milliseconds(4900));  // the deadline is not reset per byte...
  EXPECT_LT(elapsed, seconds(8));          // ...and the whole frame is bounded
  EXPECT_GT(served, 10);
}

TEST_F(TransportTest, AThousandIdleConnectionsDoNotDelayAnAuthenticatedRequest) {
  // From 20 hosts, each within its limit of unauthenticated connections, and
  // all of them within a total that keeps 24 of the 1,024 for work.
  TransportOptions options;
  options.max_unauthenticated = 1000;
  auto store = NewMemoryArtifactStore();
  ASSERT_OK(store->Put(*ArtifactKey::Make("triton", kHash, "kernels.bin"), "compiled"));
  server_->Close();
  server_ = Serve({NewArtifactSeedable(std::move(store))}, options);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(ConnectFrom("127.0.1." + std::to_string(1 + i % 20), addr_));
    ASSERT_TRUE(idle.back().valid());
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() >= 1000; }));
  const auto start = std::chrono::steady_clock::now();
  auto r = Client(addr_)->Request(ArtifactRequest());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["status"], "ok");
  // A server that serves one connection at a time would wait out 5 s per idle peer.
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
}

TEST_F(TransportTest, SlowResolvesDoNotDelayOtherPeers) {
  // More slow requests than the resolver pool keeps warm threads.
  auto client = Client(addr_);
  constexpr int kSlow = 6;
  std::vector<std::optional<Json>> slow_responses(kSlow);
  std::vector<std::thread> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back([&, i] { slow_responses[i] = client->Request(Json{{"kind", "slow"}}); });
  }
  slow_->WaitEntered(kSlow);
  auto r = client->Request(ArtifactRequest());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["status"], "ok");
  slow_->Release();
  for (auto& t : slow) t.join();
  for (auto& response : slow_responses) {
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ((*response)["payload"], "slow answer");
  }
}

TEST_F(TransportTest, ConnectionsBeyondTheCapAreClosedWithALogLine) {
  LogCapture logs;
  TransportOptions options;
  options.max_connections = 8;
  options.max_unauthenticated = 8;  // the cap under test, not the share kept for work
  auto capped = Serve({NewArtifactSeedable(NewMemoryArtifactStore())}, options);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(ConnectRaw(addr_));
  ASSERT_TRUE(WaitUntil([&] { return capped->open_connections() == 8; }));
  UniqueFd extra = ConnectRaw(addr_);
  ASSERT_TRUE(extra.valid());
  EXPECT_EQ(testing::ReadToEof(extra.get()), "");  // closed without a response
  EXPECT_TRUE(WaitUntil([&] { return logs.Contains(spdlog::level::warn, "the limit is 8"); }))
      << logs.Dump();
  idle.clear();
  ASSERT_TRUE(WaitUntil([&] { return capped->open_connections() == 0; }));
  auto r = Client(addr_)->Request(ArtifactRequest());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["status"], "miss");
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

TEST_F(TransportTest, CloseUnderLoadFinishesCleanly) {
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      auto c = Client(addr_);
      while (!stop) {
        auto r = c->Request(ArtifactRequest());
        if (r.has_value() && (*r)["status"] == "ok") ++ok;
      }
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return ok > 100; }));
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(ConnectRaw(addr_));
  server_->Close();
  EXPECT_EQ(server_->open_connections(), 0u);
  server_->Close();  // idempotent
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_FALSE(Client(addr_)->Request(ArtifactRequest()).has_value());
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

// Once authenticated a connection has its deadline for resolving and answering
// (300 s by default): a resolve that outlasts it gets no answer, whichever path
// (the loop's or off it) the request took.
TEST_F(TransportTest, AResolveThatOutlastsTheAuthenticatedDeadlineGetsNoAnswer) {
  server_->Close();
  TransportOptions options;
  options.authenticated_timeout = milliseconds(200);
  server_ = Serve({slow_}, options);
  Json request = {{"kind", "slow"}, {"token", kToken}};
  UniqueFd fd = ConnectRaw(addr_);
  ASSERT_TRUE(fd.valid());
  SendAll(fd.get(), EncodeJsonFrame(request));
  slow_->WaitEntered(1);
  std::this_thread::sleep_for(milliseconds(500));
  slow_->Release();
  EXPECT_TRUE(ReadResponse(fd.get()).is_null());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; }));
}

// A small artifact the local disk store holds in the page cache is answered on
// the listener's thread (no hand-off to a resolver), so it is answered even
// while every resolver thread is held by a slow request; so is a miss with no
// shared store to ask. One the store cannot read without blocking, or another
// kind, waits for a resolver.
TEST_F(TransportTest, ASmallCachedArtifactIsAnsweredWhileEveryResolverIsBusy) {
  testing::TempDir cache;
  const std::string bytes = "tuned kernels";
  auto disk = NewArtifactSeedable(cache.path());
  ASSERT_TRUE(disk->Install(KeyFields("kernels.bin"), Json{{"filename", "kernels.bin"},
                                                           {"size", bytes.size()},
                                                           {"sha256", Sha256Hex(bytes)},
                                                           {"data", Base64Encode(bytes)}})
                  .ok());
  server_->Close();
  TransportOptions options;
  options.min_resolver_threads = 1;
  options.max_resolver_threads = 1;
  server_ = Serve({disk, slow_}, options);
  auto ask = [&](const Json& request, bool* answered) {
    UniqueFd fd = ConnectRaw(addr_);
    EXPECT_TRUE(fd.valid());
    timeval tv{2, 0};  // a request waiting for the resolver gets nothing in 2 s
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    Json with_token = request;
    with_token["token"] = kToken;
    SendAll(fd.get(), EncodeJsonFrame(with_token));
    Json response = ReadResponse(fd.get());
    *answered = !response.is_null();
    return response;
  };
  bool answered = false;
  // A name never looked up may need the disk to tell it is absent: asked once
  // while the resolver is free, its absence is known to the kernel's caches.
  EXPECT_EQ(ask(ArtifactRequest("absent.bin"), &answered)["status"], "miss");
  UniqueFd held = ConnectRaw(addr_);
  ASSERT_TRUE(held.valid());
  SendAll(held.get(), EncodeJsonFrame(Json{{"kind", "slow"}, {"token", kToken}}));
  slow_->WaitEntered(1);  // the one resolver thread is taken
  Json hit = ask(ArtifactRequest("kernels.bin"), &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(hit["status"], "ok");
  EXPECT_EQ(Base64Decode(hit["payload"]["data"].get<std::string>()), bytes);
  EXPECT_EQ(hit["payload"]["sha256"], Sha256Hex(bytes));
  Json miss = ask(ArtifactRequest("absent.bin"), &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(miss["status"], "miss");
  Json bad = ask(Json{{"kind", "artifact"}, {"namespace", "../x"}}, &answered);
  ASSERT_TRUE(answered);
  EXPECT_EQ(bad["status"], "error");
  // A second slow request waits for the busy resolver.
  ask(Json{{"kind", "slow"}}, &answered);
  EXPECT_FALSE(answered);
  slow_->Release();
  EXPECT_EQ(ReadResponse(held.get())["payload"], "slow answer");
}

// Requests that are whole when accepted are answered off the event loop; a
// response larger than the socket buffer is finished by the loop. Peers that
// ask at once and read late each get their whole response.
TEST_F(TransportTest, LargeResponsesReachPeersThatReadThemLate) {
  auto store = NewMemoryArtifactStore();
  std::string big(8 << 20, '\0');
  std::mt19937_64 rng(5);
  for (char& c : big) c = static_cast<char>(rng());
  ASSERT_TRUE(store->Put(*ArtifactKey::Make("triton", kHash, "big.bin"), big).ok());
  server_->Close();
  server_ = Serve({NewArtifactSeedable(std::move(store))});
  Json request = ArtifactRequest("big.bin");
  request["token"] = kToken;
  const std::string frame = EncodeJsonFrame(request);
  std::vector<UniqueFd> peers;
  for (int i = 0; i < 12; ++i) {
    peers.push_back(ConnectRaw(addr_));
    ASSERT_TRUE(peers.back().valid());
    SendAll(peers.back().get(), frame);
  }
  std::this_thread::sleep_for(milliseconds(300));
  const std::string want = Sha256Hex(big);
  for (const UniqueFd& fd : peers) {
    Json response = ReadResponse(fd.get());
    ASSERT_EQ(response.value("status", ""), "ok") << response.dump().substr(0, 200);
    EXPECT_EQ(response["payload"]["size"], big.size());
    EXPECT_EQ(response["payload"]["sha256"], want);
    EXPECT_EQ(response["payload"]["data"].get<std::string>().size(), (big.size() + 2) / 3 * 4);
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; }));
}

TEST_F(TransportTest, EveryRequestHasAnAccessLogLineWithoutItsToken) {
  LogCapture logs;
  ASSERT_TRUE(Client(addr_)->Request(ArtifactRequest()).has_value());
  EXPECT_TRUE(Client(addr_, "wrong")->Request(ArtifactRequest()).has_value());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; }));
  EXPECT_TRUE(logs.Contains(spdlog::level::debug, "D2D access 127.0.0.1 artifact ok "))
      << logs.Dump();
  EXPECT_TRUE(
      logs.Contains(spdlog::level::debug, "D2D access 127.0.0.1 - error: Unauthorized request"))
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
                            "400 Bad Request'): check the address and port"))
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
