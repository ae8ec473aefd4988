// The compile_cache kind on real directory trees shaped like Triton's and
// vLLM's caches: a bundle round trip, the checks on a bundle (paths, sizes,
// digests, the cap, the key factors), and installing without overwriting newer
// files or following links.
#include "seedd/compile_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/crypto.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kKey = "0123456789abcdef0123456789abcdef";

void Write(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ~/.triton/cache: one directory per kernel hash, each with its compiled forms.
void TritonTree(const fs::path& root) {
  for (const std::string hash : {"2f9a1c0d7e", "b81e44c2a9", "e07d3b5f11"}) {
    Write(root / hash / "matmul_kernel.cubin", std::string(20000, 'c') + hash);
    Write(root / hash / "matmul_kernel.ptx", "// ptx " + hash);
    Write(root / hash / "matmul_kernel.json", "{\"name\": \"matmul_kernel\", \"num_warps\": 4}");
    Write(root / hash / "__grp__matmul_kernel.json", "{\"child_paths\": {}}");
  }
}

// vLLM's torch.compile cache: per hash and rank, the graph and Inductor's output.
void VllmTree(const fs::path& root) {
  const fs::path rank = root / "torch_compile_cache" / "5c2e9d01aa" / "rank_0_0" / "backbone";
  Write(rank / "computation_graph.py", "def forward(x): return x\n");
  Write(rank / "vllm_compile_cache.py", "{(1, 8192): ('artifact_shape_1_8192', 'abc')}\n");
  Write(rank / "inductor_cache" / "fx" / "qt" / "fxgraph-qt3.pt", std::string(5000, 'g'));
  Write(rank / "inductor_cache" / "triton" / "0" / "x9" / "triton_.cubin", std::string(700, 'k'));
}

CompileCacheSpec Spec(const fs::path& dir,
                      CompileFactors factors = {{"cuda", "12.8"}, {"triton", "3.1.0"}}) {
  CompileCacheSpec s;
  s.name = "triton";
  s.dir = dir;
  s.key = kKey;
  s.factors = std::move(factors);
  return s;
}

bool SameTree(const fs::path& a, const fs::path& b) { return testing::SameTree(a, b); }

TEST(CompileCache, ATritonAndAVllmCacheArriveByteIdenticalInAnEmptyDirectory) {
  TempDir dir;
  for (auto make : {TritonTree, VllmTree}) {
    const fs::path warm = dir.path() / "warm", cold = dir.path() / "cold";
    fs::remove_all(warm);
    fs::remove_all(cold);
    make(warm);
    Result<Json> bundle = BundleCompileCache(Spec(warm));
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    Result<Json> valid = ValidateCompileCacheBundle(*bundle, "triton", kKey,
                                                    {{"cuda", "12.8"}, {"triton", "3.1.0"}});
    ASSERT_TRUE(valid.ok()) << valid.status().ToString();
    Result<CompileCacheInstall> done = InstallCompileCache(*valid, cold);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_TRUE(SameTree(warm, cold));
    EXPECT_EQ(done->installed, (*bundle)["files"].size());
    EXPECT_EQ(done->kept_newer, 0u);
    // Nothing of the staging is left behind.
    for (const auto& e : fs::directory_iterator(cold)) {
      EXPECT_EQ(e.path().filename().string().find(".seedd-incoming-"), std::string::npos);
    }
  }
}

TEST(CompileCache, DifferentKeyFactorsRejectTheBundleNamingEachRemoteAndLocal) {
  TempDir dir;
  TritonTree(dir.path() / "warm");
  Result<Json> bundle = BundleCompileCache(Spec(dir.path() / "warm"));
  ASSERT_TRUE(bundle.ok());
  Result<Json> r = ValidateCompileCacheBundle(
      *bundle, "triton", kKey, {{"cuda", "12.4"}, {"arch", "sm90"}, {"triton", "3.1.0"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "compile cache environment mismatch: arch: remote=(none) vs local=sm90, cuda: "
            "remote=12.8 vs local=12.4");
  EXPECT_EQ(CompareCompileFactors({{"a", "1"}}, {{"a", "1"}}), "");
  // Another cache's bundle is refused too.
  EXPECT_FALSE(ValidateCompileCacheBundle(*bundle, "inductor", kKey, Spec("").factors).ok());
  EXPECT_FALSE(
      ValidateCompileCacheBundle(*bundle, "triton", std::string(32, 'f'), Spec("").factors).ok());
}

Json OneFile(const std::string& path, const std::string& data) {
  return Json{{"namespace", "triton"},
              {"key", kKey},
              {"factors", Json::object()},
              {"total_size", data.size()},
              {"files", Json::array({Json{{"path", path},
                                          {"size", data.size()},
                                          {"sha256", Sha256Hex(data)},
                                          {"mtime_ns", 1000000000},
                                          {"data", Base64Encode(data)}}})}};
}

TEST(CompileCache, PathsThatLeaveTheDirectoryAreRefused) {
  for (const std::string path : {"../evil", "/etc/passwd", "a/../../b", "a//b", "./a", "a/", "a\\b",
                                 ".seedd-incoming-x/y", ""}) {
    Result<Json> r = ValidateCompileCacheBundle(OneFile(path, "x"), "triton", kKey, {});
    EXPECT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << path;
  }
  EXPECT_TRUE(ValidateCompileCacheBundle(OneFile("ab/cd.cubin", "x"), "triton", kKey, {}).ok());
}

TEST(CompileCache, SizesDigestsAndTheCapAreChecked) {
  Json b = OneFile("k.cubin", "kernel");
  b["files"][0]["sha256"] = Sha256Hex("other");
  EXPECT_EQ(ValidateCompileCacheBundle(b, "triton", kKey, {}).status().code(),
            StatusCode::kDataLoss);
  b = OneFile("k.cubin", "kernel");
  b["files"][0]["size"] = 5;
  EXPECT_FALSE(ValidateCompileCacheBundle(b, "triton", kKey, {}).ok());
  b = OneFile("k.cubin", std::string(2000, 'x'));
  EXPECT_EQ(ValidateCompileCacheBundle(b, "triton", kKey, {}, 1000).status().code(),
            StatusCode::kResourceExhausted);
  // A path that is a file and a directory at once.
  b = OneFile("k", "a");
  b["files"].push_back(OneFile("k/x", "b")["files"][0]);
  EXPECT_FALSE(ValidateCompileCacheBundle(b, "triton", kKey, {}).ok());
  // A directory over the cap is not bundled.
  TempDir dir;
  TritonTree(dir.path());
  CompileCacheSpec spec = Spec(dir.path());
  spec.max_bytes = 30000;
  EXPECT_EQ(BundleCompileCache(spec).status().code(), StatusCode::kResourceExhausted);
}

TEST(CompileCache, AFileAlreadyThereAndNewerIsKeptAnOlderOneReplaced) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm", cold = dir.path() / "cold";
  Write(warm / "h1" / "a.cubin", "remote a");
  Write(warm / "h1" / "b.cubin", "remote b");
  Result<Json> bundle = BundleCompileCache(Spec(warm, {}));
  ASSERT_TRUE(bundle.ok());
  Write(cold / "h1" / "a.cubin", "local, compiled later");
  Write(cold / "h1" / "b.cubin", "local, stale");
  const auto now = fs::last_write_time(warm / "h1" / "a.cubin");
  fs::last_write_time(cold / "h1" / "a.cubin", now + std::chrono::hours(1));
  fs::last_write_time(cold / "h1" / "b.cubin", now - std::chrono::hours(1));
  Result<CompileCacheInstall> done = InstallCompileCache(*bundle, cold);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->installed, 1u);
  EXPECT_EQ(done->kept_newer, 1u);
  EXPECT_EQ(Read(cold / "h1" / "a.cubin"), "local, compiled later");
  EXPECT_EQ(Read(cold / "h1" / "b.cubin"), "remote b");
  // Installed files keep the bundle's times: installing again changes nothing.
  done = InstallCompileCache(*bundle, cold);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->installed, 0u);
  EXPECT_EQ(done->kept_newer, 2u);
}

