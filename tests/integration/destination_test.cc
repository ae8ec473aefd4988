// Pulls into the directories people have: a new one, an existing empty one, one
// that already holds the version, and, only when asked, one holding other files.
#include "kinds/weights/files/destination.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>

#include "kinds/weights/files/staging.h"
#include "kinds/weights/weight_shards_kind.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;
using testing::SameTree;
using testing::WriteRandom;

ino_t Inode(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

size_t Entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

class DestinationTest : public testing::WeightsFixture {
 protected:
  fs::path dest() { return dir_.path() / "dest"; }
};

TEST_F(DestinationTest, AnExistingEmptyDirectoryIsFilledInPlace) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  fs::create_directory(dest());
  const ino_t before = Inode(dest());  // a mount point's directory cannot be replaced
  ASSERT_OK(FetchModel(m, {source}, dest(), Options()));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_EQ(Inode(dest()), before);
  EXPECT_FALSE(fs::exists(dest() / ".seedd-staging"));
  EXPECT_FALSE(fs::exists(dir_.path() / ".dest.seedd-staging"));
}

TEST_F(DestinationTest, AStoppedPullIntoAnEmptyDirectoryResumesThere) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  fs::create_directory(dest());
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  FetchOptions options = Options();
  options.cancel = cancel;
  options.progress = [&](uint64_t) { cancel->store(true); };  // after the first chunk
  EXPECT_EQ(FetchModel(m, {source}, dest(), options).code(), StatusCode::kCancelled);
  EXPECT_TRUE(fs::exists(dest() / ".seedd-staging"));  // the only entry: still "empty"
  EXPECT_EQ(Entries(dest()), 1u);
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dest(), Options(), &stats));
  EXPECT_GT(stats.chunks_resumed, 0u);
  EXPECT_EQ(stats.bytes_received + stats.bytes_resumed, m.total_size);
  EXPECT_TRUE(SameTree(model_, dest()));
}

TEST_F(DestinationTest, ACopyOfTheVersionMadeByHandIsUpToDateAndNothingMoves) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  fs::copy(model_, dest(), fs::copy_options::recursive);
  const auto mtime = fs::last_write_time(dest() / "blob.bin");
  FetchStats stats;
  // No source is even asked: the destination is checked against the manifest.
  ASSERT_OK(FetchModel(m, {HostPort{"127.0.0.1", 1}}, dest(), Options(), &stats));
  EXPECT_TRUE(stats.up_to_date);
  EXPECT_EQ(stats.bytes_received, 0u);
  EXPECT_EQ(fs::last_write_time(dest() / "blob.bin"), mtime);
}

TEST_F(DestinationTest, TheSameFilesWithOneByteChangedAreNotThisVersion) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  fs::copy(model_, dest(), fs::copy_options::recursive);
  {
    std::fstream f(dest() / "blob.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000000);
    f.put('\x5a' ^ ReadAll(model_ / "blob.bin")[1000000]);
  }
  Status s = FetchModel(m, {source}, dest(), Options());
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("--replace"), std::string::npos) << s.message();
}

TEST_F(DestinationTest, ADirectoryHoldingOtherFilesIsRefusedBeforeAnyByteMoves) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  testing::WriteRandom(dest() / "notes.txt", 100, 3);
  FetchStats stats;
  Status s = FetchModel(m, {source}, dest(), Options(), &stats);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("holds files that are not this version ('notes.txt')"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("pass --replace"), std::string::npos);
  EXPECT_EQ(stats.bytes_received, 0u);
  EXPECT_EQ(Entries(dest()), 1u);
  EXPECT_FALSE(fs::exists(dir_.path() / ".dest.seedd-staging"));
}

TEST_F(DestinationTest, ReplaceSwapsTheDirectoryForTheModel) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  testing::WriteRandom(dest() / "old" / "weights.bin", 4096, 3);
  FetchOptions options = Options();
  options.replace = true;
  ASSERT_OK(FetchModel(m, {source}, dest(), options));
  EXPECT_TRUE(SameTree(model_, dest()));  // and nothing of the old files
  EXPECT_FALSE(fs::exists(dest() / "old"));
  EXPECT_FALSE(fs::exists(dir_.path() / ".dest.seedd-staging"));
}

TEST_F(DestinationTest, AFileIsNeverADestination) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  testing::WriteRandom(dest(), 10, 1);
  FetchOptions options = Options();
  options.replace = true;
  Status s = FetchModel(m, {source}, dest(), options);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("is not a directory"), std::string::npos) << s.message();
  EXPECT_EQ(fs::file_size(dest()), 10u);
}

TEST_F(DestinationTest, TwoPullsCannotFillOneStagingDirectory) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Staging first(m, dir_.path() / ".dest.seedd-staging");
  ASSERT_OK(first.Open());
  Staging second(m, dir_.path() / ".dest.seedd-staging");
  Result<std::vector<uint32_t>> opened = second.Open();
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("another pull is filling"), std::string::npos);
  Status s = FetchModel(m, {source}, dest(), Options());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
}

}  // namespace
}  // namespace seedd
