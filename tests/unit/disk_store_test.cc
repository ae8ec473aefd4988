#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "seedd/artifact_store.h"
#include "support/test_util.h"

namespace seedd {
namespace {

using testing::TempDir;

ArtifactKey Key(const std::string& file = "table.json") {
  return *ArtifactKey::Make("flashinfer_autotune", "0123456789abcdef", file);
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ArtifactKey, JoinsPartsWithSlashes) {
  EXPECT_EQ(Key().ToString(), "flashinfer_autotune/0123456789abcdef/table.json");
  auto parsed = ArtifactKey::Parse("a/b/c");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->filename(), "c");
  EXPECT_FALSE(ArtifactKey::Parse("a/b").ok());
  EXPECT_FALSE(ArtifactKey::Parse("a/b/c/d").ok());  // '/' inside the file name
}

TEST(ArtifactKey, RejectsTraversalSeparatorsNulAndOverlongParts) {
  const std::string nul("a\0b", 3);
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string("../etc"),
        std::string("/etc/passwd"), std::string("a\\b"), nul, std::string(256, 'a'),
        std::string(".seedd~tmp")}) {
    EXPECT_FALSE(ArtifactKey::Make("k", "h", bad).ok()) << bad;
    EXPECT_FALSE(ArtifactKey::Make(bad, "h", "f").ok()) << bad;
    EXPECT_FALSE(ArtifactKey::Make("k", bad, "f").ok()) << bad;
  }
  EXPECT_TRUE(ArtifactKey::Make("k", "h", std::string(255, 'a')).ok());
  auto r = ArtifactKey::Make("k", "..", "f");
  EXPECT_EQ(r.status().message(), "invalid config_hash '..': '.' and '..' are not names");
}

TEST(DiskArtifactStore, RoundTripsMissesAndOverwrites) {
  TempDir dir;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path());
  auto miss = store->Get(Key());
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  ASSERT_TRUE(store->Put(Key(), std::string("v1\0x", 4)).ok());
  EXPECT_EQ(ReadFile(dir.path() / "0123456789abcdef" / "table.json"), std::string("v1\0x", 4));
  ASSERT_TRUE(store->Put(Key(), "version two").ok());
  EXPECT_EQ(**store->Get(Key()), "version two");
  ASSERT_TRUE(store->Put(Key("empty"), "").ok());
  EXPECT_EQ(**store->Get(Key("empty")), "");
}

TEST(DiskArtifactStore, WithoutAKindMapsTheKindToASubdirectory) {
  TempDir dir;
  auto store = NewDiskArtifactStore("", dir.path());
  ASSERT_TRUE(store->Put(Key(), "x").ok());
  EXPECT_EQ(ReadFile(dir.path() / "flashinfer_autotune" / "0123456789abcdef" / "table.json"), "x");
}

TEST(DiskArtifactStore, RejectsKeysOfAnotherKind) {
  TempDir dir;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path());
  auto other = *ArtifactKey::Make("weights", "0123456789abcdef", "f");
  EXPECT_FALSE(store->Put(other, "x").ok());
  EXPECT_FALSE(store->Get(other).ok());
}

TEST(DiskArtifactStore, NeverFollowsLinksOutOfTheRoot) {
  TempDir dir;
  TempDir outside;
  std::filesystem::create_directories(dir.path() / "root");
  std::filesystem::create_directory_symlink(outside.path(),
                                            dir.path() / "root" / "0123456789abcdef");
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path() / "root");
  EXPECT_FALSE(store->Put(Key(), "escaped").ok());
  EXPECT_TRUE(std::filesystem::is_empty(outside.path()));
  // A file link inside a real directory is not followed either.
  std::filesystem::remove(dir.path() / "root" / "0123456789abcdef");
  std::filesystem::create_directories(dir.path() / "root" / "0123456789abcdef");
  std::ofstream(outside.path() / "secret") << "secret";
  std::filesystem::create_symlink(outside.path() / "secret",
                                  dir.path() / "root" / "0123456789abcdef" / "table.json");
  EXPECT_FALSE(store->Get(Key()).ok());
}

