// The swarm on loopback: what a source tells its neighbours (a bounded sample of
// relays; newly verified chunks as they land, not polled), upload slots, and a
// fetcher that keeps a bounded neighbour set.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

#include "common/metrics.h"
#include "kinds/weights/net/relay_pacing.h"
#include "kinds/weights/weight_shards_kind.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "transport/client.h"
#include "transport/socket_io.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using testing::Announce;
using testing::Ask;
using testing::Record;
using testing::WriteRandom;

class SwarmTest : public testing::WeightsFixture {
 protected:
  // A server of model_ (256 KiB chunks): complete, or with the chunks of `partial`.
  std::shared_ptr<WeightServer> Server(WeightServerOptions options,
                                       std::shared_ptr<ChunkSet> partial = nullptr) {
    BuildOptions build;
    build.chunk_size = 256 * 1024;
    Result<Manifest> m = BuildManifest("tiny", model_, build);
    EXPECT_OK(m);
    manifest_ = *m;
    return std::make_shared<WeightServer>(
        std::vector<ServedModel>{{*m, model_, std::move(partial), {}, nullptr, nullptr}}, options);
  }
  // Relays 10.0.0.1:1 to 10.0.0.N:1 announced to `addr`; their connections.
  std::vector<UniqueFd> AnnounceRelays(const HostPort& addr, int n) {
    std::vector<UniqueFd> held;
    for (int i = 1; i <= n; ++i) {
      held.push_back(Announce(addr, manifest_.root_digest, "10.0.0." + std::to_string(i) + ":1"));
    }
    return held;
  }
  // The relays a state response lists.
  std::vector<std::string> Listed(const Record& state) const {
    std::vector<std::string> names;
    const std::string list = state.body.substr((manifest_.chunks.size() + 7) / 8);
    for (size_t pos = 0; pos < list.size();) {
      const size_t end = list.find('\n', pos);
      names.push_back(list.substr(pos, end - pos));
      pos = end + 1;
    }
    return names;
  }
  // Asks on `fd` for every chunk of big.bin (more than any socket buffer) and
  // reads none: the server's send blocks mid-chunk, holding an upload slot.
  void AskForAllOfBig(const UniqueFd& fd) const {
    for (uint32_t i = 0; i < manifest_.chunks.size(); ++i) {
      if (manifest_.chunks[i].file != "big.bin") continue;
      const RequestRecord req = EncodeRequest(kSendMagic, i);
      testing::SendAll(fd.get(), std::string(req.data(), req.size()));
    }
  }
  // Waits until `server` has sent something and then nothing for 100 ms (its
  // sends are blocked); returns the bytes served by then.
  static uint64_t WaitUntilBlocked(const WeightServer& server) {
    uint64_t served = 0;
    EXPECT_TRUE(testing::WaitUntil([&] {
      const uint64_t before = server.bytes_served();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      served = server.bytes_served();
      return served > 0 && served == before;
    }));
    return served;
  }
  // Pulls an 8 MiB model from an origin, with six empty relays in the manifest
  // and room for two relay neighbours at once, rotating every `rotate_after`
  // chunks: how many relays were contacted.
  int RelaysContacted(uint32_t rotate_after, FetchStats* stats) {
    WriteRandom(model_ / "big.bin", 8 << 20, 5);
    // The origin sends at 16 MB/s (served as a model still pulled, every chunk
    // verified, under a relay rate): the pull lasts about half a second, so a
    // neighbour retired has time to be replaced however fast the loopback.
    WeightServerOptions slow;
    slow.relay_upload_rate = 16 * 1000 * 1000;
    Server(slow);  // manifest_ now describes big.bin
    auto all = std::make_shared<ChunkSet>(manifest_.chunks.size());
    for (size_t i = 0; i < manifest_.chunks.size(); ++i) all->Set(i);
    auto origin = Server(slow, all);
    HostPort origin_addr = ServeWeights(origin);
    std::vector<std::shared_ptr<WeightServer>> relays;
    Manifest m = manifest_;
    for (int i = 0; i < 6; ++i) {  // each with nothing of the model yet
      relays.push_back(
          Server(WeightServerOptions{}, std::make_shared<ChunkSet>(manifest_.chunks.size())));
      m.sources.push_back(ServeWeights(relays.back()).ToString());
    }
    FetchOptions options = Options();
    options.max_neighbours = 3;      // the origin and two relays
    options.relay = "127.0.0.1:10";  // announced to every source it connects to
    options.rotate_after = rotate_after;
    EXPECT_OK(FetchModel(m, {origin_addr}, dir_.path() / "out", options, stats));
    EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
    int contacted = 0;
    for (const auto& r : relays) contacted += !r->Peers(m.root_digest, "").empty();
    return contacted;
  }
  Manifest manifest_;
};

