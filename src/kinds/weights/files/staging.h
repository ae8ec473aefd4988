// The staging directory of one fetch (beside its destination, or inside an
// existing empty one): the model's files preallocated to their sizes, a journal
// of verified chunks (a rerun resumes from it), the free-space check, and the
// seal (sync, an optional SHA-256 check of every file) before destination.h
// moves it into place. Nothing partial is ever under the final name.
//
// The journal (.seedd-journal) starts with a header: "SEEDDJNL", a version (u32,
// big-endian, 1) and the root digest (64 hex digits); then one 8-byte record per
// verified chunk: its index and a check (both u32, big-endian; the check is the
// low 32 bits of XXH3-64 over the index and the root digest). A record that
// fails its check, and everything after it, is a torn tail: truncated on resume.
// A journal of another version or root digest starts the directory over.
// Resumed chunks are spot-checked against their digests (the last ones
// journaled and a random sample); one mismatch and every resumed chunk is
// checked, and those that fail are fetched again.
//
// At most kMaxOpenFiles model files are open at once, whatever the model's size.
// Files and directories inside staging are created with openat walks that never
// follow a link.
//
// Thread safety: File, Write, Zero, Commit and Flush may be called from many
// threads once Open returned; Open and Seal from one thread.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/unique_fd.h"
#include "kinds/weights/files/manifest.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr size_t kMaxOpenFiles = 64;
// Directories kept open: an eighth of the descriptor limit, within these.
inline constexpr size_t kMinOpenDirs = 16;
inline constexpr size_t kMaxOpenDirs = 128;
// Syncs touching more files than this sync the whole file system once
// (syncfs) instead of each file: a model of many small files.
inline constexpr size_t kSyncEachFileUpTo = 8;
// The committer gathers the chunks verified within this long of a batch's first
// (or kCommitBatch of them) and syncs and journals them together.
inline constexpr std::chrono::milliseconds kCommitGather{20};
inline constexpr size_t kCommitBatch = 1024;
inline constexpr uint32_t kJournalVersion = 1;

