// Weights you can trust: a model version is named by what covers its bytes,
// a local copy is reused or served only while unchanged, models in the Hugging
// Face hub cache are served as they lie, and an origin serves only what it indexed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "kinds/weights/weight_shards_kind.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using testing::Ask;
using testing::kToken;
using testing::ReadAll;
using testing::SameTree;
using testing::WriteRandom;
using testing::WriteShard;

// Flips one byte in the middle of `p`: same size, new bytes, new mtime.
void FlipAByte(const std::filesystem::path& p) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(std::filesystem::file_size(p) / 2);
  f.seekg(at);
  char b = 0;
  f.get(b);
  f.seekp(at);
  f.put(static_cast<char>(b ^ 0x5a));
}

class ModelVersionsTest : public testing::WeightsFixture {
 protected:
  // A daemon that pulls model "tiny" from `source` at start into `cache`.
  Result<std::unique_ptr<Daemon>> StartPuller(const HostPort& source,
                                              const std::filesystem::path& cache, HostPort* bound) {
    DaemonOptions o;
    o.seed.listen = HostPort{"127.0.0.1", 0};
    o.seed.source = source;
    o.seed.token = kToken;
    o.cache_dir = cache;
    o.pulls = {"tiny"};
    o.pull_timeout = std::chrono::seconds(1);  // a source that is down is not waited for long
    Result<std::unique_ptr<Daemon>> d = Daemon::Create(o);
    if (!d.ok()) return d.status();
    Result<std::optional<HostPort>> started = (*d)->Start();
    if (!started.ok()) return started.status();
    *bound = **started;
    return d;
  }
  std::filesystem::path Current(const std::filesystem::path& cache) {
    return cache / "weights" / "tiny" / "current";
  }
  // A copy of model_ whose shard holds other tensor bytes under the same header.
  std::filesystem::path NextCheckpoint() {
    const auto next = dir_.path() / "model-step2";
    std::filesystem::copy(model_, next, std::filesystem::copy_options::recursive);
    WriteShard(next / "model.safetensors", 3000000, 2);
    return next;
  }
};

TEST_F(ModelVersionsTest, ANewCheckpointWithTheSameShapesReplacesTheOldAfterARestart) {
  const auto cache = dir_.path() / "target";
  HostPort first = Serve(model_);
  const Manifest v1 = ManifestFrom(first);
  HostPort at;
  {
    auto target = StartPuller(first, cache, &at);
    ASSERT_OK(target);
    EXPECT_TRUE(SameTree(model_, Current(cache)));
  }
  daemons_.back()->Stop();
  const auto step2 = NextCheckpoint();
  HostPort second = Serve(step2);
  const Manifest v2 = ManifestFrom(second);
  // Same files, sizes and headers: the fingerprint cannot tell them apart.
  ASSERT_EQ(v2.fingerprint, v1.fingerprint);
  ASSERT_NE(v2.root_digest, v1.root_digest);
  auto target = StartPuller(second, cache, &at);
  ASSERT_OK(target);
  EXPECT_EQ(std::filesystem::read_symlink(Current(cache)), v2.root_digest);
  EXPECT_TRUE(SameTree(step2, Current(cache)));
  // What it serves is what `current` holds, under the new version's digest.
  EXPECT_EQ(ManifestFrom(at).root_digest, v2.root_digest);
  ASSERT_TRUE(FetchModel(v2, {at}, dir_.path() / "from-target", Options()).ok());
  EXPECT_TRUE(SameTree(step2, dir_.path() / "from-target"));
}

// The daemon's version before a new checkpoint lends every chunk the two share
// (here all but the rewritten shard's): only the shard crosses the network.
TEST_F(ModelVersionsTest, ANewCheckpointFetchesOnlyWhatChangedAndCopiesTheRestFromTheCache) {
  const auto cache = dir_.path() / "target";
  HostPort at;
  {
    auto target = StartPuller(Serve(model_), cache, &at);
    ASSERT_OK(target);
  }
  daemons_.back()->Stop();
  const auto step2 = NextCheckpoint();
  HostPort second = Serve(step2);
  const Manifest v2 = ManifestFrom(second);
  size_t shared = 0;
  for (const ManifestChunk& c : v2.chunks) shared += c.file != "model.safetensors";
  testing::LogCapture logs;
  auto target = StartPuller(second, cache, &at);
  ASSERT_OK(target);
  EXPECT_TRUE(SameTree(step2, Current(cache)));
  EXPECT_TRUE(logs.Contains(spdlog::level::info, "Model tiny: " + std::to_string(shared) + " of " +
                                                     std::to_string(v2.chunks.size()) + " chunks"))
      << logs.Dump();
}