TEST_F(SwarmTest, AStateListsABoundedRandomSampleOfTheRelays) {
  WeightServerOptions options;
  options.max_peers_listed = 5;
  auto server = Server(options);
  HostPort addr = ServeWeights(server);
  std::vector<UniqueFd> held = AnnounceRelays(addr, 20);
  UniqueFd fd = Announce(addr, manifest_.root_digest, "10.0.1.1:1");
  std::set<std::string> seen;
  for (int ask = 0; ask < 10; ++ask) {
    Record state = Ask(fd.get(), "SDST", 0);
    ASSERT_EQ(state.status, 0u);
    const std::vector<std::string> names = Listed(state);
    EXPECT_EQ(names.size(), 5u);
    for (const std::string& name : names) {
      EXPECT_EQ(name.rfind("10.0.0.", 0), 0u) << name;  // announced; never the asker itself
      seen.insert(name);
    }
  }
  EXPECT_GT(seen.size(), 5u);  // a sample, not always the same five
}

// Relays that hold chunks this server sent them (nobody else got those from it)
// are listed first: they complement whoever asks.
TEST_F(SwarmTest, AStateListsTheRelaysHoldingChunksSentFromHereFirst) {
  WeightServerOptions options;
  options.max_peers_listed = 5;
  auto server = Server(options);
  HostPort addr = ServeWeights(server);
  std::vector<UniqueFd> held = AnnounceRelays(addr, 20);
  // Relays 4, 9 and 17 are sent a chunk each with a claim.
  uint32_t chunk = 0;
  for (int i : {4, 9, 17}) ASSERT_EQ(Ask(held[i - 1].get(), "SDRN", chunk++).status, 0u);
  UniqueFd asker = Announce(addr, manifest_.root_digest, "10.0.1.1:1");
  std::set<std::string> others;
  for (int ask = 0; ask < 10; ++ask) {
    const std::vector<std::string> names = Listed(Ask(asker.get(), "SDST", 0));
    for (const char* holder : {"10.0.0.4:1", "10.0.0.9:1", "10.0.0.17:1"}) {
      EXPECT_NE(std::find(names.begin(), names.end(), holder), names.end());
    }
    others.insert(names.begin(), names.end());
  }
  EXPECT_GT(others.size(), 5u);  // the other two places go to relays at random
}

// A neighbour learns of a newly verified chunk when it lands: the watch waits for
// it and names only what is new; a complete source says so at once.
TEST_F(SwarmTest, AWatchIsAnsweredWithTheChunksVerifiedSinceItsCursor) {
  auto server = Server(WeightServerOptions{});
  auto partial = std::make_shared<ChunkSet>(manifest_.chunks.size());
  partial->Set(0);
  server->Publish(ServedModel{manifest_, model_, partial, {}, nullptr, nullptr});
  HostPort addr = ServeWeights(server);
  UniqueFd fd = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  Record state = Ask(fd.get(), "SDST", 0);
  ASSERT_EQ(state.status, 0u);
  EXPECT_EQ(static_cast<unsigned char>(state.body[0]), 0x80);
  EXPECT_EQ(state.aux, 1u);  // the cursor: one chunk verified so far
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    partial->Set(2);
  });
  const auto start = std::chrono::steady_clock::now();
  Record have = Ask(fd.get(), "SDWT", state.aux);
  later.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWatchWait);  // not at the timeout
  EXPECT_EQ(have.status, 0u);
  EXPECT_EQ(have.index, 2u);  // the next cursor
  EXPECT_EQ(have.aux, 0u);
  EXPECT_EQ(have.body, std::string("\0\0\0\2", 4));
  // Nothing new: an empty answer after kWatchWait.
  Record empty = Ask(fd.get(), "SDWT", have.index);
  EXPECT_EQ(empty.status, 0u);
  EXPECT_TRUE(empty.body.empty());
  // The model completes: the watch says the source has everything.
  server->Publish(ServedModel{manifest_, model_, nullptr, {}, nullptr, nullptr});
  Record complete = Ask(fd.get(), "SDWT", empty.index);
  EXPECT_EQ(complete.aux, kHaveComplete);
}

// A watch that names the chunks its fetcher wants ("SDWW") is answered with
// those alone, and only once one of them is verified: a relay's watchers are
// not woken for chunks they have. The cursor still moves past the others, and
// a complete source still says so at once.
TEST_F(SwarmTest, AWatchForWantedChunksIsAnsweredOnlyForThose) {
  WriteRandom(model_ / "big.bin", 4 << 20, 3);
  auto server = Server(WeightServerOptions{});
  const size_t chunks = manifest_.chunks.size();
  ASSERT_GE(chunks, 8u);
  auto partial = std::make_shared<ChunkSet>(chunks);
  server->Publish(ServedModel{manifest_, model_, partial, {}, nullptr, nullptr});
  HostPort addr = ServeWeights(server);
  Json hello;
  UniqueFd fd = testing::OpenData(addr, manifest_.root_digest, &hello);
  EXPECT_EQ(hello.value("watch_wanted", false), true);
  std::string wanted((chunks + 7) / 8, '\0');
  wanted[0] = static_cast<char>(0x80 >> 5);  // chunk 5 alone
  std::thread later([&] {
    partial->Set(1);  // not wanted: no answer for it
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    partial->Set(5);
  });
  const auto start = std::chrono::steady_clock::now();
  Record have = Ask(fd.get(), "SDWW", 0, wanted);
  const auto took = std::chrono::steady_clock::now() - start;
  later.join();
  EXPECT_GE(took, std::chrono::milliseconds(300));  // not answered for chunk 1
  EXPECT_LT(took, kWatchWait + std::chrono::milliseconds(300));
  EXPECT_EQ(have.status, 0u);
  EXPECT_EQ(have.index, 2u);  // the cursor: both chunks verified
  EXPECT_EQ(have.body, std::string("\0\0\0\5", 4));
  // Chunks it does not want pass by: an empty answer after kWatchWait.
  partial->Set(2);
  Record empty = Ask(fd.get(), "SDWW", have.index, wanted);
  EXPECT_EQ(empty.status, 0u);
  EXPECT_TRUE(empty.body.empty());
  EXPECT_EQ(empty.index, 3u);
  // The connection goes on with plain watches and requests.
  partial->Set(3);
  Record plain = Ask(fd.get(), "SDWT", empty.index);
  EXPECT_EQ(plain.body, std::string("\0\0\0\3", 4));
  EXPECT_EQ(Ask(fd.get(), "SDRQ", 5).status, 0u);
  server->Publish(ServedModel{manifest_, model_, nullptr, {}, nullptr, nullptr});
  EXPECT_EQ(Ask(fd.get(), "SDWW", plain.index, wanted).aux, kHaveComplete);
}