// GetNow answers what it can without blocking (a value or a miss it finds in the
// kernel's caches) and leaves the rest to Get: a value over its bound, a link,
// something that is not a file.
TEST(DiskArtifactStore, GetNowAnswersFromTheCachesAndLeavesTheRestToGet) {
  TempDir dir;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path() / "root");
  ArtifactStore::Now now;
  now.value = "stale";
  ASSERT_TRUE(store->GetNow(Key(), 1024, {}, &now));  // no root yet: a miss
  EXPECT_FALSE(now.value.has_value());
  ASSERT_TRUE(store->Put(Key(), "tuned").ok());  // just written: in the page cache
  ASSERT_TRUE(store->GetNow(Key(), 1024, {}, &now));
  EXPECT_EQ(now.value, "tuned");
  EXPECT_FALSE(now.version.empty());
  ASSERT_TRUE(store->Put(Key("empty.json"), "").ok());
  ASSERT_TRUE(store->GetNow(Key("empty.json"), 1024, {}, &now));
  EXPECT_EQ(now.value, "");
  // A name never looked up may need the disk to tell; once Get looked, it is known.
  if (!store->GetNow(Key("absent.json"), 1024, {}, &now)) {
    EXPECT_FALSE(store->Get(Key("absent.json"))->has_value());
  }
  now.value = "stale";
  ASSERT_TRUE(store->GetNow(Key("absent.json"), 1024, {}, &now));
  EXPECT_FALSE(now.value.has_value());
  EXPECT_TRUE(now.version.empty());
  // Over the bound: Get reads it.
  ASSERT_TRUE(store->Put(Key("big.json"), std::string(2048, 'x')).ok());
  EXPECT_FALSE(store->GetNow(Key("big.json"), 1024, {}, &now));
  EXPECT_EQ(store->Get(Key("big.json"))->value().size(), 2048u);
  // A link is not followed: Get says why.
  TempDir outside;
  std::ofstream(outside.path() / "secret") << "secret";
  std::filesystem::create_symlink(outside.path() / "secret",
                                  dir.path() / "root" / "0123456789abcdef" / "link.json");
  EXPECT_FALSE(store->GetNow(Key("link.json"), 1024, {}, &now));
  EXPECT_FALSE(store->Get(Key("link.json")).ok());
  std::filesystem::create_directory(dir.path() / "root" / "0123456789abcdef" / "dir.json");
  EXPECT_FALSE(store->GetNow(Key("dir.json"), 1024, {}, &now));
  // A store that cannot answer without blocking (here: in memory, by default) says so.
  auto memory = NewMemoryArtifactStore();
  ASSERT_TRUE(memory->Put(Key(), "tuned").ok());
  EXPECT_FALSE(memory->GetNow(Key(), 1024, {}, &now));
}