TEST(CompileCache, ALinkInTheTargetIsNeverFollowedAndLinksAreNotBundled) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm", cold = dir.path() / "cold",
                 outside = dir.path() / "outside";
  Write(warm / "h1" / "a.cubin", "a");
  fs::create_directories(outside);
  fs::create_symlink(outside / "secret", warm / "link");  // skipped by the bundle
  Write(outside / "secret", "s");
  Result<Json> bundle = BundleCompileCache(Spec(warm, {}));
  ASSERT_TRUE(bundle.ok());
  ASSERT_EQ((*bundle)["files"].size(), 1u);
  fs::create_directories(cold);
  fs::create_directory_symlink(outside, cold / "h1");  // h1/ leads out of the cache
  Result<CompileCacheInstall> done = InstallCompileCache(*bundle, cold);
  EXPECT_FALSE(done.ok());
  EXPECT_FALSE(fs::exists(outside / "a.cubin"));
}

// A thread that, until stopped, swaps `dir` for a link to `to` and back, as a
// local user who can write the cache directory (shared with the engine) could.
class LinkSwapper {
 public:
  LinkSwapper(fs::path dir, fs::path to) : dir_(std::move(dir)), to_(std::move(to)) {
    thread_ = std::thread([this] {
      const fs::path real = dir_.string() + ".real";
      while (!stop_) {
        if (quiet_) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          continue;
        }
        {
          // One whole swap under the lock: while Quietly() runs, the
          // directory is the real one.
          std::lock_guard<std::mutex> lock(mu_);
          std::error_code ec;
          fs::rename(dir_, real, ec);
          if (!ec) {
            fs::create_directory_symlink(to_, dir_, ec);
            // Each state lasts about as long as a reader takes to open a few
            // hundred files, so that reads land on the link, not only on
            // the moments in between.
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            fs::remove(dir_, ec);
            fs::rename(real, dir_, ec);
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~LinkSwapper() {
    stop_ = true;
    thread_.join();
  }
  // Runs `f` between two swaps, with the real directory in place.
  template <typename F>
  void Quietly(F f) {
    quiet_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f();
    }
    quiet_ = false;
  }

 private:
  fs::path dir_, to_;
  std::atomic<bool> stop_{false}, quiet_{false};
  std::mutex mu_;
  std::thread thread_;
};

// Bundling lists the directory, then reads each file: a directory swapped for
// a link in between must not make it read (and publish) a file outside.
TEST(CompileCache, ALinkSwappedInWhileBundlingIsNeverRead) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm", outside = dir.path() / "outside";
  const std::string secret = "SECRET-TOKEN-" + std::string(51, 's');
  for (int i = 0; i < 200; ++i) {
    Write(warm / "zz" / ("f" + std::to_string(i)), std::string(secret.size(), 'k'));
    Write(outside / ("f" + std::to_string(i)), secret);
  }
  const std::string leaked = Sha256Hex(secret);
  int raced = 0, refused = 0;
  {
    LinkSwapper swap(warm / "zz", outside);
    for (int round = 0; round < 120; ++round) {
      if (round % 4 == 3) {
        // Between swaps the directory bundles: refusals above come from the
        // swaps, not from a bundler that refuses everything.
        Result<Json> quiet = Status::Internal("not run");
        swap.Quietly([&] { quiet = BundleCompileCache(Spec(warm, {})); });
        ASSERT_TRUE(quiet.ok()) << quiet.status().ToString();
        ASSERT_EQ((*quiet)["files"].size(), 200u);
        continue;
      }
      Result<Json> bundle = BundleCompileCache(Spec(warm, {}));
      if (!bundle.ok()) {  // a file that changed under it: refused, never read
        ++refused;
        continue;
      }
      ++raced;
      for (const Json& f : (*bundle)["files"]) {
        ASSERT_NE(f["sha256"], leaked) << f["path"] << " was read from outside the cache";
      }
    }
  }
  RecordProperty("bundled_while_swapping", raced);
  RecordProperty("refused_while_swapping", refused);
}

// Installing checks the directories on the way, then renames into them: a
// directory swapped for a link in between must not take a file outside.
TEST(CompileCache, ALinkSwappedInWhileInstallingIsNeverWrittenThrough) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm", outside = dir.path() / "outside";
  for (int i = 0; i < 200; ++i) Write(warm / "zz" / ("f" + std::to_string(i)), "kernel");
  Result<Json> bundle = BundleCompileCache(Spec(warm, {}));
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  fs::create_directories(outside);
  for (int round = 0; round < 20; ++round) {
    const fs::path cold = dir.path() / ("cold" + std::to_string(round));
    fs::create_directories(cold / "zz");
    LinkSwapper swap(cold / "zz", outside);
    (void)InstallCompileCache(*bundle, cold);  // may fail: a link on the way is refused
  }
  EXPECT_TRUE(fs::is_empty(outside)) << "a file was written through a link";
}

TEST(CompileCache, FactorsComeFromPairsAndAJsonFile) {
  TempDir dir;
  Write(dir.path() / "f.json", "{\"torch\": \"2.5.1\", \"sm\": 90, \"cuda\": \"12.1\"}");
  Result<CompileFactors> f =
      ParseCompileFactors({"cuda=12.4", "arch=sm_90a"}, dir.path() / "f.json");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(
      *f, (CompileFactors{{"arch", "sm_90a"}, {"cuda", "12.4"}, {"sm", "90"}, {"torch", "2.5.1"}}));
  EXPECT_FALSE(ParseCompileFactors({"novalue"}).ok());
  EXPECT_FALSE(ParseCompileFactors({"bad name=1"}).ok());
  Write(dir.path() / "list.json", "[1, 2]");
  EXPECT_FALSE(ParseCompileFactors({}, dir.path() / "list.json").ok());
  EXPECT_FALSE(ParseCompileFactors({}, dir.path() / "missing.json").ok());
}

// The listener's path: one bundle per state of the directory, rebuilt when a
// file changes.
TEST(CompileCache, AServedDirectoryIsBundledOncePerStateAndAgainWhenItChanges) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm";
  Write(warm / "h1" / "a.cubin", "first");
  SeedablePtr s = NewCompileCacheSeedable(dir.path() / "cache", {Spec(warm)});
  const Json request = {{"kind", "compile_cache"}, {"namespace", "triton"}, {"key", kKey}};
  Result<std::optional<std::string>> one = s->ResolveText(request);
  ASSERT_TRUE(one.ok() && one->has_value()) << one.status().ToString();
  Result<std::optional<std::string>> two = s->ResolveText(request);
  ASSERT_TRUE(two.ok() && two->has_value());
  EXPECT_EQ(**one, **two);
  Write(warm / "h1" / "a.cubin", "second, longer");
  Result<std::optional<std::string>> three = s->ResolveText(request);
  ASSERT_TRUE(three.ok() && three->has_value());
  EXPECT_NE(**three, **one);
  EXPECT_NE(three->value().find(Base64Encode("second, longer")), std::string::npos);
  // Another key is a miss.
  Json other = request;
  other["key"] = std::string(32, 'a');
  Result<std::optional<std::string>> miss = s->ResolveText(other);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
}

// A bundle's times are taken no later than now: a file dated in the future would
// keep every later install from replacing it.
TEST(CompileCache, AFileDatedInTheFutureIsInstalledDatedNow) {
  TempDir dir;
  Json b = OneFile("k.cubin", "kernel");
  b["files"][0]["mtime_ns"] = int64_t{4102444800} * 1000000000;  // 2100
  ASSERT_TRUE(ValidateCompileCacheBundle(b, "triton", kKey, {}).ok());
  ASSERT_TRUE(InstallCompileCache(b, dir.path()).ok());
  EXPECT_LE(fs::last_write_time(dir.path() / "k.cubin"),
            fs::file_time_type::clock::now() + std::chrono::seconds(1));
}

TEST(CompileCache, TheKeyFieldsAreChecked) {
  EXPECT_TRUE(ValidateCompileCacheKey(Json{{"namespace", "triton"}, {"key", kKey}}).ok());
  EXPECT_FALSE(ValidateCompileCacheKey(Json{{"namespace", "Triton"}, {"key", kKey}}).ok());
  EXPECT_FALSE(ValidateCompileCacheKey(Json{{"namespace", "triton"}, {"key", "abc"}}).ok());
  EXPECT_FALSE(ValidateCompileCacheKey(Json{{"namespace", "triton"}}).ok());
  EXPECT_FALSE(ValidateCompileCacheKey(Json::array()).ok());
}

}  // namespace
}  // namespace seedd