TEST_F(ModelVersionsTest, AModifiedLocalCopyIsFetchedAgain) {
  const auto cache = dir_.path() / "target";
  HostPort origin = Serve(model_);
  HostPort at;
  {
    auto target = StartPuller(origin, cache, &at);
    ASSERT_OK(target);
  }
  FlipAByte(Current(cache) / "blob.bin");
  ASSERT_FALSE(SameTree(model_, Current(cache)));
  testing::LogCapture logs;
  auto target = StartPuller(origin, cache, &at);
  ASSERT_OK(target);
  EXPECT_TRUE(SameTree(model_, Current(cache)));
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "was modified after it was pulled"))
      << logs.Dump();
}

TEST_F(ModelVersionsTest, WithNoSourceOnlyAnUnchangedLocalCopyIsServed) {
  const auto cache = dir_.path() / "target";
  HostPort origin = Serve(model_);
  const Manifest v1 = ManifestFrom(origin);
  HostPort at;
  {
    auto target = StartPuller(origin, cache, &at);
    ASSERT_OK(target);
  }
  daemons_.back()->Stop();
  {
    // Unchanged: served under the digest recorded with it.
    auto target = StartPuller(origin, cache, &at);
    ASSERT_OK(target);
    EXPECT_EQ(ManifestFrom(at).root_digest, v1.root_digest);
  }
  FlipAByte(Current(cache) / "model.safetensors");
  auto target = StartPuller(origin, cache, &at);
  ASSERT_FALSE(target.ok());
  EXPECT_NE(target.status().message().find("was modified after it was pulled"), std::string::npos)
      << target.status().message();
}

TEST_F(ModelVersionsTest, AModelInTheHubCacheIsServedUnderItsFileNamesAndArrivesByteIdentical) {
  const auto hub = dir_.path() / "hub";
  WriteShard(dir_.path() / "shard", 3000000, 4);
  const std::string shard = ReadAll(dir_.path() / "shard");
  const auto snapshot = testing::MakeHubModel(
      hub, "org/tiny",
      {{"model.safetensors", shard},
       {"config.json", R"({"hidden_size": 64})"},
       {"tokenizer/tokenizer.json", R"({"vocab": {}})"},
       {"generation_config.json", R"({"hidden_size": 64})"}},  // the same blob as config.json
      "0123456789abcdef0123456789abcdef01234567");
  ::setenv("HF_HUB_CACHE", hub.c_str(), 1);
  HostPort origin = Serve("hf:org/tiny");
  ::unsetenv("HF_HUB_CACHE");
  const Manifest m = ManifestFrom(origin);
  std::vector<std::string> names;
  for (const ManifestFile& f : m.files) names.push_back(f.path);
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "generation_config.json",
                                             "model.safetensors", "tokenizer/tokenizer.json"}));
  EXPECT_EQ(m.tensors.size(), 1u);
  ASSERT_TRUE(FetchModel(m, {origin}, dir_.path() / "dest", Options()).ok());
  EXPECT_TRUE(SameTree(snapshot, dir_.path() / "dest"));
  EXPECT_FALSE(std::filesystem::is_symlink(dir_.path() / "dest" / "config.json"));
}

TEST_F(ModelVersionsTest, AHubSnapshotLinkThatLeavesItsRepositoryIsRefusedAtStart) {
  const auto hub = dir_.path() / "hub";
  const auto snapshot = testing::MakeHubModel(hub, "org/tiny", {{"config.json", "{}"}}, "feedface");
  WriteRandom(dir_.path() / "secret", 100, 1);
  std::filesystem::create_symlink("../../../../secret", snapshot / "stolen.bin");
  DaemonOptions o;
  o.seed.listen = HostPort{"127.0.0.1", 0};
  o.seed.token = kToken;
  o.cache_dir = dir_.path() / "cache";
  o.models = {{"tiny", snapshot}};
  auto d = Daemon::Create(o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("stolen.bin links to"), std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("outside the model's root"), std::string::npos);
}

TEST_F(ModelVersionsTest, AFileChangedAfterIndexingIsNotServedUnderItsOldDigests) {
  HostPort origin = Serve(model_);
  const Manifest m = ManifestFrom(origin);
  uint32_t blob = 0, shard = 0;
  while (m.chunks[blob].file != "blob.bin") ++blob;
  while (m.chunks[shard].file != "model.safetensors") ++shard;
  FlipAByte(model_ / "blob.bin");
  testing::LogCapture logs;
  // Its manifest is no longer handed out...
  SeedConfig config;
  config.source = origin;
  config.token = kToken;
  auto client = SeedTransport::Create({}, config);
  auto answer = (*client)->Request(Json{{"kind", "weight_shards"}, {"model", "tiny"}});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["status"], "error");
  EXPECT_NE(
      (*answer)["message"].get<std::string>().find("changed on disk (blob.bin: it was modified)"),
      std::string::npos)
      << answer->dump();
  // ...and its chunks are not sent under the old digests.
  Json hello;
  UniqueFd fd = testing::OpenData(origin, m.root_digest, &hello);
  ASSERT_EQ(hello["status"], "ok");
  EXPECT_EQ(Ask(fd.get(), "SDRQ", blob).status, 1u);
  EXPECT_EQ(Ask(fd.get(), "SDRQ", shard).status, 0u);  // other files still are
  EXPECT_TRUE(logs.Contains(spdlog::level::err, "blob.bin of model tiny: it was modified"))
      << logs.Dump();
  // A pull of the old version fails (the origin offers chunks it does not
  // serve: dropped) rather than getting other bytes or never ending.
  FetchStats stats;
  Status s = FetchModel(m, {origin}, dir_.path() / "dest", Options(), &stats);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(stats.sources_dropped, std::vector<std::string>{origin.ToString()});
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "dest"));
}

