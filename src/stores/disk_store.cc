#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"
#include "seedd/artifact_store.h"

namespace seedd {
namespace {

// A file's identity and state: device, inode, size, modification and change
// times (nanoseconds). A write in place changes the change time; since Linux 6.13
// a change right after a stat gets a fine-grained time, so it differs even
// within one clock tick.
std::string VersionOf(const struct stat& st) {
  const uint64_t fields[] = {
      static_cast<uint64_t>(st.st_dev),          static_cast<uint64_t>(st.st_ino),
      static_cast<uint64_t>(st.st_size),         static_cast<uint64_t>(st.st_mtim.tv_sec),
      static_cast<uint64_t>(st.st_mtim.tv_nsec), static_cast<uint64_t>(st.st_ctim.tv_sec),
      static_cast<uint64_t>(st.st_ctim.tv_nsec)};
  return std::string(reinterpret_cast<const char*>(fields), sizeof(fields));
}

class DiskArtifactStore final : public ArtifactStore {
 public:
  DiskArtifactStore(std::string kind, std::filesystem::path root, DiskStoreOptions options)
      : kind_(std::move(kind)), root_(std::move(root)), options_(options) {}

  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    Result<std::vector<std::string>> dirs = DirsFor(key);
    if (!dirs.ok()) return dirs.status();
    Result<UniqueFd> opened = OpenForRead(*dirs, key);
    if (!opened.ok()) {
      if (opened.status().code() == StatusCode::kNotFound) return std::optional<std::string>();
      return opened.status();
    }
    UniqueFd fd = std::move(*opened);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + PathFor(key), errno);
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(PathFor(key) + " is not a regular file");
    }
    if (static_cast<uint64_t>(st.st_size) > options_.max_value_bytes) {
      return Status::ResourceExhausted(PathFor(key) + " has " + std::to_string(st.st_size) +
                                       " bytes, over the limit of " +
                                       std::to_string(options_.max_value_bytes));
    }
    std::string data(static_cast<size_t>(st.st_size), '\0');
    size_t have = 0;
    while (have < data.size()) {
      ssize_t n = ::read(fd.get(), data.data() + have, data.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("read " + PathFor(key), errno);
      if (n == 0) break;  // truncated underneath us: return what the file holds now
      have += static_cast<size_t>(n);
    }
    data.resize(have);
    return std::optional<std::string>(std::move(data));
  }