// With the version of bytes read before, GetNow tells whether they are still
// what is stored: unchanged only for the same file with the same size and
// times; a new value, a write in place of the same size, a removal or a link
// put in its place are read (or refused) as without a version.
TEST(DiskArtifactStore, GetNowTellsWhetherTheBytesOfAKnownVersionAreStillStored) {
  TempDir dir;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path() / "root");
  const auto file = dir.path() / "root" / "0123456789abcdef" / "table.json";
  ASSERT_TRUE(store->Put(Key(), "tuned-1").ok());
  ArtifactStore::Now first;
  ASSERT_TRUE(store->GetNow(Key(), 1024, {}, &first));
  ArtifactStore::Now again;
  ASSERT_TRUE(store->GetNow(Key(), 1024, first.version, &again));
  EXPECT_TRUE(again.unchanged);
  EXPECT_FALSE(again.value.has_value());
  EXPECT_EQ(again.version, first.version);
  // A new value (a new file renamed into place).
  ASSERT_TRUE(store->Put(Key(), "tuned-2").ok());
  ASSERT_TRUE(store->GetNow(Key(), 1024, first.version, &again));
  EXPECT_FALSE(again.unchanged);
  EXPECT_EQ(again.value, "tuned-2");
  EXPECT_NE(again.version, first.version);
  // Written in place, same size.
  const std::string second = again.version;
  { std::ofstream(file, std::ios::in | std::ios::out) << "tuned-3"; }
  ASSERT_TRUE(store->GetNow(Key(), 1024, second, &again));
  EXPECT_FALSE(again.unchanged);
  EXPECT_EQ(again.value, "tuned-3");
  // Removed: a miss, whatever the version said.
  const std::string third = again.version;
  ASSERT_TRUE(store->Delete(Key()).ok());
  ASSERT_TRUE(store->GetNow(Key(), 1024, third, &again));
  EXPECT_FALSE(again.unchanged);
  EXPECT_FALSE(again.value.has_value());
  // A link to a file outside, in its place: refused, not unchanged.
  TempDir outside;
  std::ofstream(outside.path() / "secret") << "tuned-3";
  std::filesystem::create_symlink(outside.path() / "secret", file);
  EXPECT_FALSE(store->GetNow(Key(), 1024, third, &again));
}

TEST(DiskArtifactStore, RefusesFilesOverTheSizeLimit) {
  TempDir dir;
  DiskStoreOptions options;
  options.max_value_bytes = 10;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path(), options);
  ASSERT_TRUE(store->Put(Key(), std::string(11, 'x')).ok());
  auto r = store->Get(Key());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the limit of 10"), std::string::npos);
}

// Values are distinguishable and self-checking: every byte equals the first.
std::string Value(int i, size_t size) { return std::string(size, static_cast<char>('A' + i)); }

bool IsWholeValue(const std::string& v, size_t size) {
  return v.size() == size && v.find_first_not_of(v[0]) == std::string::npos;
}

TEST(DiskArtifactStore, ConcurrentWritersAndReadersNeverSeeATornValue) {
  TempDir dir;
  auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path());
  constexpr size_t kSize = 1 << 20;
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!stop) {
      auto r = store->Get(Key());
      if (r.ok() && r->has_value()) {
        ++reads;
        if (!IsWholeValue(**r, kSize)) ++torn;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 8; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(store->Put(Key(), Value(w, kSize)).ok());
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0);
  EXPECT_TRUE(IsWholeValue(**store->Get(Key()), kSize));
  // No temporary file is left behind by writers that finished.
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path() / "0123456789abcdef")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

TEST(DiskArtifactStore, AWriterKilledMidwayLeavesNoPartialFile) {
  TempDir dir;
  constexpr size_t kSize = 32 << 20;
  for (int round = 0; round < 3; ++round) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path());
      for (int i = 0;; ++i) (void)store->Put(Key(), Value(i % 20, kSize));
    }
    auto store = NewDiskArtifactStore("flashinfer_autotune", dir.path());
    // Kill the writer while it writes: wait until a temporary file exists.
    testing::WaitUntil([&] {
      std::error_code ec;
      for (auto& e : std::filesystem::directory_iterator(dir.path() / "0123456789abcdef", ec)) {
        if (e.path().filename().string().rfind(".seedd~", 0) == 0) return true;
      }
      return false;
    });
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    auto r = store->Get(Key());
    ASSERT_TRUE(r.ok());
    if (r->has_value()) {
      EXPECT_TRUE(IsWholeValue(**r, kSize));
    }
  }
}

TEST(MemoryArtifactStore, RoundTripsAndMisses) {
  auto store = NewMemoryArtifactStore();
  EXPECT_FALSE(store->Get(Key())->has_value());
  ASSERT_TRUE(store->Put(Key(), "v").ok());
  EXPECT_EQ(**store->Get(Key()), "v");
}

}  // namespace
}  // namespace seedd
