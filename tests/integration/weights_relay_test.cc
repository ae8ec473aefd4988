// The weight data plane's serving side over loopback: a fetching server serves
// what it has verified and names who else has it, the weight_shards kind
// installs and serves what it adopts, relays spare the origin, and a lying
// relay is dropped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"
#include "seedd/tls.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"
#include "transport/client.h"
#include "wire/frame.h"

namespace seedd {
namespace {

using testing::Announce;
using testing::Ask;
using testing::kToken;
using testing::ReadAll;
using testing::Record;
using testing::SameTree;
using testing::WriteRandom;

class WeightsRelayTest : public testing::WeightsFixture {};

TEST_F(WeightsRelayTest, AFetchingServerServesOnlyWhatItHasAndSaysWhoElseHasIt) {
  HostPort origin = Serve(model_);
  Manifest m = ManifestFrom(origin);
  // A relay that has verified chunk 0 only, serving from its staging copy.
  auto partial = std::make_shared<ChunkSet>(m.chunks.size());
  partial->Set(0);
  auto relay = std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, model_, partial, {}, nullptr, nullptr}});
  HostPort relay_addr = ServeWeights(relay);
  UniqueFd fd = testing::ConnectRaw(relay_addr);
  testing::SendAll(fd.get(), EncodeJsonFrame(Json{{"kind", "weight_data"},
                                                  {"root_digest", m.root_digest},
                                                  {"token", kToken},
                                                  {"relay", "127.0.0.1:9"}}));
  ASSERT_EQ(testing::ReadResponse(fd.get())["status"], "ok");
  Record first = Ask(fd.get(), "SDRQ", 0);
  EXPECT_EQ(first.status, 0u);
  EXPECT_EQ(first.body, ReadAll(model_ / m.chunks[0].file).substr(0, m.chunks[0].length));
  EXPECT_EQ(Ask(fd.get(), "SDRQ", 1).status, 1u);  // not verified yet: not here
  Record state = Ask(fd.get(), "SDST", 0);
  ASSERT_EQ(state.status, 0u);
  ASSERT_EQ(state.body.size(), (m.chunks.size() + 7) / 8);  // the asker is not listed
  EXPECT_EQ(static_cast<unsigned char>(state.body[0]), 0x80);
  partial->Set(1);  // verified meanwhile: served from now on
  EXPECT_EQ(Ask(fd.get(), "SDRQ", 1).status, 0u);
  // A second fetcher sees the first one listed as a peer, and chunk 0 claimed by
  // it once it asked with "SDRN".
  partial->Set(2);
  EXPECT_EQ(Ask(fd.get(), "SDRN", 2).status, 0u);
  UniqueFd other = testing::ConnectRaw(relay_addr);
  testing::SendAll(other.get(), EncodeJsonFrame(Json{{"kind", "weight_data"},
                                                     {"root_digest", m.root_digest},
                                                     {"token", kToken}}));
  ASSERT_EQ(testing::ReadResponse(other.get())["status"], "ok");
  Record seen = Ask(other.get(), "SDST", 0);
  EXPECT_EQ(seen.body.substr((m.chunks.size() + 7) / 8), "127.0.0.1:9\n");
  Record claimed = Ask(other.get(), "SDRN", 2);
  EXPECT_EQ(claimed.status, 2u);
  EXPECT_LT(claimed.aux, 60000u);                     // sent moments ago
  EXPECT_EQ(Ask(other.get(), "SDRQ", 2).status, 0u);  // asked plainly, it is sent
  // Closing the server ends its open data connections instead of waiting for
  // them to go idle (60 s).
  const auto closing = std::chrono::steady_clock::now();
  transports_.back()->Close();
  EXPECT_LT(std::chrono::steady_clock::now() - closing, std::chrono::seconds(10));
  char byte;
  EXPECT_EQ(::recv(fd.get(), &byte, 1, 0), 0);
}

