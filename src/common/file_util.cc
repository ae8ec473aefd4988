#include "common/file_util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/crypto.h"
#include "common/errno_status.h"

namespace seedd {

namespace {

// Opens `rel` below `dir_fd` one component at a time, none of them followed if
// it is a link; with `create`, missing directories are made and the file is
// created (O_CREAT, `mode`).
Result<UniqueFd> Walk(int dir_fd, const std::string& path, int flags, bool create, unsigned mode) {
  UniqueFd dir(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return ErrnoStatus("dup", errno);
  for (size_t start = 0;;) {
    const size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? slash : slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument(path + " is not a plain relative path");
    }
    const bool last = slash == std::string::npos;
    if (!last && create && ::mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + path.substr(0, slash), errno);
    }
    const int how = last ? flags | (create ? O_CREAT : 0) : O_PATH | O_DIRECTORY;
    UniqueFd next(::openat(dir.get(), part.c_str(), how | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!next.valid()) {
      if (errno == ELOOP || (!last && errno == ENOTDIR)) {
        return Status::InvalidArgument(path + " goes through a link (links are not followed)");
      }
      return ErrnoStatus((create ? "create " : "open ") + path, errno);
    }
    if (last) return next;
    dir = std::move(next);
    start = slash + 1;
  }
}

}  // namespace

Result<UniqueFd> OpenBeneath(int dir_fd, std::string_view rel, int flags) {
  const std::string path(rel);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof(how))));
  if (fd.valid()) return fd;
  if (errno == ELOOP || errno == EXDEV) {
    return Status::InvalidArgument(path + " goes through a link (links are not followed)");
  }
  if (errno != ENOSYS && errno != EPERM) return ErrnoStatus("open " + path, errno);
  return Walk(dir_fd, path, flags, /*create=*/false, 0);  // an older kernel
}

Result<UniqueFd> CreateBeneath(int dir_fd, std::string_view rel, int flags, unsigned mode) {
  return Walk(dir_fd, std::string(rel), flags, /*create=*/true, mode);
}

Result<UniqueFd> OpenDirectory(const std::filesystem::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + dir.string(), errno);
  return fd;
}

Status ReadExactly(int fd, uint64_t offset, char* p, size_t n, const std::string& what) {
  for (size_t done = 0; done < n;) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read " + what, errno);
    if (r == 0) return Status::DataLoss(what + " is shorter than expected");
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status SyncDirectory(const std::filesystem::path& dir) {
  UniqueFd fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + dir.string(), errno);
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + dir.string(), errno);
  return Status::Ok();
}

Status WriteFileAtomic(const std::filesystem::path& path, std::string_view content) {
  const std::filesystem::path tmp =
      path.parent_path() / ("." + path.filename().string() + ".tmp-" + RandomHexOrDie(4));
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return ErrnoStatus("create " + tmp.string(), errno);
  for (size_t done = 0; done < content.size();) {
    ssize_t w = ::write(fd.get(), content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus("write " + tmp.string(), err);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd.get()) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("write " + path.string(), err);
  }
  return SyncDirectory(path.parent_path());
}

}  // namespace seedd
