#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "kinds/autotune/cpu_gemm_runner.h"
#include "kinds/autotune/flashinfer_cache.h"
#include "kinds/autotune/gemm.h"
#include "kinds/autotune/table.h"
#include "seedd/json_text.h"
#include "support/test_util.h"

namespace seedd {
namespace {

const char kHash[] = "00112233445566778899aabbccddeeff";

std::string Fixture() {
  std::ifstream in(SEEDD_SOURCE_DIR "/tests/fixtures/flashinfer_autotune_table.json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AutotuneTable, LoadsTheFlashInferFixtureAndChecksItsGeneration) {
  auto table = AutotuneTable::Parse(Fixture());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table->metadata)["gpu"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(table->entries.size(), 3u);
  EXPECT_EQ(table->entries.at("('trtllm_moe', 'TrtllmGenMoERunner', ((256, 7168),), (8,))"),
            Json::array({"TrtllmGenMoERunner", 41}));
  // The generation Python computed for this content.
  EXPECT_EQ(table->ToJson()["_generation"],
            "38228553bccdbd2ae8a85d10f30eab1525418418d941fe63b2e09052976cbb98");
}

TEST(AutotuneTable, WritesMetadataFirstEntriesSortedAndGenerationLast) {
  auto table = AutotuneTable::Parse(Fixture());
  ASSERT_TRUE(table.ok());
  std::string text = table->Serialize();
  auto pos = [&](const std::string& s) { return text.find("\"" + s + "\""); };
  EXPECT_LT(pos("_metadata"), pos("_records"));
  EXPECT_LT(pos("_records"),
            pos("('fp8_gemm', 'CutlassFp8GemmRunner', ((1, 4096), (4096, 4096)), ())"));
  EXPECT_LT(pos("('fp8_gemm', 'CutlassFp8GemmRunner', ((8, 4096), (4096, 4096)), ())"),
            pos("('trtllm_moe', 'TrtllmGenMoERunner', ((256, 7168),), (8,))"));
  EXPECT_LT(pos("('trtllm_moe', 'TrtllmGenMoERunner', ((256, 7168),), (8,))"), pos("_generation"));
  auto again = AutotuneTable::Parse(text);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), table->ToJson());
}

TEST(AutotuneTable, RejectsATamperedGenerationAndAcceptsNoMetadata) {
  auto j = ParseJson(Fixture());
  (*j)["('fp8_gemm', 'CutlassFp8GemmRunner', ((1, 4096), (4096, 4096)), ())"][1] = 13;
  auto r = AutotuneTable::FromJson(*j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "autotune table _generation does not match its content");
  EXPECT_TRUE(AutotuneTable::FromJson(Json{{"('op', 'r', (), ())", {"r", 0}}}).ok());
}

TEST(ClassifyMetadata, FollowsFlashInfersRule) {
  Json local = {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}, {"e", "5"}, {"f", "6"}, {"g", "7"}};
  Json saved = {{"a", "1"},    {"b", "*"}, {"d", nullptr},     {"e", "unknown"},
                {"f", "None"}, {"g", "8"}, {"only_saved", "x"}};
  auto m = ClassifyMetadata(saved, local);
  EXPECT_EQ(m.hard.size(), 1u);
  EXPECT_EQ(m.hard.count("g"), 1u);  // different
  EXPECT_EQ(m.soft.size(), 4u);      // c missing, d null, e "unknown", f "None"
  for (const char* k : {"c", "d", "e", "f"}) EXPECT_EQ(m.soft.count(k), 1u) << k;
  EXPECT_EQ(m.Describe(),
            "c: remote=None vs local=3, d: remote=None vs local=4, e: remote=unknown vs local=5, "
            "f: remote=None vs local=6, g: remote=8 vs local=7");
  // A saved _metadata that is not an object counts as empty: every key is soft.
  auto n = ClassifyMetadata(Json::array(), Json{{"a", "1"}});
  EXPECT_TRUE(n.hard.empty());
  EXPECT_EQ(n.soft.size(), 1u);
  EXPECT_TRUE(ClassifyMetadata(Json{{"a", "1"}}, Json{{"a", "1"}}).empty());
}

TEST(FlashInferFilename, NamesTheRanksTable) {
  EXPECT_EQ(FlashInferFilename(0, 3), "autotune_configs_dp0_rank3.json");
}