TEST_F(WeightsRelayTest, TheWeightShardsKindInstallsWhatItAdoptsAndServesIt) {
  HostPort origin = Serve(model_);
  auto server = std::make_shared<WeightServer>(std::vector<ServedModel>{});
  WeightInstallOptions install;
  install.cache_dir = dir_.path() / "target";
  install.sources = {origin};
  install.token = kToken;
  SeedablePtr kind = NewWeightShardsSeedable(server, install);
  SeedConfig config;
  config.source = origin;
  config.token = kToken;
  auto t = SeedTransport::Create({}, config);
  ASSERT_EQ((*t)->Adopt(*kind, Json{{"model", "tiny"}}), AdoptOutcome::kAdopted);
  const auto current = dir_.path() / "target" / "weights" / "tiny" / "current";
  EXPECT_TRUE(std::filesystem::is_symlink(current));
  EXPECT_TRUE(SameTree(model_, current));
  std::shared_ptr<const ServedModel> served = server->FindModel("tiny");
  ASSERT_NE(served, nullptr);
  EXPECT_EQ(served->available, nullptr);  // complete: served whole
  EXPECT_EQ(served->dir, std::filesystem::canonical(current));
  // A manifest of another model, or a name that is not one path component, is
  // refused before anything is written.
  Json manifest = ManifestFrom(origin).ToJson();
  Status other = kind->Install(Json{{"model", "other"}}, manifest);
  EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition) << other.ToString();
  EXPECT_NE(other.message().find("not 'other'"), std::string::npos) << other.message();
  for (const char* bad : {"../tiny", "a/b", "", "."}) {
    EXPECT_EQ(kind->Install(Json{{"model", bad}}, manifest).code(), StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "target" / "weights" / "other"));
  // A daemon with no source cannot install weights.
  SeedablePtr serving_only = NewWeightShardsSeedable(server);
  EXPECT_EQ(serving_only->Install(Json{{"model", "tiny"}}, manifest).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(WeightsRelayTest, ARelayThatOffersChunksItDoesNotServeIsDropped) {
  WriteRandom(model_ / "big.bin", 8 << 20, 11);
  Manifest m = ManifestFrom(Serve(model_));
  // The seed is itself still fetching and lacks the last chunk until the liar
  // was dropped: the fetch cannot finish without asking the liar for it, however
  // fast the seed sends the rest.
  const uint32_t last = static_cast<uint32_t>(m.chunks.size() - 1);
  auto partial = std::make_shared<ChunkSet>(m.chunks.size());
  for (uint32_t i = 0; i < last; ++i) partial->Set(i);
  HostPort origin = ServeWeights(std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, model_, partial, {}, nullptr, nullptr}}));
  // Its state says it has every chunk; every chunk request gets "not here".
  auto all = std::make_shared<ChunkSet>(m.chunks.size());
  for (size_t i = 0; i < m.chunks.size(); ++i) all->Set(i);
  auto liar = std::make_shared<WeightServer>(
      std::vector<ServedModel>{{m, dir_.path() / "nothing-here", all, {}, nullptr, nullptr}});
  HostPort liar_addr = ServeWeights(liar);
  Manifest listed = m;
  listed.sources = {liar_addr.ToString()};  // as a source's manifest would list a relay
  testing::LogCapture log;
  std::jthread seed_catches_up([&](std::stop_token stop) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stop.stop_requested() && std::chrono::steady_clock::now() < give_up &&
           !log.Contains(spdlog::level::warn, "dropping relay " + liar_addr.ToString())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    partial->Set(last);
  });
  FetchStats stats;
  Status s = FetchModel(listed, {origin}, dir_.path() / "dest", Options(), &stats);
  ASSERT_OK(s);
  EXPECT_TRUE(SameTree(model_, dir_.path() / "dest"));
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{liar_addr.ToString()});
  EXPECT_EQ(stats.bytes_from_peers, 0u);
}

