// SeedTransport's server under load, over real loopback sockets: peers that
// trickle, idle, or read late, resolves that are slow or outlast a deadline,
// the connection cap, and closing while clients are busy.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <random>
#include <thread>

#include "common/crypto.h"
#include "seedd/artifact_kind.h"
#include "seedd/seed_transport.h"
#include "support/test_util.h"
#include "support/transport_fixture.h"
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
using transport_testing::ArtifactRequest;
using transport_testing::KeyFields;
using transport_testing::kHash;
using transport_testing::kToken;
using transport_testing::TransportTest;

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

// A connection the second acceptor cannot admit by itself (here: one that
// must evict an idle peer) is judged on the loop against the connections
// open, not against itself: at the last free place it is served. Each round
// races the loop's acceptor for the connection, so the rounds are many.
TEST_F(TransportTest, ANewcomerThatEvictsAnIdlePeerIsServedAtTheLastFreePlace) {
  auto store = NewMemoryArtifactStore();
  ASSERT_OK(store->Put(*ArtifactKey::Make("triton", kHash, "kernels.bin"), "compiled"));
  server_->Close();
  TransportOptions options;
  options.max_connections = 8;
  options.max_unauthenticated = 4;
  options.max_unauthenticated_per_address = 4;
  server_ = Serve({NewArtifactSeedable(std::move(store)), slow_}, options);
  // Three authenticated requests held by a slow resolve...
  std::vector<std::thread> held;
  for (int i = 0; i < 3; ++i) {
    held.emplace_back([&] {
      UniqueFd fd = ConnectRaw(addr_);
      SendAll(fd.get(), EncodeJsonFrame(Json{{"kind", "slow"}, {"token", kToken}}));
      EXPECT_EQ(ReadResponse(fd.get())["payload"], "slow answer");
    });
  }
  struct Release {
    std::shared_ptr<transport_testing::SlowSeedable> slow;
    std::vector<std::thread>* threads;
    ~Release() {
      slow->Release();
      for (auto& t : *threads) t.join();
    }
  } release{slow_, &held};
  slow_->WaitEntered(3);
  // ...and four idle connections from one address: seven of the eight places.
  std::vector<UniqueFd> idle;
  for (int round = 1; round <= 12; ++round) {
    while (idle.size() < 4 + static_cast<size_t>(round - 1)) {
      idle.push_back(ConnectFrom("127.0.0.1", addr_));
      ASSERT_TRUE(idle.back().valid());
    }
    ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 7; }))
        << server_->open_connections() << " open in round " << round;
    UniqueFd newcomer = ConnectFrom("127.0.1." + std::to_string(round), addr_);
    ASSERT_TRUE(newcomer.valid());
    Json request = ArtifactRequest();
    request["token"] = kToken;
    SendAll(newcomer.get(), EncodeJsonFrame(request));
    EXPECT_EQ(ReadResponse(newcomer.get())["status"], "ok") << "round " << round;
    // The newcomer is answered and the evicted peer closed: six open again.
    ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 6; }))
        << server_->open_connections() << " open after round " << round;
  }
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
    Json with_token = request;
    with_token["token"] = kToken;
    // A request waiting for the resolver gets nothing in 2 s (the socket
    // blocks: its receive timeout ends the wait, the deadline the read).
    timeval tv{2, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    SendAll(fd.get(), EncodeJsonFrame(with_token));
    Json response = ReadResponse(fd.get(), std::chrono::seconds(2));
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

}  // namespace
}  // namespace seedd
