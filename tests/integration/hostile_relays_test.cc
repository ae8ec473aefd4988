// Every pull ends: relays that lie or stall beside an honest origin, and
// fetchers that stop reading, on real loopback sockets.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "kinds/weights/proto/records.h"
#include "kinds/weights/weight_shards_kind.h"
#include "seedd/json_text.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "transport/data_auth.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using testing::kToken;
using testing::LogCapture;
using testing::SameTree;
using testing::WriteRandom;

// What a scripted relay does with chunk requests. It says it has every chunk,
// but kHasNothing.
enum class Lie {
  kHasNothing,        // its state offers nothing (it is never asked for a chunk)
  kClaimsForever,     // status 2 ("claimed"), for ever
  kTrickles,          // a valid header, then a byte every 50 ms
  kNeverAnswers,      // reads the requests, answers none of them
  kOffersThenCloses,  // hangs up on the first chunk request
  kGarbage,           // 24 random bytes where a header belongs
  kWatchTooLong,      // a watch answer longer than one index per chunk
  kWatchNoSuchChunk,  // a watch answer naming a chunk the model does not have
  kHoldsRequests,     // answers watches ("has everything"), no chunk request
  kSpeaksHttp,        // another service: an HTTP error for any request
  kHasNoToken,        // not of the fleet: answers "ok" without proving it holds the token
};

std::string NameOf(Lie lie) {
  switch (lie) {
    case Lie::kClaimsForever:
      return "ClaimsForever";
    case Lie::kHoldsRequests:
      return "HoldsRequests";
    case Lie::kTrickles:
      return "Trickles";
    case Lie::kNeverAnswers:
      return "NeverAnswers";
    case Lie::kOffersThenCloses:
      return "OffersThenCloses";
    case Lie::kGarbage:
      return "SendsGarbage";
    case Lie::kWatchTooLong:
      return "WatchTooLong";
    case Lie::kWatchNoSuchChunk:
      return "WatchNoSuchChunk";
    case Lie::kHasNothing:
      return "HasNothing";
    case Lie::kSpeaksHttp:
      return "SpeaksHttp";
    case Lie::kHasNoToken:
      return "HasNoToken";
  }
  return "?";
}

std::string LieName(const ::testing::TestParamInfo<Lie>& info) { return NameOf(info.param); }

// The lie's name in test listings, not its bytes.
void PrintTo(Lie lie, std::ostream* os) { *os << NameOf(lie); }

