// The flashinfer_autotune warmup sequence over real loopback transports:
// local disk, then shared stores, then a peer daemon, then the autotune pass,
// then publishing to every store.
#include <gtest/gtest.h>

#include "kinds/autotune/cpu_gemm_runner.h"
#include "kinds/autotune/flashinfer_cache.h"
#include "kinds/autotune/table.h"
#include "seedd/json_text.h"
#include "support/test_util.h"

namespace seedd {
namespace {

const char kHash[] = "00112233445566778899aabbccddeeff";
const char kToken[] = "warmup-token-2d9a";
const char kShapes[] = "16x16x16,24x8x32";

class WarmupTest : public ::testing::Test {
 protected:
  std::shared_ptr<FlashInferWarmupCache> Cache(std::vector<std::shared_ptr<ArtifactStore>> shared,
                                               CpuGemmRunner** runner_out = nullptr) {
    FlashInferOptions o;
    o.autotune_root = dir_.path() / ("root" + std::to_string(counter_++));
    o.config_hash = kHash;
    auto runner = NewCpuGemmRunner(*ParseGemmShapes(kShapes));
    if (runner_out != nullptr) *runner_out = runner.get();
    return std::make_shared<FlashInferWarmupCache>(o, std::move(runner), std::move(shared));
  }

  // A warm peer daemon serving `cache`; returns its client-side transport.
  std::unique_ptr<SeedTransport> PeerServing(std::shared_ptr<FlashInferWarmupCache> cache) {
    SeedConfig config;
    config.listen = HostPort{"127.0.0.1", 0};
    config.token = kToken;
    auto server = SeedTransport::Create({cache}, config);
    auto bound = (*server)->StartListener();
    servers_.push_back(std::move(*server));
    return ClientOf(**bound);
  }
  std::unique_ptr<SeedTransport> ClientOf(std::optional<HostPort> source) {
    SeedConfig config;
    config.source = std::move(source);
    config.token = kToken;
    auto t = SeedTransport::Create({}, config);
    return std::move(t).value();
  }
  static ArtifactKey Key() {
    return *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank0.json");
  }
  // A valid table for this machine, marked so its origin can be told.
  std::string MarkedTable(const std::string& mark, bool valid = true) {
    CpuGemmRunner* r = nullptr;
    auto c = Cache({}, &r);
    AutotuneTable t;
    t.metadata = r->EnvironmentMetadata();
    if (!valid) (*t.metadata)["cpu"] = "a different CPU";
    t.records = Json{{"origin", mark}};
    const std::vector<GemmShape> shapes = *ParseGemmShapes(kShapes);
    for (const GemmShape& shape : shapes) {
      t.entries[CpuGemmRunner::EntryKey(shape)] = Json::array({"cpu_gemm", 1});
    }
    return t.Serialize();
  }
  static std::string Origin(ArtifactStore& store) {
    auto data = store.Get(Key());
    if (!data.ok() || !data->has_value()) return "none";
    auto t = AutotuneTable::Parse(**data);
    return t.ok() && t->records.has_value() ? t->records->value("origin", "tuned") : "?";
  }

  testing::TempDir dir_;
  int counter_ = 0;
  std::vector<std::unique_ptr<SeedTransport>> servers_;
};

TEST_F(WarmupTest, ASharedStoreIsAdoptedBeforeThePeerIsAsked) {
  auto shared = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  ASSERT_TRUE(shared->Put(Key(), MarkedTable("shared")).ok());
  auto peer = Cache({});
  ASSERT_TRUE(peer->disk().Put(Key(), MarkedTable("peer")).ok());
  auto client = PeerServing(peer);
  CpuGemmRunner* runner = nullptr;
  auto cold = Cache({shared}, &runner);
  testing::LogCapture logs;
  auto report = cold->Warmup(*client);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->source, "shared store");
  EXPECT_EQ(Origin(cold->disk()), "shared");
  EXPECT_EQ(runner->kernels_timed(), 0);  // the adopted table covered every shape
  EXPECT_FALSE(logs.Contains(spdlog::level::info, "Adopted remote flashinfer_autotune seed"));
  EXPECT_TRUE(logs.Contains(spdlog::level::info,
                            "Adopted the FlashInfer autotune table from a shared store"));
}

TEST_F(WarmupTest, ThePeerIsAskedOnlyWhenNoSharedStoreHasTheTable) {
  auto shared = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  auto peer = Cache({});
  ASSERT_TRUE(peer->disk().Put(Key(), MarkedTable("peer")).ok());
  auto client = PeerServing(peer);
  CpuGemmRunner* runner = nullptr;
  auto cold = Cache({shared}, &runner);
  auto report = cold->Warmup(*client);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "peer");
  EXPECT_EQ(Origin(cold->disk()), "peer");
  EXPECT_EQ(runner->kernels_timed(), 0);
  // Published: the shared store now holds this rank's table.
  EXPECT_EQ(Origin(*shared), "peer");
}

