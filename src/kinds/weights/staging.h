// The staging directory of one fetch, beside its destination: the model's files
// preallocated to their sizes, a journal of verified chunks (a rerun resumes from
// it), the free-space check, and the commit (sync, an optional SHA-256 check of
// every file, rename into place). Nothing partial is ever under the final name.
//
// Thread safety: Write, Sync and Journal may be called from many threads once
// Open returned; Open and Commit from one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "kinds/weights/manifest.h"
#include "seedd/status.h"

namespace seedd {

class Staging {
 public:
  Staging(const Manifest& manifest, std::filesystem::path dir);

  // Creates the directory or resumes it (one of another model version starts
  // over), checks there is space for what is missing, opens every file. Returns
  // the chunks an earlier run journaled.
  Result<std::vector<uint32_t>> Open();
  // Writes `n` bytes of chunk `c`, `offset` bytes into the chunk. Writers of one
  // file take turns here, asleep, rather than spinning on its lock in the kernel.
  Status Write(const ManifestChunk& c, uint64_t offset, const char* p, size_t n);
  // Syncs chunk `c`'s file: call before Journal, so that a crash never journals
  // an unwritten chunk.
  Status Sync(const ManifestChunk& c);
  Status Journal(uint32_t index);
  // Syncs every file, checks each file's SHA-256 when asked (a mismatch removes
  // the staging directory: every chunk passed XXH3, so start over), then renames
  // the directory to `into`.
  Status Commit(const std::filesystem::path& into, bool verify_sha256);

 private:
  const Manifest& m_;
  const std::filesystem::path dir_;
  std::map<std::string, UniqueFd> files_;
  std::map<std::string, std::unique_ptr<std::mutex>> write_mu_;  // one per file
  std::mutex journal_mu_;
  UniqueFd journal_;  // GUARDED_BY(journal_mu_)
};

}  // namespace seedd