bool RecvExactly(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A data-plane peer on loopback that speaks the protocol's framing and lies.
class ScriptedRelay {
 public:
  ScriptedRelay(Lie lie, const Manifest& m) : lie_(lie), m_(m) {
    listener_ = testing::ListenLoopback(&port_);
    accepter_ = std::thread([this] { Accept(); });
  }
  ~ScriptedRelay() {
    stopping_ = true;
    ::shutdown(listener_.get(), SHUT_RDWR);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    accepter_.join();
    for (auto& t : conns_) t.join();
  }
  HostPort addr() const { return HostPort{"127.0.0.1", port_}; }
  int connections() const { return accepted_.load(); }
  int chunk_requests() const { return chunk_requests_.load(); }
  // Every request and proof it was sent.
  std::string received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  void Accept() {
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 || stopping_) {
        if (fd >= 0) ::close(fd);
        return;
      }
      ++accepted_;
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(fd);
      conns_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  void Serve(int fd) {
    char len[8];
    if (!RecvExactly(fd, len, 8)) return;
    uint64_t n = 0;
    for (char c : len) n = (n << 8) | static_cast<unsigned char>(c);
    std::string request(std::min<uint64_t>(n, 1 << 16), '\0');
    if (!RecvExactly(fd, request.data(), request.size())) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_ += request;
    }
    if (lie_ == Lie::kSpeaksHttp) {
      testing::SendAll(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
    // A liar of the fleet proves it holds the token, as the protocol asks.
    if (lie_ != Lie::kHasNoToken) {
      const Json proof = testing::AnswerDataChallenge(fd, request);
      std::lock_guard<std::mutex> lock(mu_);
      received_ += proof.dump();
    }
    testing::SendAll(fd, EncodeJsonFrame(Json{{"status", "ok"}, {"chunks", m_.chunks.size()}}));
    std::mt19937_64 rng(7);
    RequestRecord req;
    while (!stopping_ && RecvExactly(fd, req.data(), req.size())) {
      const uint32_t index = RequestIndex(req);
      if (std::string_view(req.data(), 4) == kStateMagic) {
        std::string bitmap((m_.chunks.size() + 7) / 8, lie_ == Lie::kHasNothing ? '\0' : '\xff');
        const HeaderRecord h = EncodeHeader(kStateMagic, 0, kChunkOk, 0, bitmap.size());
        testing::SendAll(fd, std::string(h.data(), h.size()) + bitmap);
        continue;
      }
      if (std::string_view(req.data(), 4) == kWatchMagic) {
        AnswerWatch(fd, index);
        continue;
      }
      if (index >= m_.chunks.size()) return;
      ++chunk_requests_;
      switch (lie_) {
        case Lie::kClaimsForever: {
          const HeaderRecord h = EncodeHeader(kChunkMagic, index, kChunkClaimed, 0xffffffff, 0);
          testing::SendAll(fd, std::string(h.data(), h.size()));
          break;
        }
        case Lie::kTrickles: {
          const HeaderRecord h =
              EncodeHeader(kChunkMagic, index, kChunkOk, 0, m_.chunks[index].length);
          testing::SendAll(fd, std::string(h.data(), h.size()));
          for (uint64_t i = 0; i < m_.chunks[index].length && !stopping_; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) return;
          }
          break;
        }
        case Lie::kNeverAnswers:
        case Lie::kHoldsRequests:
        case Lie::kHasNothing:
        case Lie::kSpeaksHttp:
        case Lie::kHasNoToken:
        case Lie::kWatchTooLong:
        case Lie::kWatchNoSuchChunk:
          break;
        case Lie::kOffersThenCloses:
          ::shutdown(fd, SHUT_RDWR);
          return;
        case Lie::kGarbage: {
          std::string junk(24, '\0');
          for (auto& c : junk) c = static_cast<char>(rng());
          testing::SendAll(fd, junk);
          break;
        }
      }
    }
  }

  // A watch ("SDWT") from `cursor`: the lies about it, else "I have everything"
  // (nothing, with kHasNothing, after a pause), so that the lie about chunks is
  // what the fetcher meets.
  void AnswerWatch(int fd, uint32_t cursor) {
    const uint32_t chunks = static_cast<uint32_t>(m_.chunks.size());
    std::string body;
    uint32_t aux = kHaveComplete;
    switch (lie_) {
      case Lie::kNeverAnswers:
        return;
      case Lie::kWatchTooLong:
        body.assign(4 * (chunks + 1), '\0');
        break;
      case Lie::kWatchNoSuchChunk:
        body = {static_cast<char>(chunks >> 24), static_cast<char>(chunks >> 16),
                static_cast<char>(chunks >> 8), static_cast<char>(chunks)};
        aux = 0;
        break;
      case Lie::kHasNothing:
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        aux = 0;
        break;
      default:
        break;
    }
    const HeaderRecord h = EncodeHeader(kHaveMagic, cursor, kChunkOk, aux, body.size());
    testing::SendAll(fd, std::string(h.data(), h.size()) + body);
  }

  const Lie lie_;
  const Manifest m_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> chunk_requests_{0};
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> fds_;            // GUARDED_BY(mu_); closed by their threads' ends
  std::vector<std::thread> conns_;  // GUARDED_BY(mu_)
  std::string received_;            // GUARDED_BY(mu_)
};

// The deadlines the tests use: a 256 KiB chunk is due within about 0.6 s.
FetchOptions Strict(FetchOptions o) {
  o.chunk_deadline.grace = std::chrono::milliseconds(500);
  o.chunk_deadline.min_rate = 4 << 20;
  return o;
}

class HostileRelayTest : public testing::WeightsFixture,
                         public ::testing::WithParamInterface<Lie> {};

TEST_P(HostileRelayTest, APullBesideALyingRelayEndsByteIdenticalAndDropsIt) {
  // Large enough that the liar's state (it has everything) arrives long before the
  // origin alone could finish: the fetcher then prefers the liar for every chunk.
  WriteRandom(model_ / "big.bin", 64 << 20, 11);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  ScriptedRelay liar(GetParam(), m);
  Manifest listed = m;
  listed.sources = {liar.addr().ToString()};  // as an origin's manifest lists a relay
  FetchStats stats;
  const auto start = std::chrono::steady_clock::now();
  Status s = FetchModel(listed, {origin}, dir_.path() / "dest", Strict(Options()), &stats);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_OK(s);
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  if (GetParam() == Lie::kNeverAnswers || GetParam() == Lie::kTrickles) {
    // Its offers never counted (it never delivered), so the seed may have sent
    // everything before the liar's deadline: it is dropped, or not needed.
    EXPECT_LE(stats.sources_dropped.size(), 1u);
    for (const std::string& d : stats.sources_dropped) EXPECT_EQ(d, liar.addr().ToString());
  } else {
    EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{liar.addr().ToString()});
  }
  EXPECT_EQ(stats.bytes_from_peers, 0u);
  EXPECT_GE(liar.connections(), 1);
  // One missed deadline (~0.6 s) drops it; before, these pulls never ended.
  EXPECT_LT(took, std::chrono::seconds(30));
}