TEST_F(WarmupTest, TheLocalDiskSkipsBothSharedStoresAndThePeer) {
  auto shared = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  ASSERT_TRUE(shared->Put(Key(), MarkedTable("shared")).ok());
  auto peer = Cache({});
  ASSERT_TRUE(peer->disk().Put(Key(), MarkedTable("peer")).ok());
  auto client = PeerServing(peer);
  auto cold = Cache({shared});
  ASSERT_TRUE(cold->disk().Put(Key(), MarkedTable("local")).ok());
  testing::LogCapture logs;
  auto report = cold->Warmup(*client);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "local disk");
  EXPECT_EQ(Origin(cold->disk()), "local");
  EXPECT_EQ(Origin(*shared), "local");  // published over the shared copy
  EXPECT_FALSE(logs.Contains(spdlog::level::info, "Adopted")) << logs.Dump();
}

TEST_F(WarmupTest, AnInvalidSharedTableIsRejectedAndThePeerTried) {
  auto shared = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  ASSERT_TRUE(shared->Put(Key(), MarkedTable("shared", /*valid=*/false)).ok());
  auto peer = Cache({});
  ASSERT_TRUE(peer->disk().Put(Key(), MarkedTable("peer")).ok());
  auto client = PeerServing(peer);
  auto cold = Cache({shared});
  testing::LogCapture logs;
  auto report = cold->Warmup(*client);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "peer");
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Rejecting the shared autotune table "
                            "flashinfer_autotune/" +
                                std::string(kHash) +
                                "/autotune_configs_dp0_rank0.json: "
                                "autotune table environment mismatch: cpu:"))
      << logs.Dump();
}

TEST_F(WarmupTest, APeerTableFromAnotherEnvironmentIsRejectedAndTuned) {
  auto peer = Cache({});
  ASSERT_TRUE(peer->disk().Put(Key(), MarkedTable("peer", /*valid=*/false)).ok());
  auto client = PeerServing(peer);
  CpuGemmRunner* runner = nullptr;
  auto cold = Cache({}, &runner);
  testing::LogCapture logs;
  auto report = cold->Warmup(*client);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "tuned");
  EXPECT_GT(runner->kernels_timed(), 0);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn,
                            "Rejected the remote flashinfer_autotune seed; using the local path: "
                            "autotune table environment mismatch: cpu: remote=a different CPU"))
      << logs.Dump();
}

TEST_F(WarmupTest, AColdDaemonWithoutSourcesTunesAndPublishesToEveryStore) {
  auto a = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  auto b = std::shared_ptr<ArtifactStore>(NewMemoryArtifactStore());
  CpuGemmRunner* runner = nullptr;
  auto cold = Cache({a, b}, &runner);
  auto report = cold->Warmup(*ClientOf(std::nullopt));
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "tuned");
  EXPECT_GT(runner->kernels_timed(), 0);
  for (ArtifactStore* s : {a.get(), b.get(), &cold->disk()}) EXPECT_EQ(Origin(*s), "tuned");
}

TEST_F(WarmupTest, TheGateSkipsEverything) {
  FlashInferOptions o;
  o.autotune_root = dir_.path() / "gated";
  o.config_hash = kHash;
  o.enabled = false;
  auto runner = NewCpuGemmRunner(*ParseGemmShapes(kShapes));
  CpuGemmRunner* r = runner.get();
  FlashInferWarmupCache cache(o, std::move(runner), {});
  auto report = cache.Warmup(*ClientOf(std::nullopt));
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->source, "disabled");
  EXPECT_EQ(r->kernels_timed(), 0);
}

}  // namespace
}  // namespace seedd
