// File helpers that do not follow links where a peer or a swapped link could
// redirect them, and atomic small-file writes. Thread-safe (no shared state).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "seedd/status.h"

namespace seedd {

// Opens `rel` below the directory `dir_fd` without following any link on the way
// and without leaving it: one openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where
// the kernel has it, else a walk of O_NOFOLLOW opens. A link on the way is
// InvalidArgument; a missing part NotFound.
Result<UniqueFd> OpenBeneath(int dir_fd, std::string_view rel, int flags);

// Opens (with O_CREAT, `mode`) `rel` below `dir_fd`, creating the directories on
// the way, none of them followed if it is a link.
Result<UniqueFd> CreateBeneath(int dir_fd, std::string_view rel, int flags, unsigned mode);

// Opens a directory to resolve paths below it (O_PATH | O_DIRECTORY).
Result<UniqueFd> OpenDirectory(const std::filesystem::path& dir);

// Modification time in nanoseconds since the epoch.
inline int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Reads exactly `n` bytes at `offset` of `fd`; `what` names the file in errors
// (DataLoss when it is shorter).
Status ReadExactly(int fd, uint64_t offset, char* p, size_t n, const std::string& what);

// Makes a rename or a new entry in `dir` durable.
Status SyncDirectory(const std::filesystem::path& dir);

// Writes `content` to `path` through a temporary file in the same directory:
// fsync, rename, fsync of the directory. A reader never sees half of it.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content);

}  // namespace seedd
