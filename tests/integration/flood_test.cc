// No single peer can take a daemon down: one host (127.0.0.2) floods, another
// (127.0.0.1) is served.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "kinds/weights/weight_shards_kind.h"
#include "seedd/artifact_kind.h"
#include "seedd/seed_transport.h"
#include "seedd/tls.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using testing::ConnectFrom;
using testing::kToken;
using testing::LogCapture;
using testing::SameTree;
using testing::WaitUntil;

constexpr char kFlooder[] = "127.0.0.2";

// Stream handlers that hold their threads until released. Release them before
// the server closes (whose stream threads they hold): a Releaser declared
// after the server does, whatever happens.
class HeldStreams {
 public:
  StreamHandler Handler() {
    return [this](Conn&, const Json&) {
      ++running_;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return released_; });
    };
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  int running() const { return running_; }
  struct Releaser {
    HeldStreams& held;
    ~Releaser() { held.Release(); }
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<int> running_{0};
};

class FloodTest : public testing::WeightsFixture {
 protected:
  std::unique_ptr<SeedTransport> Listen(TransportOptions options, HostPort* addr) {
    SeedConfig config;
    config.listen = HostPort{"127.0.0.1", 0};
    config.token = kToken;
    auto store = NewMemoryArtifactStore();
    EXPECT_OK(store->Put(*ArtifactKey::Make("triton", std::string(16, 'a'), "k.bin"), "bytes"));
    auto t = SeedTransport::Create({NewArtifactSeedable(std::move(store))}, config, options);
    EXPECT_OK(t);
    *addr = **(*t)->StartListener();
    return std::move(*t);
  }
  static Json Request(const std::string& token = kToken) {
    return Json{{"kind", "artifact"},
                {"namespace", "triton"},
                {"config_hash", std::string(16, 'a')},
                {"filename", "k.bin"},
                {"token", token}};
  }
  // A TLS listener (a PKI made under dir_/pki) with `options`.
  std::unique_ptr<SeedTransport> ListenTls(TransportOptions options, HostPort* addr) {
    std::string error;
    EXPECT_TRUE(testing::MakeTestPki(pki(), &error)) << error;
    TlsOptions server_tls;
    server_tls.cert = pki() / "server.crt";
    server_tls.key = pki() / "server.key";
    options.tls = *TlsContext::Create(server_tls);
    return Listen(options, addr);
  }
  // How many of 20 requests from 127.0.0.1 over TLS are answered "ok".
  int ServedOverTls(const HostPort& addr) {
    TlsOptions client_tls;
    client_tls.ca = pki() / "ca.crt";
    SeedConfig config;
    config.source = addr;
    config.token = kToken;
    TransportOptions client_options;
    client_options.tls = *TlsContext::Create(client_tls);
    client_options.response_timeout = std::chrono::seconds(3);
    auto client = SeedTransport::Create({}, config, client_options);
    EXPECT_OK(client);
    Json request = Request();
    request.erase("token");
    int served = 0;
    for (int i = 0; i < 20; ++i) {
      auto r = (*client)->Request(request);
      served += r.has_value() && r->value("status", "") == "ok";
    }
    return served;
  }
  std::filesystem::path pki() const { return dir_.path() / "pki"; }
  // One request from 127.0.0.1 as a client library would send it.
  static Json Ask(const HostPort& addr) {
    SeedConfig config;
    config.source = addr;
    config.token = kToken;
    auto client = SeedTransport::Create({}, config);
    Json request = Request();
    request.erase("token");
    auto r = (*client)->Request(request);
    return r.has_value() ? *r : Json();
  }
};

TEST_F(FloodTest, AHostHoldingIdleConnectionsLeavesEveryRequestFromAnotherServed) {
  LogCapture logs;
  HostPort addr;
  auto server = Listen({}, &addr);
  // The flooder opens 1,100 connections and sends nothing, reopening any the
  // daemon closes, while the other host makes its requests.
  std::atomic<bool> stop{false};
  std::thread flood([&] { testing::HoldIdleConnections(kFlooder, addr, 1100, stop); });
  ASSERT_TRUE(WaitUntil([&] { return logs.Contains(spdlog::level::warn, kFlooder); }))
      << logs.Dump();
  int served = 0;
  for (int i = 0; i < 200; ++i) served += Ask(addr).value("status", "") == "ok";
  stop = true;
  flood.join();
  EXPECT_EQ(served, 200);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Refused a control-channel connection from 127.0.0.2: it holds 64 "
                            "unauthenticated"))
      << logs.Dump();
}