INSTANTIATE_TEST_SUITE_P(EveryLie, HostileRelayTest,
                         ::testing::Values(Lie::kClaimsForever, Lie::kTrickles, Lie::kNeverAnswers,
                                           Lie::kOffersThenCloses, Lie::kGarbage,
                                           Lie::kWatchTooLong, Lie::kWatchNoSuchChunk,
                                           Lie::kSpeaksHttp, Lie::kHasNoToken),
                         LieName);

// An endgame copy is held aside while a slower copy of its chunk is written:
// the first verified is the one written.
class HeldCopyTest : public testing::WeightsFixture {};

TEST_F(HeldCopyTest, AnEndgameCopyVerifiedFirstIsWrittenWhileASlowCopyStillTrickles) {
  WriteRandom(model_ / "big.bin", 64 << 20, 23);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  // Offers every chunk, then sends a header and a byte every 50 ms.
  ScriptedRelay trickler(Lie::kTrickles, m);
  Manifest listed = m;
  listed.sources = {trickler.addr().ToString()};
  FetchOptions o = Options();
  o.chunk_deadline.grace = std::chrono::seconds(20);  // its copy is not cut for 20 s
  FetchStats stats;
  ASSERT_OK(FetchModel(listed, {origin}, dir_.path() / "dest", o, &stats));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  ASSERT_GE(trickler.chunk_requests(), 1);
  // The origin's endgame copy won the race: the pull did not wait for the
  // trickle's deadline, and the trickler was not blamed. Read past instead,
  // that copy was asked for again and again until the deadline dropped it.
  EXPECT_GE(stats.held_copies_written, 1u);
  EXPECT_TRUE(stats.sources_dropped.empty()) << stats.sources_dropped.front();
  EXPECT_EQ(stats.bytes_from_peers, 0u);
}

// A relay named by someone else may be any service: one that answers HTTP is
// dropped at its first answer, not taken for a full source and reconnected to
// at once for minutes (thousands of connections a second before).
class ForeignServiceTest : public testing::WeightsFixture {
 protected:
  // A pull of model_ from `origin` beside `relay`, named in the manifest as an
  // origin names relays; byte-identical.
  FetchStats PullBeside(ScriptedRelay* relay, const Manifest& m, const HostPort& origin) {
    Manifest listed = m;
    listed.sources = {relay->addr().ToString()};
    FetchStats stats;
    EXPECT_OK(FetchModel(listed, {origin}, dir_.path() / "dest", Options(), &stats));
    EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
    return stats;
  }
};

// A relay named by someone else (in a manifest, a state response or the
// registry) that does not hold the token: it is dropped at its first answer and
// receives neither the token nor a proof it could replay elsewhere (the
// fetcher proves itself only after the source has).
TEST_F(ForeignServiceTest, ARelayWithoutTheTokenNeverReceivesTheTokenOrAProof) {
  WriteRandom(model_ / "big.bin", 8 << 20, 19);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  ScriptedRelay stranger(Lie::kHasNoToken, m);
  const FetchStats stats = PullBeside(&stranger, m, origin);
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{stranger.addr().ToString()});
  const std::string received = stranger.received();
  EXPECT_NE(received.find(kDataAuthScheme), std::string::npos) << received;
  EXPECT_EQ(received.find(kToken), std::string::npos) << received;
  EXPECT_EQ(received.find("proof"), std::string::npos) << received;
}