namespace seedd {
namespace {

// A data plane that "serves" by remembering the directory and "fetches" by
// handing it back (or a copy the test has tampered with): the unit tests'
// stand-in for the daemon's weights data plane.
class DirectoryPlane final : public CompileCacheDataPlane {
 public:
  Result<std::string> Serve(const std::string& model, const fs::path& dir,
                            const std::vector<std::string>& paths,
                            std::map<std::string, std::string>* sha256) override {
    served_model = model;
    served_dir = dir;
    for (const std::string& p : paths) (*sha256)[p] = Sha256Hex(Read(dir / p));
    return std::string(64, 'a');
  }
  Result<fs::path> Fetch(const std::string& model, const std::string& root) override {
    fetched_model = model;
    fetched_root = root;
    return fetch_from.empty() ? served_dir : fetch_from;
  }
  std::string served_model, fetched_model, fetched_root;
  fs::path served_dir, fetch_from;
};

TEST(CompileCache, ACacheBeyondTheInlineLimitIsBundledByReferenceAndInstalledChecked) {
  TempDir dir;
  const fs::path warm = dir.path() / "warm", cold = dir.path() / "cold";
  testing::WriteRandom(warm / "h1" / "big.cubin", kMaxInlineCompileCacheBytes, 3);
  Write(warm / "h1" / "big.json", "{}");
  // Without a data plane it is not bundled, and the error says why.
  Result<Json> none = BundleCompileCache(Spec(warm));
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("data plane"), std::string::npos)
      << none.status().message();

