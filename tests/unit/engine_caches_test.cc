// Compile caches known by name (their directories and key factors from the
// engine's environment), the helper that runs the engine's Python, and the
// watch that tells whether the engine opened what a warmup installed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/subprocess.h"
#include "daemon/usage_watch.h"
#include "seedd/compile_cache.h"
#include "support/test_util.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const CompileFactors kProbed = {
    {"python", "3.11"},     {"machine", "x86_64"}, {"torch", "2.5.1"},
    {"torch_cuda", "12.4"}, {"triton", "3.1.0"},   {"vllm", "0.6.4"},
    {"gpu_arch", "9.0"},    {"cxx", "c++ 12.2.0"}, {"flashinfer", "none"}};

TEST(KnownCompileCaches, EachCacheIsWhereItsConsumerLooksWithTheVariableOrItsDefault) {
  const EnvLookup home = Env({{"HOME", "/home/e"}, {"USER", "eng"}});
  auto dir = [&](std::string_view name, const EnvLookup& env) {
    Result<CompileCacheSpec> spec = KnownCompileCacheSpec(name, kProbed, env);
    EXPECT_TRUE(spec.ok()) << spec.status().message();
    return spec.ok() ? spec->dir.string() : "";
  };
  EXPECT_EQ(dir("triton", home), "/home/e/.triton/cache");
  EXPECT_EQ(dir("triton", Env({{"HOME", "/home/e"}, {"TRITON_CACHE_DIR", "/c/t"}})), "/c/t");
  EXPECT_EQ(dir("inductor", home), "/tmp/torchinductor_eng");
  EXPECT_EQ(dir("inductor", Env({{"TMPDIR", "/scratch"}, {"USER", "a/b"}})),
            "/scratch/torchinductor_a_b");
  EXPECT_EQ(dir("vllm", home), "/home/e/.cache/vllm/torch_compile_cache");
  EXPECT_EQ(dir("vllm", Env({{"VLLM_CACHE_ROOT", "/v"}})), "/v/torch_compile_cache");
  EXPECT_EQ(dir("flashinfer", home), "/home/e/.cache/flashinfer");
  EXPECT_EQ(dir("flashinfer", Env({{"FLASHINFER_WORKSPACE_BASE", "/w"}})), "/w/.cache/flashinfer");
  EXPECT_EQ(dir("deepgemm", home), "/home/e/.deep_gemm");
  EXPECT_EQ(dir("cuda", Env({{"CUDA_CACHE_PATH", "/nv"}})), "/nv");
  // torch.utils.cpp_extension: py{major}{minor}_{cpu|cu{version}} under the cache home.
  EXPECT_EQ(dir("torch_extensions", Env({{"HOME", "/home/e"}, {"XDG_CACHE_HOME", "/x"}})),
            "/x/torch_extensions/py311_cu124");
  CompileFactors cpu = kProbed;
  cpu["torch_cuda"] = "none";
  Result<CompileCacheSpec> spec = KnownCompileCacheSpec("torch_extensions", cpu, home);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->dir, "/home/e/.cache/torch_extensions/py311_cpu");
  EXPECT_EQ(dir("torch_extensions", Env({{"TORCH_EXTENSIONS_DIR", "/ext"}})), "/ext");
}

TEST(KnownCompileCaches, TheFactorsAreTheConsumersOwnAndTheKeyChangesWithThem) {
  Result<CompileCacheSpec> triton = KnownCompileCacheSpec("triton", kProbed, Env({}));
  ASSERT_TRUE(triton.ok());
  EXPECT_EQ(triton->factors,
            (CompileFactors{{"triton", "3.1.0"}, {"gpu_arch", "9.0"}, {"machine", "x86_64"}}));
  Result<CompileCacheSpec> ext = KnownCompileCacheSpec("torch_extensions", kProbed, Env({}));
  ASSERT_TRUE(ext.ok());
  EXPECT_EQ(ext->factors.at("torch"), "2.5.1");
  EXPECT_EQ(ext->factors.at("cxx"), "c++ 12.2.0");
  // A factor the environment lacks is "none", not left out.
  Result<CompileCacheSpec> fi = KnownCompileCacheSpec("flashinfer", kProbed, Env({}));
  ASSERT_TRUE(fi.ok());
  EXPECT_EQ(fi->factors.at("nvcc"), "none");
  EXPECT_EQ(fi->key.size(), 64u);
  EXPECT_TRUE(ValidateCompileCacheKey(Json{{"namespace", "triton"}, {"key", triton->key}}).ok());
  CompileFactors other = kProbed;
  other["triton"] = "3.2.0";
  EXPECT_NE(KnownCompileCacheSpec("triton", other, Env({}))->key, triton->key);
  other = kProbed;
  other["vllm"] = "0.7.0";  // not a factor of Triton's cache
  EXPECT_EQ(KnownCompileCacheSpec("triton", other, Env({}))->key, triton->key);
  EXPECT_NE(DefaultCompileKey("inductor", triton->factors), triton->key);
}

TEST(KnownCompileCaches, AnUnknownNameIsRefusedListingTheKnownOnes) {
  Result<CompileCacheSpec> spec = KnownCompileCacheSpec("tritn", kProbed, Env({}));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("'tritn'"), std::string::npos);
  EXPECT_NE(spec.status().message().find("triton, inductor, vllm"), std::string::npos);
  EXPECT_NE(spec.status().message().find("NAME=DIR"), std::string::npos);
}