TEST_F(ForeignServiceTest, ARelayThatIsAnotherServiceIsDroppedWithoutAFlood) {
  WriteRandom(model_ / "big.bin", 16 << 20, 17);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  ScriptedRelay http(Lie::kSpeaksHttp, m);
  const FetchStats stats = PullBeside(&http, m, origin);
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{http.addr().ToString()});
  EXPECT_EQ(stats.refused_full, 0u);
  // Its data and watch connections, at most: once each.
  EXPECT_LE(http.connections(), 2);
}

// A TCP connection whose receive window stays tiny: a peer that reads nothing
// fills it at once and the sender blocks.
UniqueFd ConnectNarrow(const HostPort& to) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int small = 4096;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(to.port);
  ::inet_pton(AF_INET, to.host.c_str(), &a.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// A fetcher has at most FetchOptions::swarm_requests (4) requests at relays at
// once: of six relays that offer every chunk and answer no request, four are
// asked until the first of them is dropped at its deadline; without the bound
// all six were. (The seed is down, so that nothing ends the requests at the
// relays but their deadlines.) Then every relay is dropped, and the pull ends
// with an error.
class BoundedRequestsTest : public testing::WeightsFixture {};

TEST_F(BoundedRequestsTest, AFetcherAsksAtMostFourRelaysAtOnce) {
  WriteRandom(model_ / "big.bin", 8 << 20, 13);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  std::vector<std::unique_ptr<ScriptedRelay>> relays;
  Manifest listed = m;
  for (int i = 0; i < 6; ++i) {
    relays.push_back(std::make_unique<ScriptedRelay>(Lie::kHoldsRequests, m));
    listed.sources.push_back(relays.back()->addr().ToString());
  }
  uint16_t down_port = 0;
  testing::ListenLoopback(&down_port);  // closed at once: nobody listens there
  FetchOptions options = Options();
  // Holding nothing while the relays hold everything, it is behind them: the
  // requests it adds to catch up (unit.SwarmScheduler.AHostBehindItsNeighbours...)
  // are off here.
  options.swarm_catch_up = 0;
  options.chunk_deadline.grace = std::chrono::seconds(3);  // none dropped while we look
  options.chunk_deadline.min_rate = 4 << 20;
  auto asked = [&] {
    int n = 0;
    for (const auto& r : relays) n += r->chunk_requests() > 0;
    return n;
  };
  FetchStats stats;
  Status pulled;
  std::thread fetch([&] {
    pulled = FetchModel(listed, {HostPort{"127.0.0.1", down_port}}, dir_.path() / "dest", options,
                        &stats);
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return asked() >= 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // time to ask more, if it would
  EXPECT_EQ(asked(), 4);
  fetch.join();
  EXPECT_FALSE(pulled.ok());
  EXPECT_EQ(asked(), 6);
  EXPECT_EQ(stats.sources_dropped.size(), 7u);  // the six relays and the seed
}

// 48 relays of one token holder, each offering every chunk and answering no
// request. Before, the seed was asked only for chunks no relay offered, so the
// pull waited out a chunk deadline per few liars (about ceil(48/6) deadlines).
// A relay's offers now count only once it has delivered a verified chunk: the
// pull ends within twice its time without them plus one chunk deadline.
TEST_F(BoundedRequestsTest, RelaysThatOfferEverythingAndSendNothingCannotKeepTheSeedIdle) {
  WriteRandom(model_ / "big.bin", 64 << 20, 23);
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  const FetchOptions options = Options();
  using Clock = std::chrono::steady_clock;
  const auto alone_start = Clock::now();
  ASSERT_OK(FetchModel(m, {origin}, dir_.path() / "alone", options));
  const auto alone = Clock::now() - alone_start;
  std::vector<std::unique_ptr<ScriptedRelay>> liars;
  Manifest listed = m;
  for (int i = 0; i < 48; ++i) {
    liars.push_back(std::make_unique<ScriptedRelay>(Lie::kHoldsRequests, m));
    listed.sources.push_back(liars.back()->addr().ToString());
  }
  uint64_t largest = 0;
  for (const auto& c : m.chunks) largest = std::max(largest, c.length);
  const auto one_deadline = options.chunk_deadline.Within(largest);
  FetchStats stats;
  const auto start = Clock::now();
  ASSERT_OK(FetchModel(listed, {origin}, dir_.path() / "dest", options, &stats));
  const auto took = Clock::now() - start;
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  int asked = 0;
  for (const auto& l : liars) asked += l->chunk_requests() > 0;
  EXPECT_GT(asked, 0) << "the liars were never asked: the test proves nothing";
  EXPECT_LE(took, 2 * alone + one_deadline)
      << "alone " << std::chrono::duration<double>(alone).count() << " s, beside 48 liars "
      << std::chrono::duration<double>(took).count() << " s";
}

class StallingPeersTest : public testing::WeightsFixture {
 protected:
  // An origin of model_ (16 MiB more, 8 MiB chunks) with the given bounds.
  std::shared_ptr<WeightServer> Origin(WeightServerOptions options, HostPort* addr, Manifest* m) {
    WriteRandom(model_ / "big.bin", 16 << 20, 5);
    BuildOptions build;
    build.chunk_size = 8 << 20;
    Result<IndexedModel> index = IndexModel("tiny", model_, build);
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    *m = index->manifest;
    auto server = std::make_shared<WeightServer>(
        std::vector<ServedModel>{ServeIndexed(std::move(*index))}, options);
    *addr = ServeWeights(server);
    return server;
  }
  // A data connection that asks for `magic` `index` and then never reads; from
  // the address `from` when given.
  UniqueFd Stall(const HostPort& origin, const Manifest& m, const char* magic, uint32_t index,
                 const std::string& relay, const std::string& from = "") {
    UniqueFd fd = from.empty() ? ConnectNarrow(origin) : testing::ConnectFrom(from, origin, 4096);
    Json hello = {{"kind", "weight_data"}, {"root_digest", m.root_digest}, {"token", kToken}};
    if (!relay.empty()) {
      hello["relay"] = relay;
      hello["session"] = "stall";
    }
    testing::SendAll(fd.get(), EncodeJsonFrame(hello));
    EXPECT_EQ(testing::ReadResponse(fd.get())["status"], "ok");
    const RequestRecord req = EncodeRequest(magic, index);
    testing::SendAll(fd.get(), std::string(req.data(), req.size()));
    return fd;
  }
  // Four data connections (from `from` when given) under four invented relay
  // names 10.99.0.1-4, each asking for an 8 MiB chunk of big.bin and never
  // reading: every upload slot, once they are all connected.
  std::vector<UniqueFd> HoldEverySlot(WeightServer& server, const HostPort& origin,
                                      const Manifest& m, const std::string& from = "") {
    std::vector<uint32_t> big;
    for (uint32_t i = 0; i < m.chunks.size(); ++i) {
      if (m.chunks[i].file == "big.bin") big.push_back(i);
    }
    std::vector<UniqueFd> stalled;
    for (int i = 0; i < 4; ++i) {
      stalled.push_back(Stall(origin, m, "SDRQ", big[static_cast<size_t>(i) % big.size()],
                              "10.99.0." + std::to_string(i + 1) + ":7420", from));
    }
    EXPECT_TRUE(testing::WaitUntil([&] { return server.connections() == 4; }));
    return stalled;
  }
  // A relaying fetcher's pull of `m` from `origin` into dest/, checked: how long it took.
  std::chrono::steady_clock::duration PullAsRelay(const HostPort& origin, const Manifest& m) {
    FetchOptions o = Options();
    o.relay = "127.0.0.1:10";
    const auto start = std::chrono::steady_clock::now();
    EXPECT_OK(FetchModel(m, {origin}, dir_.path() / "dest", o));
    EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
    return std::chrono::steady_clock::now() - start;
  }
};

TEST_F(StallingPeersTest, AFetcherThatStopsReadingIsCutAtTheSendDeadline) {
  WeightServerOptions options;
  options.send.grace = std::chrono::milliseconds(300);
  options.send.min_rate = 8 << 20;  // an 8 MiB chunk is due within 1.3 s
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  uint32_t big = 0;  // an 8 MiB chunk: far more than the windows hold
  while (m.chunks[big].file != "big.bin") ++big;
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 4; ++i) stalled.push_back(Stall(origin, m, "SDRQ", big, ""));
  ASSERT_TRUE(testing::WaitUntil([&] { return server->connections() == 4; }));
  // Blocked in sendfile on full windows, each is cut at its deadline: no
  // serving thread stays with a peer that does not read.
  EXPECT_TRUE(
      testing::WaitUntil([&] { return server->connections() == 0; }, std::chrono::seconds(20)))
      << server->connections() << " connections still served";
  ASSERT_TRUE(FetchModel(m, {origin}, dir_.path() / "dest", Options()).ok());
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
}

// A watch for wanted chunks whose bitmap never follows its record holds its
// serving thread only until the send deadline of the bitmap's size.
TEST_F(StallingPeersTest, AWatchWhoseBitmapNeverArrivesIsCutAtItsDeadline) {
  WeightServerOptions options;
  options.send.grace = std::chrono::milliseconds(300);
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 4; ++i) stalled.push_back(Stall(origin, m, "SDWW", 0, ""));
  ASSERT_TRUE(testing::WaitUntil([&] { return server->connections() == 4; }));
  EXPECT_TRUE(
      testing::WaitUntil([&] { return server->connections() == 0; }, std::chrono::seconds(5)))
      << server->connections() << " connections still served";
  ASSERT_TRUE(FetchModel(m, {origin}, dir_.path() / "dest", Options()).ok());
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
}

// Four data connections announcing four invented relays, each asking for an
// 8 MiB chunk and reading nothing, hold every upload slot (before: until their
// send deadline, here a minute, every relaying pull answered busy meanwhile).
// A slot holder slower than relay_min_rate after preempt_after loses its slot
// to a relay waiting: the relaying pull ends within seconds.
TEST_F(StallingPeersTest, RelaysHoldingUploadSlotsWithoutReadingArePreempted) {
  WeightServerOptions options;
  options.send.grace = std::chrono::seconds(60);
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  LogCapture logs;
  std::vector<UniqueFd> stalled = HoldEverySlot(*server, origin, m);
  EXPECT_LT(PullAsRelay(origin, m), std::chrono::seconds(15));
  EXPECT_TRUE(
      logs.Contains(spdlog::level::warn, "weight_data: closed the upload of relay 10.99.0."))
      << logs.Dump();
}

// Relay names are the peer's word; its address is not. Four connections from
// one address, under four invented relay names, hold every upload slot and are
// not slow by the rate rule (it is off here): before, a relaying pull from
// another address was answered busy until their send deadline (a minute). The
// address holding every slot loses one to the address holding none.
TEST_F(StallingPeersTest, OneAddressCannotKeepEveryUploadSlotFromTheOthers) {
  WeightServerOptions options;
  options.send.grace = std::chrono::seconds(60);
  options.relay_min_rate = 0;
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  LogCapture logs;
  std::vector<UniqueFd> stalled = HoldEverySlot(*server, origin, m, "127.0.0.2");
  EXPECT_LT(PullAsRelay(origin, m), std::chrono::seconds(15));
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "from 127.0.0.2, which holds 4 upload slots, for a relay from "
                            "127.0.0.1, which holds none"))
      << logs.Dump();
}