// A watch is answered for every chunk a relay verifies, to each of its
// watchers: the header and the chunks it names are one write, so the fetcher
// has the whole answer when it wakes. Written in two, the second part waited
// under Nagle's rule for the acknowledgement of the first, which the fetcher,
// waiting for the rest, delayed (about 40 ms per answer on loopback).
TEST_F(SwarmTest, AWatchAnswerArrivesWholeWithItsHeader) {
  WriteRandom(model_ / "big.bin", 4 << 20, 3);
  auto server = Server(WeightServerOptions{});
  auto partial = std::make_shared<ChunkSet>(manifest_.chunks.size());
  server->Publish(ServedModel{manifest_, model_, partial, {}, nullptr, nullptr});
  HostPort addr = ServeWeights(server);
  UniqueFd fd = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  ASSERT_GE(manifest_.chunks.size(), 12u);
  for (uint32_t i = 0; i < 12; ++i) {
    partial->Set(i);
    bool whole = false;
    const std::string answer = testing::AskWhole(fd.get(), "SDWT", i, 28, &whole);
    EXPECT_TRUE(whole) << "watch answer " << i << ": the chunk it names came apart";
    ASSERT_EQ(answer.size(), 28u);
    EXPECT_EQ(answer.substr(24), std::string("\0\0\0", 3) + static_cast<char>(i));
  }
}

// A small file's chunk is sent whole with its header, for the same reason: a
// model of many small files is a request per file.
TEST_F(SwarmTest, ASmallChunkArrivesWholeWithItsHeader) {
  for (int f = 0; f < 12; ++f) WriteRandom(model_ / ("small" + std::to_string(f)), 100 + f, f);
  Server(WeightServerOptions{});
  HostPort addr = ServeWeights(Server(WeightServerOptions{}));
  Json hello;
  UniqueFd fd = testing::OpenData(addr, manifest_.root_digest, &hello);
  int small = 0;
  for (uint32_t i = 0; i < manifest_.chunks.size(); ++i) {
    const uint64_t length = manifest_.chunks[i].length;
    if (length > 1024) continue;
    ++small;
    bool whole = false;
    const std::string answer = testing::AskWhole(fd.get(), "SDRQ", i, 24 + length, &whole);
    EXPECT_TRUE(whole) << "chunk " << i << " (" << manifest_.chunks[i].file
                       << ") came apart from its header";
    ASSERT_EQ(answer.size(), 24 + length);
    EXPECT_EQ(answer.substr(24), testing::ReadAll(model_ / manifest_.chunks[i].file)) << i;
  }
  EXPECT_GE(small, 12);
}

// A relay beyond the server's upload slots is told "busy" with a time to retry;
// a fetcher that does not relay is not limited.
TEST_F(SwarmTest, RelaysBeyondTheUploadSlotsAreToldBusy) {
  WriteRandom(model_ / "big.bin", 64 << 20, 3);
  WeightServerOptions options;
  options.upload_slots = 1;
  options.busy_retry = std::chrono::milliseconds(250);
  auto server = Server(options);
  HostPort addr = ServeWeights(server);
  // A relay that asks for many chunks and reads none holds the slot while its
  // socket buffers fill.
  UniqueFd hog = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  AskForAllOfBig(hog);
  // Once its socket buffers are full the send blocks mid-chunk, holding the slot.
  ASSERT_LT(WaitUntilBlocked(*server), 64u << 20);  // not everything: still sending
  UniqueFd relay = Announce(addr, manifest_.root_digest, "10.0.0.2:1");
  Record busy = Ask(relay.get(), "SDRQ", 1);
  EXPECT_EQ(busy.status, static_cast<uint32_t>(kChunkBusy));
  EXPECT_EQ(busy.aux, 250u);
  EXPECT_TRUE(busy.body.empty());
  Json answer;
  UniqueFd plain = testing::OpenData(addr, manifest_.root_digest, &answer);
  EXPECT_EQ(Ask(plain.get(), "SDRQ", 1).status, 0u);
}