  DirectoryPlane plane;
  Result<Json> bundle = BundleCompileCache(Spec(warm), &plane);
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(plane.served_model, "compile_cache.triton." + kKey);
  EXPECT_EQ((*bundle)["content"]["model"], plane.served_model);
  EXPECT_EQ((*bundle)["content"]["root_digest"], std::string(64, 'a'));
  for (const Json& f : (*bundle)["files"]) EXPECT_FALSE(f.contains("data")) << f.dump();
  ASSERT_TRUE(ValidateCompileCacheBundle(*bundle, "triton", kKey, Spec(warm).factors).ok());

  // Its checks: no inline data beside content, the model it must name, the pin.
  Json bad = *bundle;
  bad["files"][0]["data"] = Base64Encode("x");
  EXPECT_FALSE(ValidateCompileCacheBundle(bad, "triton", kKey, Spec(warm).factors).ok());
  bad = *bundle;
  bad["content"]["model"] = "llama";
  EXPECT_FALSE(ValidateCompileCacheBundle(bad, "triton", kKey, Spec(warm).factors).ok());
  // What a signature signs covers the content's pin.
  bad = *bundle;
  bad["content"]["root_digest"] = std::string(64, 'b');
  EXPECT_NE(CompileCacheBundleDigest(bad), CompileCacheBundleDigest(*bundle));
  bad["content"]["root_digest"] = "abc";
  EXPECT_FALSE(ValidateCompileCacheBundle(bad, "triton", kKey, Spec(warm).factors).ok());
  // A bundle that carries more than the inline limit inline is refused.
  Json inline_big = *bundle;
  inline_big.erase("content");
  for (Json& f : inline_big["files"])
    f["data"] = Base64Encode(Read(warm / f["path"].get<std::string>()));
  EXPECT_EQ(
      ValidateCompileCacheBundle(inline_big, "triton", kKey, Spec(warm).factors).status().code(),
      StatusCode::kResourceExhausted);