TEST_F(StallingPeersTest, AClaimAtTheOriginThatNeverCompletesIsAskedForPlainly) {
  // The origin's sends may block for a minute: its claims stay "still sending"
  // (no slot is taken from a slow holder here: the claim's age is under test).
  WeightServerOptions options;
  options.send.grace = std::chrono::seconds(60);
  options.relay_min_rate = 0;
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  // A token holder announces itself as a relay (one that is up, and offers
  // nothing) and claims every chunk of the 16 MiB file, then never reads.
  ScriptedRelay claimer(Lie::kHasNothing, m);
  std::vector<UniqueFd> stalled;
  for (uint32_t i = 0; i < m.chunks.size(); ++i) {
    if (m.chunks[i].file == "big.bin") {
      stalled.push_back(Stall(origin, m, "SDRN", i, claimer.addr().ToString()));
    }
  }
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return server->connections() == static_cast<int>(stalled.size()); }));
  // A relaying fetcher asks the origin with claims ("SDRN"): told "claimed, still
  // sending" for ever, it asks plainly ("SDRQ") once the claim is old.
  FetchOptions o = Options();
  o.relay = "127.0.0.1:10";
  o.claim_floor_rate = 1 << 20;  // an 8 MiB chunk's claim is old after 8 s
  FetchStats stats;
  const auto start = std::chrono::steady_clock::now();
  Status s = FetchModel(m, {origin}, dir_.path() / "dest", o, &stats);
  ASSERT_OK(s);
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.bytes_from_peers, 0u);
  EXPECT_EQ(stats.peers, std::vector<std::string>{claimer.addr().ToString()});
  // Not before the claim's limit: on a congested origin an honest claim takes
  // that long (a fixed 5 s had every fetcher of 16 on 50 Mbit/s links ask the
  // origin again, which then sent 2.6x the model).
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
}

