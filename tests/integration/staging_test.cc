// Staging you can crash in: the journal resumes what was verified and nothing
// else, staging never follows a link, and a failing destination is the
// destination's fault, not a source's.
#include "kinds/weights/files/staging.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>

#include "kinds/weights/weight_shards_kind.h"
#include "support/test_util.h"
#include "support/weights_fixture.h"

namespace seedd {
namespace {

using testing::ReadAll;
using testing::SameTree;
using testing::WriteRandom;

class StagingTest : public testing::WeightsFixture {
 protected:
  // A fetch from a source that is down: the staging directory (with its
  // journal's header) stays, and nothing else happened.
  std::filesystem::path Interrupted(const Manifest& m) {
    EXPECT_FALSE(FetchModel(m, {HostPort{"127.0.0.1", 1}}, dest(), Options()).ok());
    EXPECT_TRUE(std::filesystem::exists(staging()));
    return staging();
  }
  std::filesystem::path dest() { return dir_.path() / "dest"; }
  std::filesystem::path staging() { return dir_.path() / ".dest.seedd-staging"; }
  // As a fetch that verified chunks `chunks` leaves them: bytes (from `from`,
  // when given) and journal records. Returns their bytes.
  uint64_t Verified(const Manifest& m, const std::vector<uint32_t>& chunks,
                    const std::filesystem::path& from) {
    uint64_t bytes = 0;
    std::ofstream journal(staging() / ".seedd-journal", std::ios::binary | std::ios::app);
    for (uint32_t i : chunks) {
      const ManifestChunk& c = m.chunks[i];
      if (!from.empty()) {
        std::string data = ReadAll(from / c.file).substr(c.offset, c.length);
        // A fetch makes a file as its first chunk lands.
        std::filesystem::create_directories((staging() / c.file).parent_path());
        std::ofstream(staging() / c.file, std::ios::binary | std::ios::app).flush();
        std::fstream f(staging() / c.file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(c.offset));
        f.write(data.data(), static_cast<std::streamsize>(data.size()));
      }
      const auto rec = Staging::JournalRecord(i, m.root_digest);
      journal.write(rec.data(), static_cast<std::streamsize>(rec.size()));
      bytes += c.length;
    }
    return bytes;
  }
  // Writes chunk `i` of `m` (its bytes from the model) through `stage`.
  void WriteChunk(Staging& stage, const Manifest& m, uint32_t i) {
    const ManifestChunk& c = m.chunks[i];
    const std::string data = ReadAll(model_ / c.file).substr(c.offset, c.length);
    auto file = stage.File(c.file);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_OK(stage.Write(**file, c, 0, data.data(), data.size()));
  }
  std::vector<uint32_t> Even(const Manifest& m) {
    std::vector<uint32_t> chunks;
    for (uint32_t i = 0; i < m.chunks.size(); i += 2) chunks.push_back(i);
    return chunks;
  }
};

TEST_F(StagingTest, ARestartedFetchTransfersOnlyTheMissingChunks) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Interrupted(m);
  const uint64_t resumed = Verified(m, Even(m), model_);
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dest(), Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_EQ(stats.bytes_received, m.total_size - resumed);
  EXPECT_EQ(stats.chunks_resumed, (m.chunks.size() + 1) / 2);
}

// Commit journals a chunk on the committer thread, after its file is synced: by
// Flush every committed chunk is in the journal, and chunks committed but not
// flushed when the staging goes are journaled all the same; a rerun resumes
// exactly those.
TEST_F(StagingTest, CommittedChunksAreJournaledAndResumedAfterFlushOrTheEnd) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  ASSERT_GE(m.chunks.size(), 4u);
  {
    Staging stage(m, staging());
    auto resumed = stage.Open();
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    EXPECT_TRUE(resumed->empty());
    WriteChunk(stage, m, 0);
    ASSERT_OK(stage.Commit(0));
    WriteChunk(stage, m, 2);
    ASSERT_OK(stage.Commit(2));
    ASSERT_OK(stage.Flush());
    EXPECT_EQ(std::filesystem::file_size(staging() / ".seedd-journal"),
              Staging::JournalHeader(m.root_digest).size() + 2 * 8);
    WriteChunk(stage, m, 3);
    ASSERT_OK(stage.Commit(3));  // committed, never flushed
  }
  Staging stage(m, staging());
  auto resumed = stage.Open();
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  std::vector<uint32_t> chunks = *resumed;
  std::sort(chunks.begin(), chunks.end());
  EXPECT_EQ(chunks, (std::vector<uint32_t>{0, 2, 3}));
}