// seedd_relay_upload_wait_seconds_total in this process's /metrics text.
double RelayWaited() {
  const std::string text = metrics::Text();
  const std::string name = "\nseedd_relay_upload_wait_seconds_total ";
  const size_t at = text.find(name);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size()));
}

// --relay-upload-rate: what a host sends of a model it is still pulling is held
// to the rate (its own requests and acknowledgements are not queued behind its
// uploads); a model it holds whole is sent at full speed under the same option.
TEST_F(SwarmTest, AModelStillPulledHereIsSentAtMostAtTheRelayRate) {
  WriteRandom(model_ / "big.bin", 4 << 20, 3);
  WeightServerOptions options;
  options.relay_upload_rate = 2 * 1000 * 1000;  // 2 MB/s
  auto complete = Server(options);
  auto pulling_set = std::make_shared<ChunkSet>(manifest_.chunks.size());
  for (size_t i = 0; i < manifest_.chunks.size(); ++i) pulling_set->Set(i);
  auto pulling = Server(options, pulling_set);
  // Reads every chunk of big.bin from `server`; the seconds it took.
  auto read_big = [&](std::shared_ptr<WeightServer> server) {
    HostPort addr = ServeWeights(server);
    Json answer;
    UniqueFd fd = testing::OpenData(addr, manifest_.root_digest, &answer);
    const auto start = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < manifest_.chunks.size(); ++i) {
      if (manifest_.chunks[i].file != "big.bin") continue;
      Record r = Ask(fd.get(), "SDRQ", i);
      EXPECT_EQ(r.status, 0u) << i;
      bytes += r.body.size();
    }
    EXPECT_EQ(bytes, 4u << 20);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // 4 MiB at 2 MB/s: 2.1 s, less the bucket's burst (at most 64 KiB here); the
  // wait shows in /metrics.
  const double waited = RelayWaited();
  EXPECT_GE(read_big(pulling), 2.0);
  EXPECT_GE(RelayWaited() - waited, 1.9);
  EXPECT_LT(read_big(complete), 1.5);  // on loopback: milliseconds
}