TEST_F(FloodTest, RepeatedFailedAuthenticationThrottlesThatHostOnly) {
  LogCapture logs;
  TransportOptions options;
  options.max_auth_failures = 5;
  options.auth_failure_window = std::chrono::seconds(60);
  HostPort addr;
  auto server = Listen(options, &addr);
  auto attempt = [&](const std::string& token) {
    UniqueFd fd = ConnectFrom(kFlooder, addr);
    testing::SendAll(fd.get(), EncodeJsonFrame(Request(token)));
    return testing::ReadResponse(fd.get());
  };
  for (int i = 0; i < 6; ++i) EXPECT_EQ(attempt("guess")["message"], "Unauthorized request");
  // Now even the right token from that host is not read: the connection is closed.
  EXPECT_TRUE(attempt(kToken).is_null());
  EXPECT_EQ(Ask(addr)["status"], "ok");  // another host is served
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "Failed authentication from 127.0.0.2"))
      << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "more than 5 failed authentications"))
      << logs.Dump();
}

TEST_F(FloodTest, DataConnectionsThatNeverReadDoNotStopAnotherHostsPull) {
  testing::WriteRandom(model_ / "big.bin", 32 << 20, 3);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  uint32_t big = 0;
  while (m.chunks[big].file != "big.bin") ++big;
  // 256 data connections from one host, each asking for a chunk and reading
  // nothing: as many as the daemon has stream threads.
  std::vector<UniqueFd> stalled;
  int refused = 0;
  for (int i = 0; i < 256; ++i) {
    UniqueFd fd = ConnectFrom(kFlooder, origin, 4096);
    ASSERT_TRUE(fd.valid());
    testing::SendAll(
        fd.get(), EncodeJsonFrame(Json{
                      {"kind", "weight_data"}, {"root_digest", m.root_digest}, {"token", kToken}}));
    Json answer = testing::ReadResponse(fd.get());
    if (answer["status"] != "ok") {
      ++refused;
      EXPECT_NE(answer["message"].get<std::string>().find("too many data connections from "
                                                          "127.0.0.2 (at most 32)"),
                std::string::npos)
          << answer.dump();
      continue;
    }
    const RequestRecord req = EncodeRequest(kSendMagic, big);
    testing::SendAll(fd.get(), std::string(req.data(), req.size()));
    stalled.push_back(std::move(fd));
  }
  EXPECT_EQ(refused, 256 - 32);
  // The other host's pull is served meanwhile.
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {origin}, dir_.path() / "dest", Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
}

TEST_F(FloodTest, AFullDataPlaneQueueRefusesWithAClearError) {
  HeldStreams held;
  TransportOptions options;
  options.max_streams = 2;
  options.max_queued_streams = 1;
  options.stream_handlers["weight_data"] = held.Handler();
  HostPort addr;
  auto server = Listen(options, &addr);
  HeldStreams::Releaser releaser{held};
  auto open = [&] {
    UniqueFd fd = testing::ConnectRaw(addr);
    testing::SendAll(fd.get(), EncodeJsonFrame(Json{{"kind", "weight_data"}, {"token", kToken}}));
    return fd;
  };
  UniqueFd a = open();
  ASSERT_TRUE(WaitUntil([&] { return held.running() == 1; }));
  UniqueFd b = open();
  ASSERT_TRUE(WaitUntil([&] { return held.running() == 2; }));
  // Handed to the data plane: counted in /metrics as it leaves the loop.
  auto handed = [] {
    const std::string text = metrics::Text();
    const std::string name = "\nseedd_requests_total{kind=\"weight_data\",outcome=\"data\"} ";
    const size_t at = text.find(name);
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + name.size()));
  };
  const double before = handed();
  UniqueFd queued = open();
  // Handed to the stream pool (it left the event loop), where it waits. (Its
  // connection may not even be accepted yet when no connection is open.)
  ASSERT_TRUE(WaitUntil([&] { return handed() == before + 1; }));
  ASSERT_TRUE(WaitUntil([&] { return server->open_connections() == 0; }));
  UniqueFd refused = open();
  Json answer = testing::ReadResponse(refused.get());
  EXPECT_EQ(answer["status"], "error");
  EXPECT_NE(answer.value("message", "").find("the data plane is busy"), std::string::npos)
      << answer.dump();
  held.Release();
  EXPECT_TRUE(WaitUntil([&] { return held.running() == 3; }));  // the queued one was served
  server->Close();
}