TEST_F(WeightsRelayTest, RelaysSpareTheOrigin) {
  WriteRandom(model_ / "big.bin", 24 << 20, 7);
  // The origin: a server whose bytes are counted.
  BuildOptions build;
  build.chunk_size = 256 * 1024;
  Result<Manifest> m = BuildManifest("tiny", model_, build);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto origin = std::make_shared<WeightServer>(
      std::vector<ServedModel>{{*m, model_, nullptr, {}, nullptr, nullptr}});
  HostPort origin_addr = ServeWeights(origin);
  // Three daemons pull the model at once, each relaying what it has verified.
  std::vector<std::unique_ptr<Daemon>> targets;
  for (int i = 0; i < 3; ++i) {
    DaemonOptions o;
    o.seed.listen = HostPort{"127.0.0.1", 0};
    o.seed.source = origin_addr;
    o.seed.token = kToken;
    o.cache_dir = dir_.path() / ("target" + std::to_string(i));
    o.pulls = {"tiny"};
    auto d = Daemon::Create(o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    targets.push_back(std::move(*d));
  }
  std::vector<Status> results(targets.size());
  std::vector<std::thread> starts;
  for (size_t i = 0; i < targets.size(); ++i) {
    starts.emplace_back([&, i] { results[i] = targets[i]->Start().status(); });
  }
  for (auto& s : starts) s.join();
  for (size_t i = 0; i < targets.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].ToString();
    EXPECT_TRUE(SameTree(
        model_, dir_.path() / ("target" + std::to_string(i)) / "weights" / "tiny" / "current"));
  }
  // Without relays the origin would have sent the model three times.
  EXPECT_LE(origin->bytes_served(), m->total_size * 3 / 2)
      << origin->bytes_served() << " bytes served for a model of " << m->total_size;
  EXPECT_GE(origin->bytes_served(), m->total_size);
  for (auto& d : targets) d->Stop();
}

TEST_F(WeightsRelayTest, AManifestIsSerializedOncePerVersionHoweverOftenItIsAskedFor) {
  Result<IndexedModel> index = IndexModel("tiny", model_, BuildOptions{});
  ASSERT_OK(index);
  const std::string root = index->manifest.root_digest;
  auto server =
      std::make_shared<WeightServer>(std::vector<ServedModel>{ServeIndexed(std::move(*index))});
  HostPort addr = ServeWeights(server);
  UniqueFd relay = Announce(addr, root, "127.0.0.1:4321");
  for (int i = 0; i < 50; ++i) {
    Manifest m = ManifestFrom(addr);  // parsed and checked: the text is a valid manifest
    EXPECT_EQ(m.root_digest, root);
    EXPECT_EQ(m.sources, std::vector<std::string>{"127.0.0.1:4321"});  // spliced in per request
  }
  EXPECT_EQ(server->manifests_serialized(), 1u);
  WriteRandom(model_ / "blob.bin", 1000, 9);  // a new version
  Result<IndexedModel> next = IndexModel("tiny", model_, BuildOptions{});
  ASSERT_OK(next);
  server->Publish(ServeIndexed(std::move(*next)));
  EXPECT_NE(ManifestFrom(addr).root_digest, root);
  EXPECT_EQ(server->manifests_serialized(), 2u);
}

TEST_F(WeightsRelayTest, TheRelaysASwarmRemembersAreBoundedAndExpire) {
  Result<IndexedModel> index = IndexModel("tiny", model_, BuildOptions{});
  ASSERT_OK(index);
  const std::string root = index->manifest.root_digest;
  WeightServerOptions options;
  options.max_relays = 3;
  options.relay_ttl = std::chrono::milliseconds(300);
  auto server = std::make_shared<WeightServer>(
      std::vector<ServedModel>{ServeIndexed(std::move(*index))}, options);
  HostPort addr = ServeWeights(server);
  std::vector<UniqueFd> held;
  for (int i = 1; i <= 4; ++i)
    held.push_back(Announce(addr, root, "10.0.0." + std::to_string(i) + ":1"));
  EXPECT_EQ(server->Peers(root, ""),
            (std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"}));
  // Silent for longer than the TTL: forgotten, and their places go to new relays.
  ASSERT_TRUE(testing::WaitUntil([&] { return server->Peers(root, "").empty(); }));
  held.push_back(Announce(addr, root, "10.0.0.9:1"));
  EXPECT_EQ(server->Peers(root, ""), std::vector<std::string>{"10.0.0.9:1"});
}

}  // namespace
}  // namespace seedd