// A journal that cannot be written (here: the file-size limit, EFBIG, as a full
// or failing disk would refuse it) is reported by Flush and by every later
// Commit, nothing after the failure is journaled, and a rerun resumes exactly
// the chunks journaled before it.
TEST_F(StagingTest, AJournalWriteThatFailsIsReportedAndNothingAfterItIsJournaled) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  ASSERT_GE(m.chunks.size(), 4u);
  const auto journal = staging() / ".seedd-journal";
  {
    Staging stage(m, staging());
    ASSERT_TRUE(stage.Open().ok());
    WriteChunk(stage, m, 0);
    WriteChunk(stage, m, 1);
    ASSERT_OK(stage.Commit(0));
    ASSERT_OK(stage.Commit(1));
    ASSERT_OK(stage.Flush());
    WriteChunk(stage, m, 2);
    // From here on no file of this process may grow past the journal's size.
    const auto journaled = std::filesystem::file_size(journal);
    struct rlimit before {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
    auto* const xfsz = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = before;
    limit.rlim_cur = journaled;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0) << std::strerror(errno);
    ASSERT_OK(stage.Commit(2));  // queued: the committer's write fails
    Status flushed = stage.Flush();
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
    ::signal(SIGXFSZ, xfsz);
    EXPECT_EQ(flushed.code(), StatusCode::kResourceExhausted) << flushed.ToString();
    EXPECT_NE(flushed.message().find(journal.string()), std::string::npos) << flushed.message();
    EXPECT_NE(flushed.message().find("File too large"), std::string::npos) << flushed.message();
    WriteChunk(stage, m, 3);
    Status later = stage.Commit(3);  // the disk is fine again: still refused
    EXPECT_EQ(later.code(), StatusCode::kResourceExhausted) << later.ToString();
    EXPECT_EQ(stage.Flush().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(std::filesystem::file_size(journal), journaled);
  }
  Staging stage(m, staging());
  auto resumed = stage.Open();
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  std::vector<uint32_t> chunks = *resumed;
  std::sort(chunks.begin(), chunks.end());
  EXPECT_EQ(chunks, (std::vector<uint32_t>{0, 1}));
}

TEST_F(StagingTest, ATornJournalTailIsTruncatedAndTheRecordsBeforeItResume) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Interrupted(m);
  const uint64_t resumed = Verified(m, {0, 1, 2}, model_);
  {
    // A crash mid-append: a record whose check is wrong, then half a record.
    std::ofstream journal(staging() / ".seedd-journal", std::ios::binary | std::ios::app);
    auto rec = Staging::JournalRecord(3, m.root_digest);
    rec[7] = static_cast<char>(rec[7] ^ 1);
    journal.write(rec.data(), static_cast<std::streamsize>(rec.size()));
    journal.write("\0\0\0", 3);
  }
  testing::LogCapture logs;
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dest(), Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_EQ(stats.chunks_resumed, 3u);
  EXPECT_EQ(stats.bytes_received, m.total_size - resumed);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "torn tail of 11 bytes")) << logs.Dump();
}

TEST_F(StagingTest, AJournaledChunkWhoseBytesDoNotMatchIsFetchedAgain) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Interrupted(m);
  // Journaled, but the bytes never reached the disk (a disk that lied about a
  // sync): the staging files still hold zeros there.
  Verified(m, Even(m), {});
  testing::LogCapture logs;
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dest(), Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_EQ(stats.chunks_resumed, 0u);
  EXPECT_EQ(stats.bytes_received, m.total_size);
  EXPECT_TRUE(logs.Contains(spdlog::level::warn, "does not match; fetching it again"))
      << logs.Dump();
}

// A small file arrives as one chunk: the file made for it gets its length
// from the write (no sizing call); one that was there before the write (made
// by another writer, or left behind) is sized first, so no stale tail stays.
// A file of several chunks is sized at once, whichever chunk lands first.
TEST_F(StagingTest, AWholeFileChunkGivesItsFileItsLengthAndAFileFoundThereIsSizedFirst) {
  WriteRandom(model_ / "small" / "a.bin", 500, 9);
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  std::map<std::string, uint64_t> sizes;
  for (const ManifestFile& f : m.files) sizes[f.path] = f.size;
  std::vector<uint32_t> whole;
  uint32_t partial = UINT32_MAX;
  for (uint32_t i = 0; i < m.chunks.size(); ++i) {
    const ManifestChunk& c = m.chunks[i];
    if (c.offset == 0 && c.length == sizes[c.file]) whole.push_back(i);
    if (c.offset > 0 && partial == UINT32_MAX) partial = i;
  }
  ASSERT_GE(whole.size(), 2u);
  ASSERT_NE(partial, UINT32_MAX);
  Staging stage(m, staging());
  ASSERT_TRUE(stage.Open().ok());
  auto write = [&](uint32_t i) {
    const ManifestChunk& c = m.chunks[i];
    const std::string data = ReadAll(model_ / c.file).substr(c.offset, c.length);
    auto file = stage.FileFor(c);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_OK(stage.Write(**file, c, 0, data.data(), data.size()));
  };
  // Made by this write.
  const ManifestChunk& first = m.chunks[whole[0]];
  write(whole[0]);
  EXPECT_EQ(ReadAll(staging() / first.file), ReadAll(model_ / first.file));
  // Found there, longer than the file: sized before it is written.
  const ManifestChunk& found = m.chunks[whole[1]];
  std::filesystem::create_directories((staging() / found.file).parent_path());
  std::ofstream(staging() / found.file, std::ios::binary)
      << std::string(found.length * 2 + 100, 'x');
  write(whole[1]);
  EXPECT_EQ(ReadAll(staging() / found.file), ReadAll(model_ / found.file));
  // A file of several chunks: its full length as soon as it is opened.
  const ManifestChunk& piece = m.chunks[partial];
  auto file = stage.FileFor(piece);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(staging() / piece.file), sizes[piece.file]);
}