// A manifest request stats kUnchangedSweepFiles files of a larger model, in
// turn (not all of them: a 100,000-file model would cost seconds of CPU per
// request). With two turns and a bit of files: a change in the last bit is
// found by the third request (the first two turns do not reach it), and a
// change the data path found refuses the very next request, though its turn
// is not due.
TEST_F(ModelVersionsTest, AChangedFileOfAManyFileModelIsFoundInTurnOrByTheDataPath) {
  const auto many = dir_.path() / "many";
  std::filesystem::create_directories(many);
  const size_t n = 2 * kUnchangedSweepFiles + 16;
  auto name = [](size_t i) {
    char s[32];
    std::snprintf(s, sizeof s, "f%05zu.bin", i);
    return std::string(s);
  };
  const auto before = std::filesystem::file_time_type::clock::now() - std::chrono::seconds(10);
  for (size_t i = 0; i < n; ++i) {
    WriteRandom(many / name(i), 64, static_cast<unsigned>(i + 1));
    // Older than any flip below, whatever the clock's granularity.
    std::filesystem::last_write_time(many / name(i), before);
  }
  const auto other = dir_.path() / "other";
  std::filesystem::copy(many, other, std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::directory_iterator(other)) {
    std::filesystem::last_write_time(e.path(), before);
  }
  SeedConfig config;
  config.token = kToken;
  auto ask = [&](const HostPort& at) {
    config.source = at;
    auto client = SeedTransport::Create({}, config);
    if (!client.ok()) return Json();
    auto answer = (*client)->Request(Json{{"kind", "weight_shards"}, {"model", "tiny"}});
    return answer.has_value() ? *answer : Json();
  };

  HostPort origin = Serve(many);
  ManifestFrom(origin);  // the first turn: files 0 to 1,023
  const std::string last = name(n - 1);
  FlipAByte(many / last);
  EXPECT_EQ(ask(origin)["status"], "ok");  // the second turn: 1,024 to 2,047
  Json third = ask(origin);                // the third: 2,048 onwards
  EXPECT_EQ(third["status"], "error") << third.dump();
  EXPECT_NE(third.value("message", "").find("changed on disk (" + last + ": it was modified)"),
            std::string::npos)
      << third.dump();

  // A file the first turn checked, changed after it: the next turn does not
  // reach it, but a fetcher asked for it.
  HostPort origin2 = Serve(other);
  const Manifest m2 = ManifestFrom(origin2);
  const std::string early = name(10);
  uint32_t chunk = 0;
  while (m2.chunks[chunk].file != early) ++chunk;
  FlipAByte(other / early);
  Json hello;
  UniqueFd fd = testing::OpenData(origin2, m2.root_digest, &hello);
  ASSERT_EQ(hello["status"], "ok");
  EXPECT_EQ(Ask(fd.get(), "SDRQ", chunk).status, 1u);  // not here
  Json next = ask(origin2);
  EXPECT_EQ(next["status"], "error") << next.dump();
  EXPECT_NE(next.value("message", "").find("changed on disk (" + early + ": it was modified)"),
            std::string::npos)
      << next.dump();
}

TEST_F(ModelVersionsTest, ALinkSwappedInAfterIndexingCannotRedirectReads) {
  HostPort origin = Serve(model_);
  const Manifest m = ManifestFrom(origin);
  uint32_t tokenizer = 0;
  while (m.chunks[tokenizer].file != "tokenizer/tokenizer.json") ++tokenizer;
  // Elsewhere, a file of the same size and mtime; then tokenizer/ becomes a link there.
  const auto real = model_ / "tokenizer" / "tokenizer.json";
  const auto elsewhere = dir_.path() / "elsewhere";
  WriteRandom(elsewhere / "tokenizer.json", std::filesystem::file_size(real), 99);
  struct stat st {};
  ASSERT_EQ(::stat(real.c_str(), &st), 0);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (elsewhere / "tokenizer.json").c_str(), times, 0), 0);
  std::filesystem::rename(model_ / "tokenizer", model_ / "tokenizer.moved");
  std::filesystem::create_directory_symlink(elsewhere, model_ / "tokenizer");
  Json hello;
  UniqueFd fd = testing::OpenData(origin, m.root_digest, &hello);
  ASSERT_EQ(hello["status"], "ok");
  testing::Record r = Ask(fd.get(), "SDRQ", tokenizer);
  EXPECT_EQ(r.status, 1u);
  EXPECT_NE(r.body, ReadAll(elsewhere / "tokenizer.json"));
}

}  // namespace
}  // namespace seedd
