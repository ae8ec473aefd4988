// Compile caches between real seedd processes: a cold daemon's Triton cache
// seeded from a warm peer, from its own disk store and from a shared store,
// each then published; a key factor that differs leaves the cache cold and
// says why; seedctl fetch --kind compile_cache with a vLLM-shaped cache.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "support/daemon_process.h"
#include "support/weights_fixture.h"

namespace seedd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kKey = "5e1f0a2b3c4d5e6f708192a3b4c5d6e7";

void Write(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

class CompileCacheTest : public DaemonProcessTest {
 protected:
  void SetUp() override {
    DaemonProcessTest::SetUp();
    // ~/.triton/cache: a directory per kernel hash.
    for (const std::string hash : {"0c5d1e2f3a", "7b8c9d0e1f"}) {
      WriteRandom(warm() / hash / "fused_attention.cubin", 64 * 1024, hash[0]);
      Write(warm() / hash / "fused_attention.ptx", "// ptx " + hash);
      Write(warm() / hash / "fused_attention.json", "{\"num_warps\": 8}");
    }
  }
  fs::path warm() const { return dir_.path() / "warm-triton"; }
  std::vector<std::string> Warmup(const fs::path& dir, const std::string& cuda = "12.8") const {
    return {"--warmup",      "compile_cache:triton=" + dir.string(),
            "--compile-key", kKey,
            "--factor",      "cuda=" + cuda,
            "--factor",      "triton=3.1.0",
            "--log-level",   "info"};
  }
  static std::string Stop(std::unique_ptr<Process>& p) {
    p->Signal(SIGTERM);
    p->Wait(std::chrono::seconds(20));
    return p->Stderr();
  }
};

TEST_F(CompileCacheTest, AColdDaemonSeedsItsCacheFromAPeerThenItsDiskThenPublishesIt) {
  std::string warm_addr, cold_addr;
  auto warm_daemon = StartDaemon(Warmup(warm()), &warm_addr, dir_.path() / "a");
  const fs::path cold = dir_.path() / "cold-triton";
  auto cold_daemon = StartDaemon(
      [&] {
        auto args = Warmup(cold);
        args.insert(args.end(), {"--source", warm_addr});
        return args;
      }(),
      &cold_addr, dir_.path() / "b");
  EXPECT_TRUE(SameTree(warm(), cold));
  const std::string log = Stop(cold_daemon);
  EXPECT_TRUE(Has(log, "Adopted remote compile_cache seed")) << log;
  EXPECT_TRUE(Has(log, "compile_cache:triton: peer (6 files installed")) << log;
  EXPECT_TRUE(
      fs::exists(dir_.path() / "b" / "compile_cache" / "triton" / kKey / "compile_cache.json"));
  EXPECT_TRUE(Has(Stop(warm_daemon), "compile_cache:triton: warm already")) << log;

  // The cache emptied, no peer: the bundle this daemon published comes back.
  fs::remove_all(cold);
  std::string again_addr;
  auto again = StartDaemon(Warmup(cold), &again_addr, dir_.path() / "b");
  EXPECT_TRUE(SameTree(warm(), cold));
  EXPECT_TRUE(Has(Stop(again), "compile_cache:triton: local disk (6 files installed"));
}

TEST_F(CompileCacheTest, ASharedStoreSeedsAColdCacheWithoutAPeer) {
  fs::create_directories(dir_.path() / "shared");  // a mounted share
  const std::string store = "file://" + (dir_.path() / "shared").string();
  std::string addr;
  auto args = Warmup(warm());
  args.insert(args.end(), {"--store", store});
  auto publisher = StartDaemon(args, &addr, dir_.path() / "a");
  Stop(publisher);
  const fs::path cold = dir_.path() / "cold-triton";
  args = Warmup(cold);
  args.insert(args.end(), {"--store", store});
  auto cold_daemon = StartDaemon(args, &addr, dir_.path() / "b");
  EXPECT_TRUE(SameTree(warm(), cold));
  const std::string log = Stop(cold_daemon);
  EXPECT_TRUE(Has(log, "compile_cache:triton: shared store")) << log;
}

TEST_F(CompileCacheTest, AKeyFactorThatDiffersLeavesTheCacheColdAndSaysWhich) {
  std::string warm_addr, cold_addr;
  auto warm_daemon = StartDaemon(Warmup(warm()), &warm_addr, dir_.path() / "a");
  const fs::path cold = dir_.path() / "cold-triton";
  auto args = Warmup(cold, "12.4");
  args.insert(args.end(), {"--source", warm_addr});
  auto cold_daemon = StartDaemon(args, &cold_addr, dir_.path() / "b");
  const std::string log = Stop(cold_daemon);
  EXPECT_TRUE(Has(log,
                  "Rejected the remote compile_cache seed; using the local path: compile cache "
                  "environment mismatch: cuda: remote=12.8 vs local=12.4"))
      << log;
  EXPECT_TRUE(Has(log, "compile_cache:triton: none")) << log;
  EXPECT_TRUE(!fs::exists(cold) || fs::is_empty(cold));
  Stop(warm_daemon);
}

TEST_F(CompileCacheTest, SeedctlFetchesAVllmCacheKeepingFilesThatAreNewer) {
  // vLLM's torch.compile cache: per hash and rank, the graph and Inductor's output.
  const fs::path vllm = dir_.path() / "warm-vllm";
  const fs::path rank = vllm / "torch_compile_cache" / "a1b2c3d4e5" / "rank_0_0" / "backbone";
  Write(rank / "computation_graph.py", "def forward(x): return x\n");
  Write(rank / "vllm_compile_cache.py", "{(1, 8192): 'artifact_shape_1_8192'}\n");
  WriteRandom(rank / "inductor_cache" / "fx" / "ab" / "fxgraph-ab12.pt", 200 * 1024, 7);
  std::string addr;
  auto daemon = StartDaemon({"--warmup", "compile_cache:vllm=" + vllm.string(), "--compile-key",
                             kKey, "--factor", "torch=2.5.1"},
                            &addr, dir_.path() / "a");
  const fs::path cold = dir_.path() / "cold-vllm";
  const fs::path mine = cold / "torch_compile_cache" / "a1b2c3d4e5" / "rank_0_0" / "backbone" /
                        "computation_graph.py";
  Write(mine, "compiled here, later\n");
  fs::last_write_time(mine, fs::file_time_type::clock::now() + std::chrono::hours(1));
  auto r = RunCommand({SEEDCTL_BIN, "fetch", "--kind", "compile_cache", "--source", addr,
                       "--token-file", token_file().string(), "--namespace", "vllm", "--key", kKey,
                       "--dir", cold.string(), "--factor", "torch=2.5.1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "2 files")) << r.out;
  EXPECT_TRUE(Has(r.out, "1 already there and as new or newer")) << r.out;
  std::ifstream in(mine);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "compiled here, later\n");
  auto other =
      RunCommand({SEEDCTL_BIN, "fetch", "--kind", "compile_cache", "--source", addr, "--token-file",
                  token_file().string(), "--namespace", "vllm", "--key", kKey, "--dir",
                  (dir_.path() / "x").string(), "--param", "factor.torch=2.6.0"});
  EXPECT_NE(other.status, 0);
  EXPECT_TRUE(Has(other.err, "torch: remote=2.5.1 vs local=2.6.0")) << other.err;
  EXPECT_FALSE(fs::exists(dir_.path() / "x"));
  Stop(daemon);
}

// Real Triton and Inductor caches are hundreds of MiB: more than travels in a
// control-channel response. Such a cache goes on the weights data plane: a
// cold daemon pulls it from the warm one (verified against the bundle's
// SHA-256s), keeps its times, serves it on, and seedctl fetches it the same way.
TEST_F(CompileCacheTest, ACacheLargerThanTheInlineLimitTravelsOnTheDataPlane) {
  const fs::path big = dir_.path() / "big-triton";
  for (int i = 0; i < 3; ++i) {
    WriteRandom(big / ("k" + std::to_string(i)) / "fused_moe.cubin", 17 << 20, 40 + i);
    Write(big / ("k" + std::to_string(i)) / "fused_moe.json", "{\"num_warps\": 4}");
  }
  fs::last_write_time(big / "k1" / "fused_moe.json",
                      fs::file_time_type::clock::now() - std::chrono::hours(30));
  std::string warm_addr, cold_addr;
  auto warm_daemon = StartDaemon(Warmup(big), &warm_addr, dir_.path() / "a");
  const fs::path cold = dir_.path() / "cold-triton";
  auto args = Warmup(cold);
  args.insert(args.end(), {"--source", warm_addr});
  auto cold_daemon = StartDaemon(args, &cold_addr, dir_.path() / "b");
  EXPECT_TRUE(SameTree(big, cold));
  EXPECT_EQ(fs::last_write_time(cold / "k1" / "fused_moe.json"),
            fs::last_write_time(big / "k1" / "fused_moe.json"));

  // The cold daemon serves what it installed: seedctl fetches it from there.
  const fs::path fetched = dir_.path() / "fetched-triton";
  auto r =
      RunCommand({SEEDCTL_BIN, "fetch", "--kind", "compile_cache", "--source", cold_addr,
                  "--token-file", token_file().string(), "--namespace", "triton", "--key", kKey,
                  "--dir", fetched.string(), "--factor", "cuda=12.8", "--factor", "triton=3.1.0"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "6 files")) << r.out;
  EXPECT_TRUE(SameTree(big, fetched));
  EXPECT_TRUE(Has(r.err, "on the data plane")) << r.err;
  // Nothing of the pull is left inside the cache directory.
  for (const auto& e : fs::directory_iterator(fetched)) {
    EXPECT_EQ(e.path().filename().string().rfind(".seedd", 0), std::string::npos) << e.path();
  }

  const std::string log = Stop(cold_daemon);
  EXPECT_TRUE(Has(log,
                  "compile_cache:triton: peer (6 files installed, 0 kept as newer, "
                  "published; its files on the data plane)"))
      << log;
  EXPECT_TRUE(Has(log, "Pulled model compile_cache.triton.")) << log;
  const std::string warm_log = Stop(warm_daemon);
  EXPECT_TRUE(Has(warm_log, "Serving compile cache compile_cache.triton.")) << warm_log;
}

}  // namespace
}  // namespace seedd::testing