// --relay-upload-pacing delay: what a host sends of a model it is still pulling
// goes through the pacer, which reads each upload connection's round trip; on
// loopback nothing queues, so nothing is paced and every byte arrives at once.
TEST_F(SwarmTest, DelayPacingSendsAPulledModelWholeAndUnpacedWhileNothingQueues) {
  WriteRandom(model_ / "big.bin", 4 << 20, 3);
  WeightServerOptions options;
  options.relay_pacing = RelayPacingMode::kDelay;
  Server(options);  // manifest_ now describes the new big.bin
  auto pulling_set = std::make_shared<ChunkSet>(manifest_.chunks.size());
  for (size_t i = 0; i < manifest_.chunks.size(); ++i) pulling_set->Set(i);
  HostPort addr = ServeWeights(Server(options, pulling_set));
  Json answer;
  UniqueFd fd = testing::OpenData(addr, manifest_.root_digest, &answer);
  const double waited = RelayWaited();
  const auto start = std::chrono::steady_clock::now();
  std::string big;
  for (uint32_t i = 0; i < manifest_.chunks.size(); ++i) {
    if (manifest_.chunks[i].file != "big.bin") continue;
    Record r = Ask(fd.get(), "SDRQ", i);
    ASSERT_EQ(r.status, 0u) << i;
    big += r.body;
  }
  EXPECT_EQ(big, testing::ReadAll(model_ / "big.bin"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(RelayWaited(), waited);  // never held back
  EXPECT_NE(metrics::Text().find("\nseedd_relay_upload_pace_bytes_per_second 0"),
            std::string::npos);
}

// --relay-upload-pacing capacity (the default): RelayPacing sums what every
// paced connection's receiver acknowledged (TCP_INFO) per window; a receiver
// that takes 4 MB/s over loopback (a 64 KiB receive buffer, read at that
// rate) is the narrowest link, and uploads are held just below it once the
// rate stops growing.
TEST(RelayPacingTest, CapacityPacingHoldsUploadsJustBelowWhatTheReceiverTakes) {
  testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "model.bin";
  WriteRandom(path, 16 << 20, 5);
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file.valid());
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int small = 64 * 1024;
  ASSERT_EQ(::setsockopt(listener.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  UniqueFd sender(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(sender.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  UniqueFd receiver(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(receiver.valid());
  ::fcntl(sender.get(), F_SETFL, ::fcntl(sender.get(), F_GETFL) | O_NONBLOCK);

  constexpr double kTakes = 4e6;  // bytes per second the receiver reads
  uint64_t received = 0;
  std::thread reader([&] {
    std::vector<char> buf(64 * 1024);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const ssize_t n = ::recv(receiver.get(), buf.data(), buf.size(), 0);
      if (n <= 0) return;
      received += static_cast<uint64_t>(n);
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::duration<double>(received / kTakes)));
    }
  });
  CapacityPolicy policy;
  policy.window = std::chrono::milliseconds(200);
  RelayPacing pacing(0, RelayPacingMode::kCapacity, {}, policy);
  uint64_t sent = 0;
  Conn conn(sender.get());
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  for (off_t at = 0; std::chrono::steady_clock::now() < end; at = (at + (256 << 10)) % (16 << 20)) {
    ASSERT_TRUE(pacing.SendFile(conn, file.get(), at, 256 << 10,
                                std::chrono::steady_clock::now() + std::chrono::seconds(10),
                                [&](uint64_t n) { sent += n; }));
  }
  const uint64_t paced = pacing.rate();
  ::shutdown(sender.get(), SHUT_WR);
  reader.join();
  pacing.Closed(conn);
  EXPECT_EQ(received, sent);
  // 95% of 4 MB/s, or 125% of it while a probe looks for more.
  EXPECT_GE(paced, 0.8 * kTakes);
  EXPECT_LE(paced, 1.3 * kTakes);
}

// A relay that holds the slot keeps it with requests sent ahead (here: a second
// connection's request waiting for its own send to end). A relay with nothing
// arriving is turned away once, then waits in line and is served before the
// holder's next request (before, it was told "busy" for as long as the holder
// kept asking: a late joiner starved).
TEST_F(SwarmTest, ARelayWithNothingArrivingWaitsInLineAheadOfTheHoldersNextRequest) {
  WriteRandom(model_ / "big.bin", 64 << 20, 3);
  WeightServerOptions options;
  options.upload_slots = 1;
  options.own_slot_wait = std::chrono::milliseconds(10000);
  auto server = Server(options);
  HostPort addr = ServeWeights(server);
  Json answer;
  UniqueFd open = testing::OpenData(addr, manifest_.root_digest, &answer);
  EXPECT_EQ(answer.value("wait_in_line", false), true);
  // The holder: one connection asks for every chunk of big.bin and reads none
  // (its send blocks mid-chunk, holding the slot); another has one request
  // waiting for that send to end, and asks on for 64 MiB that it does not read.
  UniqueFd holder = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  AskForAllOfBig(holder);
  WaitUntilBlocked(*server);
  UniqueFd holder_next = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  AskForAllOfBig(holder_next);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its request is waiting
  UniqueFd late = Announce(addr, manifest_.root_digest, "10.0.0.2:1");
  EXPECT_EQ(Ask(late.get(), "SDRW", 1).status, static_cast<uint32_t>(kChunkBusy));
  Record served;
  std::thread in_line([&] { served = Ask(late.get(), "SDRW", 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // in line now
  holder = UniqueFd();  // the holder's send ends (cut): the slot is free
  in_line.join();
  EXPECT_EQ(served.status, static_cast<uint32_t>(kChunkOk));
  EXPECT_EQ(served.body.size(), manifest_.chunks[1].length);
  EXPECT_EQ(server->waited_in_line(), 1u);
  // A request not marked waiting is still told "busy" (the holder's next took
  // the slot, and blocks once its socket buffers are full).
  WaitUntilBlocked(*server);
  UniqueFd other = Announce(addr, manifest_.root_digest, "10.0.0.3:1");
  EXPECT_EQ(Ask(other.get(), "SDRQ", 1).status, static_cast<uint32_t>(kChunkBusy));
  EXPECT_EQ(Ask(other.get(), "SDRQ", 1).status, static_cast<uint32_t>(kChunkBusy));
}

// A relaying fetcher whose every request is told "busy" (another relay holds the
// only slot) asks again marked waiting, and waits in line for the slot.
TEST_F(SwarmTest, AFetcherWithNothingArrivingAsksToWaitInLine) {
  WriteRandom(model_ / "big.bin", 64 << 20, 4);
  WeightServerOptions options;
  options.upload_slots = 1;
  options.own_slot_wait = std::chrono::milliseconds(10000);
  auto server = Server(options);
  HostPort addr = ServeWeights(server);
  UniqueFd holder = Announce(addr, manifest_.root_digest, "10.0.0.1:1");
  AskForAllOfBig(holder);
  WaitUntilBlocked(*server);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    holder = UniqueFd();
  });
  FetchOptions fetch = Options();
  fetch.relay = "127.0.0.1:10";
  FetchStats stats;
  Status st = FetchModel(manifest_, {addr}, dir_.path() / "out", fetch, &stats);
  release.join();
  ASSERT_OK(st);
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_GT(stats.answered_busy, 0u);
  EXPECT_GE(server->waited_in_line(), 1u);
}

// With relays named beyond its neighbour bound, a fetcher uses at most that
// many sources at once (none fails and rotation is off, so none is replaced).
TEST_F(SwarmTest, AFetcherKeepsABoundedSetOfNeighbours) {
  FetchStats stats;
  EXPECT_EQ(RelaysContacted(/*rotate_after=*/0, &stats), 2);  // relays sending nothing kept
  EXPECT_EQ(stats.peers.size(), 6u);                          // all known, as candidates
  EXPECT_TRUE(stats.sources_dropped.empty());
}

// Relays that send nothing (these hold nothing of the model) are retired, a
// few chunks at a time, for candidates not tried yet: the fetcher looks
// further than its first neighbours, blaming none of them.
TEST_F(SwarmTest, AFetcherReplacesRelayNeighboursThatSendNothing) {
  FetchStats stats;
  EXPECT_GT(RelaysContacted(/*rotate_after=*/4, &stats), 2);
  EXPECT_TRUE(stats.sources_dropped.empty());
}

// Bytes from a source of another zone count as across zones (the stats, the
// metric); from one of the fetcher's own zone, they do not; without a zone,
// nothing is counted.
TEST_F(SwarmTest, BytesFromASourceOfAnotherZoneAreCountedAcrossZones) {
  WriteRandom(model_ / "big.bin", 4 << 20, 11);
  WeightServerOptions zone_a;
  zone_a.zone = "a";
  HostPort origin = ServeWeights(Server(zone_a));
  auto counted = [] {
    const std::string text = metrics::Text();
    const std::string name = "\nseedd_pull_bytes_across_zones_total ";
    const size_t at = text.find(name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
  };
  const double before = counted();
  ASSERT_GE(before, 0.0);
  for (const char* zone : {"b", "a", ""}) {
    FetchOptions options = Options();
    options.relay = "127.0.0.1:10";
    options.zone = zone;
    FetchStats stats;
    const std::filesystem::path out = dir_.path() / ("out-" + std::string(zone));
    ASSERT_OK(FetchModel(manifest_, {origin}, out, options, &stats));
    EXPECT_TRUE(testing::SameTree(model_, out));
    if (std::string(zone) == "b") {
      EXPECT_EQ(stats.bytes_across_zones, stats.bytes_received);
      EXPECT_GE(stats.bytes_across_zones, manifest_.total_size);
      EXPECT_GT(stats.requests_across_owned, 0u);
      EXPECT_GE(counted() - before, static_cast<double>(stats.bytes_across_zones));
    } else {
      EXPECT_EQ(stats.bytes_across_zones, 0u) << "zone '" << zone << "'";
      EXPECT_EQ(stats.requests_across_owned + stats.requests_across_other, 0u);
    }
  }
}

// A state lists relays with their zones to a fetcher that said its zone, those
// of its zone first, and names only to one that did not.
TEST_F(SwarmTest, AStateListsRelaysOfTheAskersZoneFirstWithTheirZones) {
  auto server = Server(WeightServerOptions{});
  HostPort addr = ServeWeights(server);
  std::vector<UniqueFd> held;
  for (int i = 1; i <= 3; ++i) {
    held.push_back(
        Announce(addr, manifest_.root_digest, "10.0.1." + std::to_string(i) + ":1", "a"));
    held.push_back(
        Announce(addr, manifest_.root_digest, "10.0.2." + std::to_string(i) + ":1", "b"));
  }
  UniqueFd zoned = Announce(addr, manifest_.root_digest, "10.0.2.9:1", "b");
  std::vector<std::string> names = Listed(Ask(zoned.get(), "SDST", 0));
  ASSERT_EQ(names.size(), 6u);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string zone = i < 3 ? " b" : " a";
    EXPECT_EQ(names[i].substr(names[i].size() - 2), zone) << names[i];
  }
  UniqueFd plain = Announce(addr, manifest_.root_digest, "10.0.3.1:1");
  for (const std::string& name : Listed(Ask(plain.get(), "SDST", 0))) {
    EXPECT_EQ(name.find(' '), std::string::npos) << name;
  }
  // A zone that is not one is refused before anything is served.
  UniqueFd bad = testing::ConnectRaw(addr);
  testing::SendAll(bad.get(), EncodeJsonFrame(Json{{"kind", "weight_data"},
                                                   {"root_digest", manifest_.root_digest},
                                                   {"token", testing::kToken},
                                                   {"relay", "10.0.4.1:1"},
                                                   {"zone", "bad zone!"}}));
  Json refused = testing::ReadResponse(bad.get());
  EXPECT_EQ(refused["status"], "error");
  EXPECT_NE(refused.value("message", "").find("invalid zone"), std::string::npos) << refused;
}

// A fetcher that keeps one request at a time on a connection sends the next
// while half of the chunk before is still to arrive: it waits at the source
// and follows without a round trip.
TEST_F(SwarmTest, TheNextRequestGoesOutWhileAChunkIsStillArriving) {
  WriteRandom(model_ / "big.bin", 32 << 20, 7);
  auto origin = Server(WeightServerOptions{});
  HostPort origin_addr = ServeWeights(origin);
  FetchOptions options = Options();
  options.relay = "127.0.0.1:10";  // one chunk at a time per connection to a seed
  FetchStats stats;
  ASSERT_OK(FetchModel(manifest_, {origin_addr}, dir_.path() / "out", options, &stats));
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_GT(stats.requests_ahead, 0u);
  EXPECT_LE(stats.requests_ahead, stats.requests);
  EXPECT_EQ(stats.answered_busy, 0u);  // a fetcher's own next request is never busy
}

// A seed on loopback that sends the first half of each chunk, then holds the
// rest back until the next request arrives on the same connection (at most
// 1 s): it counts the chunks whose next request came while half was still to
// be sent.
class HalfHoldingSeed {
 public:
  HalfHoldingSeed(const Manifest& m, std::filesystem::path dir) : m_(m), dir_(std::move(dir)) {
    listener_ = testing::ListenLoopback(&port_);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HalfHoldingSeed() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  HostPort addr() const { return HostPort{"127.0.0.1", port_}; }
  int chunks_sent() const { return sent_.load(); }
  int followed_mid_chunk() const { return followed_.load(); }

 private:
  std::string Bytes(const ManifestChunk& c) const {
    std::ifstream in(dir_ / c.file, std::ios::binary);
    std::string bytes(c.length, '\0');
    in.seekg(static_cast<std::streamoff>(c.offset));
    in.read(bytes.data(), static_cast<std::streamsize>(c.length));
    return bytes;
  }
  // One connection at a time: the fetcher is given one per seed, and its watch.
  void Serve() {
    std::vector<std::thread> conns;
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;
      conns.emplace_back([this, fd] {
        Conn(fd);
        ::close(fd);
      });
    }
    for (auto& t : conns) t.join();
  }
  void Conn(int fd) {
    // The handshake: one JSON frame, the challenge answered, then "ok".
    Result<std::string> hello =
        ReadFrameBody(fd, 1 << 16, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    if (!hello.ok()) return;
    testing::AnswerDataChallenge(fd, *hello);
    testing::SendAll(fd, EncodeJsonFrame(Json{{"status", "ok"}, {"chunks", m_.chunks.size()}}));
    RequestRecord req;
    while (RecvAll(fd, req.data(), req.size()).ok()) {
      const std::string_view magic(req.data(), 4);
      const uint32_t index = RequestIndex(req);
      if (magic == kStateMagic) {
        const std::string bitmap((m_.chunks.size() + 7) / 8, '\xff');
        const HeaderRecord h = EncodeHeader(kStateMagic, 0, kChunkOk, 0, bitmap.size());
        testing::SendAll(fd, std::string(h.data(), h.size()) + bitmap);
        continue;
      }
      if (magic == kWatchMagic) {
        const HeaderRecord h = EncodeHeader(kHaveMagic, index, kChunkOk, kHaveComplete, 0);
        testing::SendAll(fd, std::string(h.data(), h.size()));
        continue;
      }
      if (index >= m_.chunks.size()) return;
      const std::string bytes = Bytes(m_.chunks[index]);
      const HeaderRecord h = EncodeHeader(kChunkMagic, index, kChunkOk, 0, bytes.size());
      const size_t half = bytes.size() / 2;
      testing::SendAll(fd, std::string(h.data(), h.size()) + bytes.substr(0, half));
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) == 1 && (p.revents & POLLIN) != 0) ++followed_;
      testing::SendAll(fd, bytes.substr(half));
      ++sent_;
    }
  }

  const Manifest m_;
  const std::filesystem::path dir_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<int> sent_{0};
  std::atomic<int> followed_{0};
  std::thread thread_;
};

// Chunks of at most a receive piece (256 KiB) too: the next request goes out
// once half of the chunk has arrived, not after the whole (before, a relay's
// connection idled a round trip between two such chunks).
TEST_F(SwarmTest, TheNextRequestGoesOutHalfwayThroughAChunkOfOnePiece) {
  const auto dir = dir_.path() / "small";
  std::filesystem::create_directories(dir);
  WriteRandom(dir / "w.bin", 6 * 256 * 1024, 3);
  BuildOptions build;
  build.chunk_size = 256 * 1024;
  Result<Manifest> m = BuildManifest("tiny", dir, build);
  ASSERT_OK(m);
  HalfHoldingSeed seed(*m, dir);
  FetchOptions options = Options();
  options.connections_per_source = 1;
  options.relay = "127.0.0.1:10";  // one chunk at a time per connection to a seed
  FetchStats stats;
  ASSERT_OK(FetchModel(*m, {seed.addr()}, dir_.path() / "out", options, &stats));
  EXPECT_TRUE(testing::SameTree(dir, dir_.path() / "out"));
  EXPECT_EQ(seed.chunks_sent(), 6);
  // Every chunk but the last was followed by the next request mid-chunk.
  EXPECT_EQ(seed.followed_mid_chunk(), 5);
}

// A relay that announced itself to this host's own server (it fetches from
// here) is taken as a neighbour: here the only seed has nothing yet, no state
// names the relay, and the pull completes from it alone.
TEST_F(SwarmTest, ARelayThatAnnouncedItselfHereBecomesANeighbour) {
  WriteRandom(model_ / "big.bin", 2 << 20, 9);
  auto relay = Server(WeightServerOptions{});
  HostPort relay_addr = ServeWeights(relay);
  auto seed = Server(WeightServerOptions{}, std::make_shared<ChunkSet>(manifest_.chunks.size()));
  HostPort seed_addr = ServeWeights(seed);
  FetchOptions options = Options();
  options.relay = "127.0.0.1:10";
  std::atomic<int> asked{0};
  options.announced = [&] {
    ++asked;
    return std::vector<std::string>{relay_addr.ToString(), "not an address"};
  };
  // Without the relay the pull fails at once: no source has the chunks.
  FetchStats stats;
  const Status st = FetchModel(manifest_, {seed_addr}, dir_.path() / "out", options, &stats);
  ASSERT_OK(st);
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_GE(asked.load(), 1);
  EXPECT_EQ(stats.bytes_from_peers, manifest_.total_size);
  EXPECT_EQ(stats.peers, std::vector<std::string>{relay_addr.ToString()});
}

// A relay whose connect never completes (its accept queue is full, so its
// host drops the SYNs) does not hold the pull's end: the pull ends once the
// other relay has sent every chunk, not when that connect times out (5 s).
// Before, a fleet's last hosts were ready 2-5 s after their last byte.
TEST_F(SwarmTest, APullEndsWithItsLastChunkNotWhenAConnectStillInProgressTimesOut) {
  WriteRandom(model_ / "big.bin", 2 << 20, 12);
  auto relay = Server(WeightServerOptions{});
  HostPort relay_addr = ServeWeights(relay);
  auto seed = Server(WeightServerOptions{}, std::make_shared<ChunkSet>(manifest_.chunks.size()));
  HostPort seed_addr = ServeWeights(seed);
  testing::DeafPort deaf;
  ASSERT_NE(deaf.port(), 0);
  const HostPort deaf_addr{"127.0.0.1", deaf.port()};
  Result<UniqueFd> hung = ConnectTcp(deaf_addr, std::chrono::milliseconds(300));
  ASSERT_FALSE(hung.ok()) << "the deaf listener accepted a connection: its queue is not full";
  ASSERT_EQ(hung.status().code(), StatusCode::kDeadlineExceeded) << hung.status().ToString();

  FetchOptions options = Options();
  options.relay = "127.0.0.1:10";
  options.announced = [&] {
    return std::vector<std::string>{deaf_addr.ToString(), relay_addr.ToString()};
  };
  FetchStats stats;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(FetchModel(manifest_, {seed_addr}, dir_.path() / "out", options, &stats));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_EQ(stats.bytes_from_peers, manifest_.total_size);
  EXPECT_LT(took, std::chrono::seconds(4))
      << "the pull waited for a connect to " << deaf_addr.ToString() << " to time out";
}

// A source that refuses connections for capacity (here: 2 data connections per
// host, and the fetcher wants 5) says when to try again; the fetcher does, on
// the connections it has meanwhile, and does not drop it (before, each refusal
// counted as a failure and the third dropped the only source). Past
// capacity_patience the refusals count again, so a pull still ends (before,
// the impatient pull raced its own two accepted connections, which under ASan
// sometimes finished the model first).
TEST_F(SwarmTest, AFullSourceIsTriedAgainNotDropped) {
  WriteRandom(model_ / "big.bin", 16 << 20, 8);
  auto origin = Server(WeightServerOptions{});
  TransportOptions narrow;
  narrow.max_streams_per_address = 2;
  HostPort origin_addr = ServeWeights(origin, narrow);
  FetchOptions options = Options();
  options.connections_per_source = 4;
  FetchStats stats;
  ASSERT_OK(FetchModel(manifest_, {origin_addr}, dir_.path() / "out", options, &stats));
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_GT(stats.refused_full, 0u);
  EXPECT_TRUE(stats.sources_dropped.empty());

  // Both places taken by other connections of this host: every connection of
  // an impatient fetcher is refused, and refusals count as failures at once.
  Json answer;
  UniqueFd held_a = testing::OpenData(origin_addr, manifest_.root_digest, &answer);
  UniqueFd held_b = testing::OpenData(origin_addr, manifest_.root_digest, &answer);
  options.capacity_patience = std::chrono::milliseconds(0);
  FetchStats impatient;
  Status st = FetchModel(manifest_, {origin_addr}, dir_.path() / "out2", options, &impatient);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(impatient.sources_dropped.size(), 1u);
}

// A relaying fetcher holds 3 connections to its seed (2 data, 1 watch) whatever
// connections_per_source says: the seed sends it one chunk at a time, and every
// fetcher of a fleet holds connections to it.
TEST_F(SwarmTest, ARelayingFetcherHoldsFewConnectionsToItsSeed) {
  WriteRandom(model_ / "big.bin", 64 << 20, 6);
  auto origin = Server(WeightServerOptions{});
  HostPort origin_addr = ServeWeights(origin);
  FetchOptions options = Options();
  options.connections_per_source = 4;
  options.relay = "127.0.0.1:10";
  std::atomic<bool> done{false};
  int most = 0;
  std::thread sampler([&] {
    while (!done) {
      most = std::max(most, origin->connections());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  Status st = FetchModel(manifest_, {origin_addr}, dir_.path() / "out", options);
  done = true;
  sampler.join();
  ASSERT_OK(st);
  EXPECT_TRUE(testing::SameTree(model_, dir_.path() / "out"));
  EXPECT_GE(most, 2);
  EXPECT_LE(most, 3);
}

}  // namespace
}  // namespace seedd