class FlashInferTest : public ::testing::Test {
 protected:
  std::unique_ptr<FlashInferWarmupCache> Make(
      std::vector<std::shared_ptr<ArtifactStore>> shared = {},
      std::string shapes = "16x16x16,24x8x32") {
    FlashInferOptions o;
    o.autotune_root = dir_.path() / ("root" + std::to_string(counter_++));
    o.config_hash = kHash;
    auto runner = NewCpuGemmRunner(*ParseGemmShapes(shapes));
    runner_ = runner.get();
    return std::make_unique<FlashInferWarmupCache>(o, std::move(runner), std::move(shared));
  }
  std::string ResolveError(const FlashInferWarmupCache& c, Json req) {
    auto r = c.Resolve(req);
    return r.ok() ? (r->has_value() ? "ok" : "miss") : r.status().message();
  }
  Json Table(Json metadata) {
    AutotuneTable t;
    if (!metadata.is_null()) t.metadata = metadata;
    t.entries["('sgemm', 'cpu_gemm', ((16, 16), (16, 16)), ())"] = Json::array({"cpu_gemm", 1});
    return t.ToJson();
  }
  testing::TempDir dir_;
  int counter_ = 0;
  CpuGemmRunner* runner_ = nullptr;
};

TEST_F(FlashInferTest, ValidatesTheKeyFieldsBeforeTouchingTheStore) {
  auto c = Make();
  Json ok = {{"config_hash", kHash}, {"dp_rank", 0}, {"rank", 0}};
  EXPECT_EQ(ResolveError(*c, ok), "miss");
  for (const Json& bad_hash : {Json("XYZ"), Json("../../../etc/passwd"), Json(std::string(15, 'a')),
                               Json(std::string(129, 'a')), Json(7), Json()}) {
    Json r = ok;
    r["config_hash"] = bad_hash;
    EXPECT_EQ(ResolveError(*c, r), "invalid config_hash") << bad_hash;
  }
  Json r = ok;
  r.erase("dp_rank");
  EXPECT_EQ(ResolveError(*c, r), "missing field 'dp_rank'");
  r = ok;
  r.erase("rank");
  EXPECT_EQ(ResolveError(*c, r), "missing field 'rank'");
  for (const Json& bad : {Json(-1), Json(1.5), Json("0"), Json::array(), Json()}) {
    r = ok;
    r["rank"] = bad;
    EXPECT_EQ(ResolveError(*c, r), "rank must be a non-negative integer") << bad;
  }
  // Garbage but well-formed ranks name a table nobody has: a miss, not a crash.
  r = ok;
  r["dp_rank"] = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(ResolveError(*c, r), "miss");
}

TEST_F(FlashInferTest, ResolvesTheStoredTableAsOneFileEntry) {
  auto c = Make();
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp1_rank2.json");
  ASSERT_TRUE(c->disk().Put(key, DumpJson(Table(nullptr))).ok());
  auto r = c->Resolve(Json{{"config_hash", kHash}, {"dp_rank", 1}, {"rank", 2}});
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ(**r, Json({{"autotune_configs_dp1_rank2.json", Table(nullptr)}}));
}

TEST_F(FlashInferTest, ValidatePayloadRejectsWithFlashInfersWords) {
  auto c = Make();
  auto reason = [&](const Json& p) {
    auto r = c->ValidatePayload(p);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  const std::string f = "autotune_configs_dp0_rank0.json";
  EXPECT_EQ(reason(Json::object()), "expected exactly one autotune table");
  EXPECT_EQ(reason(Json{{f, Table(nullptr)}, {"autotune_configs_dp0_rank1.json", Table(nullptr)}}),
            "expected exactly one autotune table");
  EXPECT_EQ(reason(Json::array()), "expected exactly one autotune table");
  EXPECT_EQ(reason(Json{{f, Json::array()}}), "autotune table must be a JSON object");
  EXPECT_EQ(reason(Json{{"../../evil.json", Table(nullptr)}}), "unexpected file '../../evil.json'");
  EXPECT_EQ(reason(Json{{"autotune_configs_dpX_rank0.json", Table(nullptr)}}),
            "unexpected file 'autotune_configs_dpX_rank0.json'");
  EXPECT_EQ(reason(Json{{f, Table(nullptr)}}), "accepted");  // no _metadata
  EXPECT_EQ(reason(Json{{f, Table(runner_->EnvironmentMetadata())}}), "accepted");
  Json other = runner_->EnvironmentMetadata();
  other["cpu"] = "Some Other CPU";
  EXPECT_EQ(reason(Json{{f, Table(other)}}),
            "autotune table environment mismatch: cpu: remote=Some Other CPU vs local=" +
                runner_->EnvironmentMetadata()["cpu"].get<std::string>());
}

TEST_F(FlashInferTest, InstallWritesTheTableUnderThisRanksKey) {
  auto c = Make();
  Json payload = {{"autotune_configs_dp0_rank0.json", Table(nullptr)}};
  ASSERT_TRUE(c->Install(c->RankContext(), payload).ok());
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank0.json");
  auto stored = c->disk().Get(key);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(AutotuneTable::Parse(**stored)->ToJson(), Table(nullptr));
}

TEST(Gemm, EveryTacticComputesWhatTheNaiveLoopComputes) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto [m, n, k] : {std::tuple{37, 29, 53}, std::tuple{64, 64, 64}, std::tuple{1, 300, 7}}) {
    std::vector<float> a(m * k), b(k * n), want(m * n), got(m * n);
    for (auto& v : a) v = d(rng);
    for (auto& v : b) v = d(rng);
    RunGemm(GemmTactics()[0], m, n, k, a.data(), b.data(), want.data());
    for (const auto& t : GemmTactics()) {
      RunGemm(t, m, n, k, a.data(), b.data(), got.data());
      for (int i = 0; i < m * n; ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << t.Name();
    }
  }
}