// A stand-in interpreter: a shell script run as `python -c PROBE`.
fs::path Script(const TempDir& dir, const std::string& name, const std::string& body) {
  const fs::path p = dir.path() / name;
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all);
  return p;
}

TEST(ProbeEngineEnvironment, ReadsWhatTheInterpreterReportsAndNamesOneThatFails) {
  TempDir dir;
  Result<CompileFactors> f = ProbeEngineEnvironment(
      Script(dir, "ok", R"(echo '{"python": "3.12", "torch": "2.6.0", "n": 3}')").string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->at("python"), "3.12");
  EXPECT_EQ(f->at("torch"), "2.6.0");
  EXPECT_EQ(f->count("n"), 0u);  // not a string: ignored

  const fs::path bad = Script(dir, "bad", "echo 'Traceback'; exit 1");
  f = ProbeEngineEnvironment(bad.string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(bad.string()), std::string::npos);
  EXPECT_NE(f.status().message().find("exited with 1"), std::string::npos);

  f = ProbeEngineEnvironment((dir.path() / "missing").string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("cannot run"), std::string::npos);

  f = ProbeEngineEnvironment(Script(dir, "text", "echo hello").string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no JSON object"), std::string::npos);
}

TEST(ProbeEngineEnvironment, TheRealInterpreterReportsItsVersionAndMachine) {
  Result<CompileFactors> f = ProbeEngineEnvironment("python3");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->at("python").rfind("3.", 0), 0u);
  EXPECT_FALSE(f->at("machine").empty());
  for (const char* k : {"torch", "triton", "torch_cuda", "cxx", "nvcc", "gpu_arch"}) {
    EXPECT_EQ(f->count(k), 1u) << k;
  }
}

TEST(RunCapture, AProgramThatHangsOrFloodsIsStopped) {
  Result<CapturedRun> slow = RunCapture({"sleep", "30"}, std::chrono::milliseconds(200));
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  Result<CapturedRun> flood = RunCapture({"yes"}, std::chrono::seconds(10), 4096);
  ASSERT_FALSE(flood.ok());
  EXPECT_EQ(flood.status().code(), StatusCode::kResourceExhausted);
  Result<CapturedRun> ok = RunCapture({"printf", "a b"}, std::chrono::seconds(10));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->out, "a b");
  EXPECT_EQ(ok->exit_code, 0);
}

// Polls until `pred` holds or 10 s pass.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(UsageWatch, FilesAnotherProcessOpensCountAndTheDaemonsOwnReadsDoNot) {
  TempDir dir;
  fs::create_directories(dir.path() / "sub");
  std::vector<fs::path> files = {dir.path() / "a.so", dir.path() / "sub" / "b.o",
                                 dir.path() / "c.json"};
  for (const fs::path& f : files) std::ofstream(f) << "x";
  std::unique_ptr<UsageWatch> watch = UsageWatch::Start(std::chrono::hours(1));
  watch->Watch("compile_cache:triton", files, "check it");
  std::vector<UsageWatch::Report> r = watch->Snapshot();
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].watch, "fanotify");
  EXPECT_EQ(r[0].installed, 3u);
  EXPECT_EQ(r[0].state, "waiting");
  // This process reading them, as the daemon does when it serves them.
  for (const fs::path& f : files) std::ifstream(f).get();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(watch->Snapshot()[0].opened, 0u);
  // Another process, twice for one file: counted once.
  ASSERT_TRUE(
      RunCapture({"cat", files[1].string(), files[1].string()}, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(Eventually([&] { return watch->Snapshot()[0].opened == 1; }));
  ASSERT_TRUE(RunCapture({"cat", files[0].string()}, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(Eventually([&] { return watch->Snapshot()[0].opened == 2; }));
  r = watch->Snapshot();
  EXPECT_EQ(r[0].state, "used");
  EXPECT_GE(r[0].first_open_after, 0);
  // A file next to them that was not installed is not counted.
  std::ofstream(dir.path() / "other") << "y";
  ASSERT_TRUE(RunCapture({"cat", (dir.path() / "other").string()}, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(RunCapture({"cat", files[0].string()}, std::chrono::seconds(10)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(watch->Snapshot()[0].opened, 2u);
  EXPECT_EQ(watch->SnapshotJson()[0]["files_opened"], 2);
}

TEST(UsageWatch, ACacheNoneOfWhoseFilesIsOpenedWithinTheGraceIsUnused) {
  TempDir dir;
  const fs::path f = dir.path() / "table.json";
  std::ofstream(f) << "{}";
  std::unique_ptr<UsageWatch> watch = UsageWatch::Start(std::chrono::milliseconds(50));
  testing::LogCapture log;
  watch->Watch("flashinfer_autotune", {f}, "check the config hash");
  ASSERT_TRUE(Eventually([&] { return watch->Snapshot()[0].state == "unused"; }));
  ASSERT_TRUE(Eventually([&] { return log.Contains(spdlog::level::warn, "none opened since"); }));
  EXPECT_TRUE(log.Contains(spdlog::level::warn, "flashinfer_autotune: 1 files installed"))
      << log.Dump();
  EXPECT_TRUE(log.Contains(spdlog::level::warn, "check the config hash")) << log.Dump();
  // Opened later: used after all.
  ASSERT_TRUE(RunCapture({"cat", f.string()}, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(Eventually([&] { return watch->Snapshot()[0].state == "used"; }));
}

}  // namespace
}  // namespace seedd