TEST_F(StagingTest, AJournalOfAnotherVersionStartsOver) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Interrupted(m);
  Verified(m, Even(m), model_);
  Manifest other = m;
  other.root_digest = std::string(64, 'a');  // the journal's records name another version
  {
    std::fstream f(staging() / ".seedd-journal", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write(other.root_digest.data(), 64);
  }
  FetchStats stats;
  ASSERT_OK(FetchModel(m, {source}, dest(), Options(), &stats));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_EQ(stats.chunks_resumed, 0u);
}

TEST_F(StagingTest, ALinkPlantedInStagingIsNotFollowed) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  Interrupted(m);
  // tokenizer/ becomes a link to a directory outside: resuming must not write there.
  const auto outside = dir_.path() / "outside";
  std::filesystem::create_directories(outside);
  std::filesystem::remove_all(staging() / "tokenizer");
  std::filesystem::create_directory_symlink(outside, staging() / "tokenizer");
  Status s = FetchModel(m, {source}, dest(), Options());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("links are not followed"), std::string::npos) << s.message();
  EXPECT_TRUE(std::filesystem::is_empty(outside));
  EXPECT_FALSE(std::filesystem::exists(dest()));
}

TEST_F(StagingTest, AFullDiskEndsThePullWithALocalErrorAndBlamesNoSource) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  const auto mnt = dir_.path() / "small";
  std::filesystem::create_directories(mnt);
  // Room for the model (about 5.5 MB) when the pull starts...
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m"), 0) << std::strerror(errno);
  FetchOptions o = Options();
  o.staged = [&](const std::filesystem::path&) {
    // ...and none once it has: someone else filled the disk.
    std::ofstream filler(mnt / "filler", std::ios::binary);
    std::string block(1 << 20, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  };
  FetchStats stats;
  Status s = FetchModel(m, {source}, mnt / "dest", o, &stats);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rerun to resume"), std::string::npos) << s.message();
  EXPECT_TRUE(stats.sources_dropped.empty());
  EXPECT_FALSE(std::filesystem::exists(mnt / "dest"));
  ::umount2(mnt.c_str(), MNT_DETACH);
}

TEST_F(StagingTest, AStoppedPullReturnsCancelledAndKeepsItsJournal) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  FetchOptions o = Options();
  auto stop = std::make_shared<std::atomic<bool>>(false);
  o.cancel = stop;
  o.staged = [&](const std::filesystem::path&) { stop->store(true); };  // before any chunk
  Status s = FetchModel(m, {source}, dest(), o);
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  // Stopped before any chunk: nothing is said to be kept.
  EXPECT_EQ(s.message(), "the pull was stopped before any chunk was verified");
  EXPECT_FALSE(std::filesystem::exists(dest()));
  EXPECT_TRUE(std::filesystem::exists(staging() / ".seedd-journal"));
  ASSERT_OK(FetchModel(m, {source}, dest(), Options()));
  EXPECT_TRUE(SameTree(model_, dest()));
}

TEST_F(StagingTest, ADestinationWithATrailingSlashIsTheDirectoryItNames) {
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  ASSERT_OK(FetchModel(m, {source}, dest().string() + "/", Options()));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "..seedd-staging"));
  for (const std::string bad : {"", ".", "/"}) {
    Status s = FetchModel(m, {source}, bad, Options());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "': " << s.ToString();
    EXPECT_NE(s.message().find("does not name a directory"), std::string::npos);
  }
}

TEST_F(StagingTest, AModelOfFiveThousandFilesPullsWithAFewOpenFiles) {
  for (int i = 0; i < 5000; ++i) {
    WriteRandom(model_ / "many" / std::to_string(i % 50) / (std::to_string(i) + ".bin"), 64,
                static_cast<unsigned>(i));
  }
  HostPort source = Serve(model_);
  Manifest m = ManifestFrom(source);
  ASSERT_GT(m.files.size(), 5000u);
  // Count what this process has open at the peak of the pull.
  size_t peak = 0;
  FetchOptions o = Options();
  o.progress = [&](uint64_t) {
    const auto open = std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                    std::filesystem::directory_iterator());
    peak = std::max(peak, static_cast<size_t>(open));
  };
  ASSERT_OK(FetchModel(m, {source}, dest(), o));
  EXPECT_TRUE(SameTree(model_, dest()));
  EXPECT_LT(peak, 512u) << "open files at the peak";
}

}  // namespace
}  // namespace seedd