  // With a `known` version: one fstatat of the path; the same file unchanged is
  // answered so. Otherwise one openat2 from the cache only (RESOLVE_CACHED: EAGAIN
  // where a lookup would read the disk), fstat, and one preadv2(RWF_NOWAIT) of the
  // whole file (EAGAIN where its pages are not in the page cache).
  bool GetNow(const ArtifactKey& key, size_t max_bytes, std::string_view known, Now* now) override {
    Result<std::vector<std::string>> dirs = DirsFor(key);
    if (!dirs.ok()) return false;
    std::string rel;
    for (const std::string& d : *dirs) rel += d + "/";
    rel += key.filename();
    *now = Now{};
    if (!known.empty()) {
      // The bytes were read a moment ago, so the path's names are in the dentry
      // cache. The path is not resolved beneath the root here, but only the very
      // file whose bytes the caller holds (same device, inode, size and times)
      // is answered as unchanged; anything else is opened as below.
      struct stat st {};
      if (::fstatat(AT_FDCWD, (root_ / rel).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode) && VersionOf(st) == known) {
        now->version = std::string(known);
        now->unchanged = true;
        return true;
      }
    }
    UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) {
      return errno == ENOENT;  // nothing stored yet: a miss
    }
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_CACHED;
    UniqueFd fd(
        static_cast<int>(::syscall(SYS_openat2, root.get(), rel.c_str(), &how, sizeof(how))));
    if (!fd.valid()) {
      // EAGAIN (not cached), a link, no openat2: Get says. ENOENT: a miss.
      return errno == ENOENT;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) >
            std::min<uint64_t>(max_bytes, options_.max_value_bytes)) {
      return false;
    }
    std::string data(static_cast<size_t>(st.st_size), '\0');
    if (!data.empty()) {
      iovec iov{data.data(), data.size()};
      const ssize_t n = ::preadv2(fd.get(), &iov, 1, 0, RWF_NOWAIT);
      if (n != static_cast<ssize_t>(data.size())) return false;  // EAGAIN, short, changed
    }
    // Taken before the read: a change during it makes the next look differ.
    now->version = VersionOf(st);
    now->value = std::move(data);
    return true;
  }

  Status Put(const ArtifactKey& key, std::string_view value) override {
    Result<std::vector<std::string>> dirs = DirsFor(key);
    if (!dirs.ok()) return dirs.status();
    Result<UniqueFd> dir = OpenDirs(*dirs, /*create=*/true);
    if (!dir.ok()) return dir.status();
    const std::string tmp = ".seedd~" + RandomHexOrDie(8) + "~" + key.filename().substr(0, 200);
    UniqueFd fd(::openat(dir->get(), tmp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) return ErrnoStatus("create a temporary file for " + PathFor(key), errno);
    Status st = WriteAndSync(fd.get(), value, key);
    fd.Reset();
    if (st.ok() && ::renameat(dir->get(), tmp.c_str(), dir->get(), key.filename().c_str()) != 0) {
      st = ErrnoStatus("rename into " + PathFor(key), errno);
    }
    if (!st.ok()) {
      ::unlinkat(dir->get(), tmp.c_str(), 0);
      return st;
    }
    // The rename is durable only once the directory is.
    if (::fsync(dir->get()) != 0)
      return ErrnoStatus("fsync the directory of " + PathFor(key), errno);
    return Status::Ok();
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::vector<std::string> keys;
    std::error_code ec;
    if (!std::filesystem::exists(root_, ec)) return keys;
    // Directories at the key's depth only; links, temporaries and stray files are skipped.
    auto subdirs = [](const std::filesystem::path& dir) {
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.is_directory(ec) && !e.is_symlink(ec)) names.push_back(e.path().filename());
      }
      return names;
    };
    std::vector<std::pair<std::string, std::filesystem::path>> dirs;  // key prefix, path
    if (kind_.empty()) {
      for (const auto& k : subdirs(root_)) {
        for (const auto& h : subdirs(root_ / k)) dirs.push_back({k + "/" + h + "/", root_ / k / h});
      }
    } else {
      for (const auto& h : subdirs(root_)) dirs.push_back({kind_ + "/" + h + "/", root_ / h});
    }
    for (const auto& [key_prefix, dir] : dirs) {
      // Skip whole directories that cannot match.
      size_t n = std::min(prefix.size(), key_prefix.size());
      if (key_prefix.compare(0, n, prefix.substr(0, n)) != 0) continue;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        std::string name = e.path().filename();
        if (!e.is_regular_file(ec) || e.is_symlink(ec)) continue;
        if (!ArtifactKey::ValidatePart("filename", name).ok()) continue;
        std::string key = key_prefix + name;
        if (key.compare(0, prefix.size(), prefix) == 0) keys.push_back(std::move(key));
      }
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status Delete(const ArtifactKey& key) override {
    Result<std::vector<std::string>> dirs = DirsFor(key);
    if (!dirs.ok()) return dirs.status();
    Result<UniqueFd> dir = OpenDirs(*dirs, /*create=*/false);
    if (!dir.ok()) {
      return dir.status().code() == StatusCode::kNotFound ? Status::Ok() : dir.status();
    }
    if (::unlinkat(dir->get(), key.filename().c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoStatus("delete " + PathFor(key), errno);
    }
    if (::fsync(dir->get()) != 0)
      return ErrnoStatus("fsync the directory of " + PathFor(key), errno);
    return Status::Ok();
  }

  std::string Describe() const override { return "disk:" + root_.string(); }

 private:
  Result<std::vector<std::string>> DirsFor(const ArtifactKey& key) const {
    if (kind_.empty()) return std::vector<std::string>{key.kind(), key.config_hash()};
    if (key.kind() != kind_) {
      return Status::InvalidArgument("key " + key.ToString() + " is not of kind '" + kind_ + "'");
    }
    return std::vector<std::string>{key.config_hash()};
  }

  std::string PathFor(const ArtifactKey& key) const {
    std::filesystem::path p = root_;
    if (kind_.empty()) p /= key.kind();
    return (p / key.config_hash() / key.filename()).string();
  }

  // Opens the file of `key` for reading without following any link below root: one
  // openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it, else a
  // walk of O_NOFOLLOW opens. NotFound when any part is missing.
  Result<UniqueFd> OpenForRead(const std::vector<std::string>& dirs, const ArtifactKey& key) const {
    UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return ErrnoStatus("open " + root_.string(), errno);
    std::string rel;
    for (const std::string& d : dirs) rel += d + "/";
    rel += key.filename();
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    UniqueFd fd(
        static_cast<int>(::syscall(SYS_openat2, root.get(), rel.c_str(), &how, sizeof(how))));
    if (fd.valid()) return fd;
    if (errno == ELOOP || errno == EXDEV) {
      return Status::InvalidArgument(PathFor(key) +
                                     " goes through a link (links are not followed)");
    }
    if (errno != ENOSYS && errno != EPERM) return ErrnoStatus("open " + PathFor(key), errno);
    Result<UniqueFd> dir = OpenDirs(dirs, /*create=*/false);
    if (!dir.ok()) return dir.status();
    fd.Reset(::openat(dir->get(), key.filename().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("open " + PathFor(key), errno);
    return fd;
  }

  // Opens root, then each directory below it without following links.
  Result<UniqueFd> OpenDirs(const std::vector<std::string>& dirs, bool create) const {
    if (create) {
      std::error_code ec;
      std::filesystem::create_directories(root_, ec);
      if (ec) return Status::IoError("create " + root_.string() + ": " + ec.message());
    }
    UniqueFd fd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("open " + root_.string(), errno);
    for (const std::string& name : dirs) {
      UniqueFd next(
          ::openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next.valid() && errno == ENOENT && create) {
        if (::mkdirat(fd.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
          return ErrnoStatus("mkdir " + name + " under " + root_.string(), errno);
        }
        next.Reset(
            ::openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      }
      if (!next.valid()) {
        if (errno == ELOOP || errno == ENOTDIR) {
          return Status::InvalidArgument(name + " under " + root_.string() +
                                         " is not a directory (links are not followed)");
        }
        return ErrnoStatus("open " + name + " under " + root_.string(), errno);
      }
      fd = std::move(next);
    }
    return fd;
  }

  Status WriteAndSync(int fd, std::string_view value, const ArtifactKey& key) const {
    while (!value.empty()) {
      ssize_t n = ::write(fd, value.data(), value.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("write " + PathFor(key), errno);
      value.remove_prefix(static_cast<size_t>(n));
    }
    if (::fsync(fd) != 0) return ErrnoStatus("fsync " + PathFor(key), errno);
    return Status::Ok();
  }

  const std::string kind_;
  const std::filesystem::path root_;
  const DiskStoreOptions options_;
};

}  // namespace

ArtifactStorePtr NewDiskArtifactStore(std::string kind, std::filesystem::path root,
                                      DiskStoreOptions options) {
  return std::make_unique<DiskArtifactStore>(std::move(kind), std::move(root), options);
}

}  // namespace seedd