// A seed is the caller's own source: it is held to seed_deadline, whose floor a
// seed whose link many fetchers share still meets, not to the relays' deadline
// (missed by the origin of 16 fetchers on 50 Mbit/s links, which was then dropped).
TEST_F(StallingPeersTest, ASeedIsHeldToTheSeedDeadlineNotTheRelays) {
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  FetchOptions o = Options();
  o.chunk_deadline.grace = std::chrono::milliseconds(0);
  o.chunk_deadline.min_rate = uint64_t{1} << 50;  // no chunk could arrive in time
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {origin}, dir_.path() / "dest", o, &stats));
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_TRUE(stats.sources_dropped.empty());
}

TEST_F(StallingPeersTest, AClaimedAnswerNamesTheRelayHoldingTheClaimWhenAsked) {
  WeightServerOptions options;
  options.send.grace = std::chrono::seconds(60);
  options.relay_min_rate = 0;
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  uint32_t big = 0;
  while (m.chunks[big].file != "big.bin") ++big;
  // Relay 10.99.0.7 takes the claim on an 8 MiB chunk and does not read it.
  UniqueFd holder = Stall(origin, m, "SDRN", big, "10.99.0.7:7420");
  ASSERT_TRUE(testing::WaitUntil([&] { return server->connections() == 1; }));
  for (bool ask : {true, false}) {
    UniqueFd fd = ConnectNarrow(origin);
    Json hello = {{"kind", "weight_data"},
                  {"root_digest", m.root_digest},
                  {"token", kToken},
                  {"relay", "10.99.0.8:7420"},
                  {"session", "asker"}};
    if (ask) hello["claim_holder"] = true;
    testing::SendAll(fd.get(), EncodeJsonFrame(hello));
    Json ok = testing::ReadResponse(fd.get());
    ASSERT_EQ(ok["status"], "ok");
    EXPECT_EQ(ok["claim_holder"], true);  // the server can
    const RequestRecord req = EncodeRequest(kClaimMagic, big);
    testing::SendAll(fd.get(), std::string(req.data(), req.size()));
    HeaderRecord record;
    ASSERT_TRUE(RecvExactly(fd.get(), record.data(), record.size()));
    const Header h = DecodeHeader(record);
    EXPECT_EQ(h.status, kChunkClaimed);
    EXPECT_EQ(h.aux, 0xffffffffu);  // still being sent
    if (!ask) {
      EXPECT_EQ(h.length, 0u);  // an older fetcher reads no more
      continue;
    }
    ASSERT_EQ(h.length, std::string("10.99.0.7:7420").size());
    std::string name(h.length, '\0');
    ASSERT_TRUE(RecvExactly(fd.get(), name.data(), name.size()));
    EXPECT_EQ(name, "10.99.0.7:7420");
    // Asked again and again on this connection, each answer arrives whole: the
    // name is written with its header (written after it, it waited under
    // Nagle's rule for the header's acknowledgement, which the asker, waiting
    // for the name, delayed).
    for (int again = 0; again < 8; ++again) {
      bool whole = false;
      const std::string answer =
          testing::AskWhole(fd.get(), "SDRN", big, record.size() + name.size(), &whole);
      EXPECT_TRUE(whole) << "answer " << again;
      ASSERT_EQ(answer.size(), record.size() + name.size());
      EXPECT_EQ(answer.substr(record.size()), "10.99.0.7:7420");
    }
  }
}

TEST_F(StallingPeersTest, AClaimHeldByARelayNobodyCanReachIsAskedForAtOnce) {
  WeightServerOptions options;
  options.send.grace = std::chrono::seconds(60);
  HostPort origin;
  Manifest m;
  std::shared_ptr<WeightServer> server = Origin(options, &origin, &m);
  // The claimer announced an address where nothing listens (a relay that died).
  std::vector<UniqueFd> stalled;
  for (uint32_t i = 0; i < m.chunks.size(); ++i) {
    if (m.chunks[i].file == "big.bin") {
      stalled.push_back(Stall(origin, m, "SDRN", i, "127.0.0.1:9"));
    }
  }
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return server->connections() == static_cast<int>(stalled.size()); }));
  FetchOptions o = Options();
  o.relay = "127.0.0.1:10";
  FetchStats stats;
  ASSERT_TRUE(FetchModel(m, {origin}, dir_.path() / "dest", o, &stats).ok());
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{"127.0.0.1:9"});
}

}  // namespace
}  // namespace seedd