// A fleet starting together opens its data connections to one server at once
// (about five per daemon at its origin). Each holds a stream thread for its
// life; the stream pool grew by a thread per 5 ms of stall, so a burst waited
// for it, and past max_queued_streams waiting the rest were refused as busy.
// Now each gets its thread at once, up to max_streams.
TEST_F(FloodTest, ABurstOfDataConnectionsIsServedAtOnceNotRefusedAsWaiting) {
  constexpr int kBurst = 24;  // within max_streams_per_address
  HeldStreams held;
  TransportOptions options;
  options.max_queued_streams = 2;
  options.stream_handlers["weight_data"] = held.Handler();
  HostPort addr;
  auto server = Listen(options, &addr);
  HeldStreams::Releaser releaser{held};
  std::vector<UniqueFd> fds;
  for (int i = 0; i < kBurst; ++i) {
    fds.push_back(testing::ConnectRaw(addr));
    testing::SendAll(fds.back().get(),
                     EncodeJsonFrame(Json{{"kind", "weight_data"}, {"token", kToken}}));
  }
  // Every one is served; a refused one gets an answer and never runs.
  EXPECT_TRUE(WaitUntil([&] { return held.running() == kBurst; }))
      << held.running() << " of " << kBurst;
  for (UniqueFd& fd : fds) {
    pollfd p{fd.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0)
        << "a data connection was answered: " << testing::ReadResponse(fd.get()).dump();
  }
  held.Release();
  server->Close();
}

// Four hosts holding idle connections to a TLS listener, as many as each may:
// past the limit of connections in handshakes, a newcomer takes the place of
// one from the host holding the most, so another host's TLS requests are all
// served.
TEST_F(FloodTest, HostsHoldingTlsHandshakesLeaveAnotherHostsRequestsServed) {
  LogCapture logs;
  HostPort addr;
  auto server = ListenTls({}, &addr);
  std::atomic<bool> stop{false};
  std::vector<std::thread> flooders;
  for (const char* from : {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}) {
    flooders.emplace_back([&, from] { testing::HoldIdleConnections(from, addr, 80, stop); });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // every place taken
  const int served = ServedOverTls(addr);
  stop = true;
  for (auto& t : flooders) t.join();
  EXPECT_EQ(served, 20) << logs.Dump();
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "Closed a TLS handshake from 127.0.0."))
      << logs.Dump();
  server->Close();
}

// 64 hosts each trickling one TLS ClientHello, a byte every 300 ms, and opening
// another as soon as one is cut. A deadline per read would never fire (each
// byte comes in time), and one thread per handshake would hold every stream
// thread (the server has 4): each trickler is cut within the request deadline
// (2 s) + 1 s, and every request from another host is served meanwhile.
TEST_F(FloodTest, ManyHostsTricklingTlsHandshakesAreCutAtTheDeadlineAndOthersAreServed) {
  TransportOptions options;
  options.request_timeout = std::chrono::seconds(2);
  options.max_streams = 4;
  LogCapture logs;
  HostPort addr;
  auto server = ListenTls(options, &addr);
  using Clock = std::chrono::steady_clock;
  struct Trickler {
    std::string from;
    UniqueFd fd;
    Clock::time_point opened;
    size_t sent = 0;
  };
  std::vector<Trickler> tricklers(64);
  for (size_t i = 0; i < tricklers.size(); ++i) {
    tricklers[i].from = "127.0.0." + std::to_string(2 + i);
  }
  // A record header of a 1,000-byte ClientHello, then its body a byte at a time.
  const std::string hello = std::string("\x16\x03\x01\x03\xe8", 5) + std::string(1000, '\x01');
  std::atomic<bool> stop{false};
  std::atomic<int> cut{0};
  std::atomic<int64_t> longest_ms{0};
  std::thread trickle([&] {
    while (!stop) {
      for (Trickler& t : tricklers) {
        char b;
        if (t.fd.valid()) {
          const ssize_t r = ::recv(t.fd.get(), &b, 1, MSG_DONTWAIT);
          if (r == 0 || (r < 0 && errno != EAGAIN)) {
            const int64_t ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t.opened)
                    .count();
            if (ms > longest_ms) longest_ms = ms;
            ++cut;
            t.fd.Reset();
          }
        }
        if (!t.fd.valid()) {
          t.fd = ConnectFrom(t.from, addr);
          t.opened = Clock::now();
          t.sent = 0;
        }
        if (t.fd.valid() && t.sent < hello.size()) {
          testing::SendAll(t.fd.get(), hello.substr(t.sent, t.sent == 0 ? 5 : 1));
          t.sent += t.sent == 0 ? 5 : 1;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // every trickler holds a handshake
  const int served = ServedOverTls(addr);
  // Every trickler has been cut at least once by now.
  EXPECT_TRUE(WaitUntil([&] { return cut >= 64; }, std::chrono::seconds(10))) << cut << " cut";
  stop = true;
  trickle.join();
  EXPECT_EQ(served, 20) << logs.Dump();
  EXPECT_LE(longest_ms, 3000 + 300) << "a trickler held its connection that long";
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "no whole request within 2 s")) << logs.Dump();
  server->Close();
}

}  // namespace
}  // namespace seedd