class Staging {
 public:
  Staging(const Manifest& manifest, std::filesystem::path dir);
  // Journals what was committed (waits for the disk).
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Creates the directory or resumes it (FailedPrecondition while another Staging
  // holds it: the directory is locked with flock until this object goes), checks there is space for
  // what is missing; a resumed directory's files are opened and sized, a fresh one's are made as
  // their first chunks land (the rest by Seal). Returns the chunks an earlier run journaled that
  // passed the spot check.
  Result<std::vector<uint32_t>> Open();
  // The open file of manifest path `path`, opened (and another closed once
  // unused) when needed. Files are made and opened outside the lock: writers
  // of different files do not wait for each other's creates.
  Result<std::shared_ptr<UniqueFd>> File(const std::string& path) { return File(path, false); }
  // File(c.file), for chunk `c` to be written now: when `c` is all of its file
  // (a small file), a file this call makes is not sized first, the write
  // gives it its length.
  Result<std::shared_ptr<UniqueFd>> FileFor(const ManifestChunk& c);
  // Writes `n` bytes of chunk `c` into `file` (File(c.file)), `offset` bytes into
  // the chunk. Writers of one file take turns here, asleep, rather than spinning
  // on its lock in the kernel.
  Status Write(const UniqueFd& file, const ManifestChunk& c, uint64_t offset, const char* p,
               size_t n);
  // Makes chunk `c` read zeros (a hole where the file system can punch one): a
  // hole answered by a source is not written, but an earlier attempt at the
  // chunk (a forged copy, a connection cut mid-chunk) may have left bytes there.
  Status Zero(const ManifestChunk& c);
  // Journals chunk `index` (written and verified) once its file is synced, so
  // that a crash never journals an unwritten chunk. The caller does not wait for
  // the disk: a committer thread syncs each file the waiting chunks are in once
  // and writes their records in one write. Returns the error of an earlier
  // commit, if any (then nothing more is journaled).
  Status Commit(uint32_t index);
  // Waits until every chunk passed to Commit is journaled; the first error of a
  // commit, if any.
  Status Flush();
  // Flushes the commits, syncs every file and directory, checks each file's SHA-256 when asked
  // and the MD5 of each file `md5` names (by manifest path, hex: an S3 upstream's
  // ETag) (a mismatch removes the staging directory: every chunk passed its
  // digest, so start over) and removes the journal: the directory is then ready
  // to move into place (destination.h).
  Status Seal(bool verify_sha256, const std::map<std::string, std::string>& md5 = {});

  // The journal's record for chunk `index` of the model with `root_digest`.
  static std::array<char, 8> JournalRecord(uint32_t index, const std::string& root_digest);
  // The journal's header for `root_digest`.
  static std::string JournalHeader(const std::string& root_digest);

 private:
  // Reads the journal: the chunks recorded before the first bad record (the file
  // is truncated there). Empty and *fresh when it is missing or of another model.
  Result<std::vector<uint32_t>> ReadJournal(bool* fresh);
  // Keeps the resumed chunks whose bytes match their digests (see above).
  std::vector<uint32_t> SpotCheck(std::vector<uint32_t> resumed);
  bool ChunkMatches(uint32_t index);
  Status RewriteJournal(const std::vector<uint32_t>& chunks);

  // The directory below dir_ holding manifest path `path` (made when missing,
  // each component opened without following a link), and the file's name in it.
  // Directories are opened once and kept (at most max_dirs_ at once): a model
  // of many small files costs one open per file, not one per path component.
  using DirFd = std::shared_ptr<const UniqueFd>;  // held by whoever uses it, outside the lock
  Result<DirFd> ParentOf(const std::string& path, std::string* name) REQUIRES(files_mu_);
  Result<DirFd> Directory(const std::string& rel) REQUIRES(files_mu_);
  // Opens (creating it when missing) the model file `path`.
  Result<UniqueFd> OpenModelFile(const std::string& path) REQUIRES(files_mu_);
  // File(path); `whole`: the caller writes the file's every byte now, from its start.
  Result<std::shared_ptr<UniqueFd>> File(const std::string& path, bool whole);
  // Sets the length of model file `path`, open as `fd`, to its manifest size.
  Status Size(int fd, const std::string& path) const;

  const Manifest& m_;
  const std::filesystem::path dir_;
  UniqueFd dir_fd_;
  Mutex files_mu_;
  std::map<std::string, DirFd, std::less<>> dirs_ GUARDED_BY(files_mu_);  // by relative path
  const size_t max_dirs_;
  // Directories made (or found) below the staging directory: made once, however
  // often dirs_ forgets their descriptors.
  std::set<std::string> made_ GUARDED_BY(files_mu_);
  std::set<std::string, std::less<>> created_ GUARDED_BY(files_mu_);  // files made and sized
  std::map<std::string, uint64_t, std::less<>> sizes_;  // by manifest path; set by Open
  std::list<std::string> lru_ GUARDED_BY(files_mu_);    // most recent first
  struct OpenFile {
    std::shared_ptr<UniqueFd> fd;
    std::list<std::string>::iterator at;
  };
  std::map<std::string, OpenFile, std::less<>> open_ GUARDED_BY(files_mu_);
  std::map<std::string, std::unique_ptr<Mutex>> write_mu_;  // one per file
  // The committer: syncs the files of the chunks committed since its last turn,
  // then journals them.
  void CommitLoop();
  Status CommitBatch(const std::vector<uint32_t>& chunks);

  Mutex journal_mu_;
  UniqueFd journal_ GUARDED_BY(journal_mu_);
  Mutex commit_mu_;
  std::condition_variable commit_cv_;
  std::vector<uint32_t> to_commit_ GUARDED_BY(commit_mu_);
  uint64_t committed_ GUARDED_BY(commit_mu_) = 0;  // chunks journaled (or failed)
  uint64_t submitted_ GUARDED_BY(commit_mu_) = 0;  // chunks passed to Commit
  Status commit_error_ GUARDED_BY(commit_mu_);
  bool stopping_ GUARDED_BY(commit_mu_) = false;
  int flushing_ GUARDED_BY(commit_mu_) = 0;  // Flush calls waiting
  std::thread committer_;                    // started by the first Commit
};

}  // namespace seedd