TEST_F(FlashInferTest, CpuGemmLoadsACompatibleTableWithoutTimingAnyKernel) {
  auto c = Make();
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank0.json");
  ASSERT_TRUE(runner_->Run(c->disk(), key, {}).ok());
  EXPECT_EQ(runner_->kernels_timed(), 2 * static_cast<int>(GemmTactics().size()));
  auto second = NewCpuGemmRunner(*ParseGemmShapes("16x16x16,24x8x32"));
  ASSERT_TRUE(second->Run(c->disk(), key, {}).ok());
  EXPECT_EQ(second->kernels_timed(), 0);
  // A new shape: only it is tuned.
  auto third = NewCpuGemmRunner(*ParseGemmShapes("16x16x16,24x8x32,8x8x8"));
  ASSERT_TRUE(third->Run(c->disk(), key, {}).ok());
  EXPECT_EQ(third->kernels_timed(), static_cast<int>(GemmTactics().size()));
}

TEST_F(FlashInferTest, AStopRequestEndsTheCpuGemmPassWithNothingStored) {
  auto c = Make();
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank0.json");
  std::atomic<bool> stop{true};
  Status s = runner_->Run(c->disk(), key, {0, 0, &stop});
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_EQ(runner_->kernels_timed(), 0);
  EXPECT_FALSE(c->disk().Get(key)->has_value());
}

TEST_F(FlashInferTest, CpuGemmRetunesATableFromAnotherEnvironment) {
  auto c = Make();
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank0.json");
  AutotuneTable foreign;
  foreign.metadata = Json{{"cpu", "Another CPU"}, {"isa", "neon"}};
  foreign.entries[CpuGemmRunner::EntryKey({16, 16, 16})] = Json::array({"cpu_gemm", 0});
  ASSERT_TRUE(c->disk().Put(key, foreign.Serialize()).ok());
  auto runner = NewCpuGemmRunner(*ParseGemmShapes("16x16x16"));
  ASSERT_TRUE(runner->Run(c->disk(), key, {}).ok());
  EXPECT_EQ(runner->kernels_timed(), static_cast<int>(GemmTactics().size()));
  auto stored = AutotuneTable::Parse(**c->disk().Get(key));
  EXPECT_EQ((*stored->metadata)["cpu"], runner->EnvironmentMetadata()["cpu"]);
}

TEST(ParseGemmShapes, AcceptsListsAndRejectsGarbage) {
  auto s = ParseGemmShapes("1x2x3,4096x1x1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[1].m, 4096);
  for (const char* bad : {"", "1x2", "0x1x1", "1x1x4097", "axbxc", "1x2x3,", "1x2x3x4"}) {
    EXPECT_FALSE(ParseGemmShapes(bad).ok()) << bad;
  }
}

TEST_F(FlashInferTest, TheCommandRunnerStoresTheTableTheProgramLeaves) {
  auto c = Make();
  const auto script = dir_.path() / "tune.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                           "printf '{\"_metadata\": {\"gpu\": \"test\"}, \"rank\": \"%s\"}' "
                           "\"$SEEDD_RANK\" > \"$SEEDD_AUTOTUNE_TABLE\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto runner = NewCommandRunner(script.string());
  ASSERT_TRUE(runner.ok());
  auto key = *ArtifactKey::Make("flashinfer_autotune", kHash, "autotune_configs_dp0_rank5.json");
  ASSERT_TRUE((*runner)->Run(c->disk(), key, {0, 5}).ok());
  auto stored = ParseJson(**c->disk().Get(key));
  EXPECT_EQ((*stored)["rank"], "5");
  auto failing = NewCommandRunner("/bin/false");
  EXPECT_FALSE((*failing)->Run(c->disk(), key, {}).ok());
}

}  // namespace
}  // namespace seedd