  // Installed from the content: every file, with the bundle's times.
  Result<CompileCacheInstall> done = InstallCompileCacheBundle(*bundle, cold, &plane);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(plane.fetched_root, std::string(64, 'a'));
  EXPECT_EQ(done->installed, 2u);
  EXPECT_TRUE(testing::SameTree(warm, cold));
  EXPECT_EQ(fs::last_write_time(cold / "h1" / "big.json"),
            fs::last_write_time(warm / "h1" / "big.json"));
  // Without a data plane, or from content that differs, nothing is installed.
  const fs::path other = dir.path() / "other";
  EXPECT_EQ(InstallCompileCacheBundle(*bundle, other, nullptr).status().code(),
            StatusCode::kFailedPrecondition);
  const fs::path tampered = dir.path() / "tampered";
  fs::copy(warm, tampered, fs::copy_options::recursive);
  Write(tampered / "h1" / "big.json", "{\"num_warps\": 1}");
  plane.fetch_from = tampered;
  Result<CompileCacheInstall> lied = InstallCompileCacheBundle(*bundle, other, &plane);
  EXPECT_EQ(lied.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(lied.status().message().find("h1/big.json"), std::string::npos)
      << lied.status().message();
  EXPECT_TRUE(fs::is_empty(other));

  // A peer that claims more than the disk holds is refused before any byte is
  // pulled; claims that would wrap the sum around are refused as they are read.
  Json huge = *bundle;
  huge["files"][0]["size"] = uint64_t{1} << 62;
  plane.fetched_root.clear();
  Result<Json> claimed = ValidateCompileCacheBundle(huge, "triton", kKey, Spec(warm).factors);
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  Result<CompileCacheInstall> refused = InstallCompileCacheBundle(*claimed, other, &plane);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("free"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(plane.fetched_root.empty());
  huge["files"][1]["size"] = (uint64_t{1} << 63) + 2;
  huge["files"][0]["size"] = (uint64_t{1} << 63);
  EXPECT_EQ(ValidateCompileCacheBundle(huge, "triton", kKey, Spec(warm).factors).status().code(),
            StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace seedd
