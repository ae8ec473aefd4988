#include "kinds/weights/files/staging.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

constexpr const char* kJournal = ".seedd-journal";
constexpr std::string_view kJournalMagic = "SEEDDJNL";
constexpr size_t kHeaderBytes = 8 + 4 + 64;
constexpr size_t kRecordBytes = 8;
// Resumed chunks checked on every resume: the last journaled ones (a crash is
// likeliest to have hurt them) and a random sample, both bounded in bytes.
constexpr size_t kSpotCheckLast = 8;
constexpr size_t kSpotCheckSample = 24;

void PutU32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The digest `md` (SHA-256, MD5) of the file's `size` bytes, in hex.
Result<std::string> FileDigestHex(int fd, uint64_t size, const EVP_MD* md_type) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md_type, nullptr);
  std::string buf(8 << 20, '\0');
  for (uint64_t off = 0; off < size;) {
    ssize_t r = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - off),
                        static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      EVP_MD_CTX_free(ctx);
      return ErrnoStatus("read back", r < 0 ? errno : EIO);
    }
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(r));
    off += static_cast<uint64_t>(r);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

}  // namespace

std::array<char, 8> Staging::JournalRecord(uint32_t index, const std::string& root_digest) {
  std::array<char, 8> rec{};
  std::string input(4, '\0');
  PutU32(index, input.data());
  input += root_digest;
  PutU32(index, rec.data());
  PutU32(static_cast<uint32_t>(XXH3_64bits(input.data(), input.size())), rec.data() + 4);
  return rec;
}

std::string Staging::JournalHeader(const std::string& root_digest) {
  std::string h(kJournalMagic);
  h.resize(12);
  PutU32(kJournalVersion, h.data() + 8);
  return h + root_digest;
}

namespace {

size_t DirsToKeepOpen() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return kMaxOpenDirs;
  }
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur / 8), kMinOpenDirs, kMaxOpenDirs);
}

}  // namespace

Staging::Staging(const Manifest& manifest, std::filesystem::path dir)
    : m_(manifest), dir_(std::move(dir)), max_dirs_(DirsToKeepOpen()) {}

Result<std::vector<uint32_t>> Staging::ReadJournal(bool* fresh) {
  *fresh = true;
  UniqueFd fd(::openat(dir_fd_.get(), kJournal, O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return std::vector<uint32_t>();
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat the journal", errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string header(kHeaderBytes, '\0');
  if (size < kHeaderBytes ||
      !ReadExactly(fd.get(), 0, header.data(), header.size(), "the journal").ok() ||
      header != JournalHeader(m_.root_digest)) {
    return std::vector<uint32_t>();  // another version, another model, or no header
  }
  *fresh = false;
  const uint64_t records = (size - kHeaderBytes) / kRecordBytes;
  std::string body(records * kRecordBytes, '\0');
  SEEDD_RETURN_IF_ERROR(ReadExactly(fd.get(), kHeaderBytes, body.data(), body.size(), "journal"));
  std::vector<uint32_t> chunks;
  std::vector<bool> seen(m_.chunks.size());
  uint64_t good = 0;
  for (; good < records; ++good) {
    const char* rec = body.data() + good * kRecordBytes;
    const uint32_t index = GetU32(rec);
    if (index >= m_.chunks.size() ||
        std::string_view(rec, kRecordBytes) !=
            std::string_view(JournalRecord(index, m_.root_digest).data(), kRecordBytes)) {
      break;
    }
    if (!seen[index]) chunks.push_back(index);
    seen[index] = true;
  }
  const uint64_t keep = kHeaderBytes + good * kRecordBytes;
  if (keep != size) {
    Logger().warn("weight_data: {}: the journal has a torn tail of {} bytes; truncated",
                  dir_.string(), size - keep);
    if (::ftruncate(fd.get(), static_cast<off_t>(keep)) != 0) {
      return ErrnoStatus("truncate the journal", errno);
    }
  }
  return chunks;
}

bool Staging::ChunkMatches(uint32_t index) {
  const ManifestChunk& c = m_.chunks[index];
  Result<std::shared_ptr<UniqueFd>> fd = File(c.file);
  if (!fd.ok()) return false;
  std::string buf(c.length, '\0');
  if (!ReadExactly((*fd)->get(), c.offset, buf.data(), buf.size(), c.file).ok()) return false;
  return ChunkDigestHex(m_.chunk_digest, buf) == c.digest;
}

std::vector<uint32_t> Staging::SpotCheck(std::vector<uint32_t> resumed) {
  if (resumed.empty()) return resumed;
  std::set<uint32_t> sample;
  for (size_t i = resumed.size() > kSpotCheckLast ? resumed.size() - kSpotCheckLast : 0;
       i < resumed.size(); ++i) {
    sample.insert(resumed[i]);
  }
  std::mt19937_64 rng(std::random_device{}());
  for (size_t i = 0; i < kSpotCheckSample && i < resumed.size(); ++i) {
    sample.insert(resumed[rng() % resumed.size()]);
  }
  bool all_good = true;
  for (uint32_t index : sample) all_good = all_good && ChunkMatches(index);
  if (all_good) return resumed;
  // One bad chunk: trust no journaled chunk without checking it.
  Logger().warn("weight_data: {}: a resumed chunk does not match its digest; checking all {}",
                dir_.string(), resumed.size());
  std::vector<uint32_t> good;
  for (uint32_t index : resumed) {
    if (ChunkMatches(index)) {
      good.push_back(index);
    } else {
      Logger().warn("weight_data: resumed chunk {} ({} at {}) does not match; fetching it again",
                    index, m_.chunks[index].file, m_.chunks[index].offset);
    }
  }
  return good;
}

Status Staging::RewriteJournal(const std::vector<uint32_t>& chunks) {
  std::string text = JournalHeader(m_.root_digest);
  for (uint32_t index : chunks) {
    const auto rec = JournalRecord(index, m_.root_digest);
    text.append(rec.data(), rec.size());
  }
  return WriteFileAtomic(dir_ / kJournal, text);
}

Result<std::vector<uint32_t>> Staging::Open() {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Status::IoError("create " + dir_.string() + ": " + ec.message());
  dir_fd_.Reset(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd_.valid()) return ErrnoStatus("open " + dir_.string(), errno);
  // Held until this object goes: a second pull into the same place, or a
  // garbage collection, sees the directory in use.
  if (::flock(dir_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    return errno == EWOULDBLOCK
               ? Status::FailedPrecondition("another pull is filling " + dir_.string() +
                                            " now; wait for it to end")
               : ErrnoStatus("lock " + dir_.string(), errno);
  }
  bool fresh = true;
  Result<std::vector<uint32_t>> journaled = ReadJournal(&fresh);
  if (!journaled.ok()) return journaled.status();
  if (fresh) {
    // Whatever is here belongs to no journal of this version: start over.
    for (auto it = std::filesystem::directory_iterator(dir_, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      std::error_code rm;
      std::filesystem::remove_all(it->path(), rm);
    }
    // The header alone, not synced: until the committer's first sync nothing
    // was journaled that a crash could lose, and a torn or missing header
    // reads as a fresh start again. (A sync here cost a pull of small files
    // 3-35 ms before its first request.)
    UniqueFd journal(::openat(dir_fd_.get(), kJournal,
                              O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!journal.valid()) return ErrnoStatus("create the journal", errno);
    const std::string header = JournalHeader(m_.root_digest);
    const ssize_t w = ::pwrite(journal.get(), header.data(), header.size(), 0);
    if (w != static_cast<ssize_t>(header.size())) {
      return w < 0 ? ErrnoStatus("write the journal's header", errno)
                   : Status::IoError("write the journal's header: short write");
    }
  }
  uint64_t resumed_bytes = 0;
  for (uint32_t i : *journaled) resumed_bytes += m_.chunks[i].length;
  // Enough space for what is still missing, before any byte moves.
  struct statvfs fs {};
  if (::statvfs(dir_.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    const uint64_t needed = m_.total_size - resumed_bytes;
    if (free_bytes < needed) {
      return Status::ResourceExhausted("not enough space in " + dir_.parent_path().string() + ": " +
                                       std::to_string(needed) + " bytes needed, " +
                                       std::to_string(free_bytes) + " available");
    }
  }
  for (const ManifestFile& f : m_.files) {
    write_mu_.emplace(f.path, std::make_unique<Mutex>());
    sizes_.emplace(f.path, f.size);
  }
  // A fresh directory gets each file when its first chunk lands, so that
  // creating thousands of small files overlaps the transfer (Seal makes those
  // no chunk was written to); resumed files are all there already.
  if (!journaled->empty()) {
    MutexLock lock(files_mu_);
    for (const ManifestFile& f : m_.files) {
      Result<UniqueFd> fd = OpenModelFile(f.path);
      if (!fd.ok()) return fd.status();
    }
  }
  std::vector<uint32_t> resumed = SpotCheck(*journaled);
  if (resumed.size() != journaled->size()) SEEDD_RETURN_IF_ERROR(RewriteJournal(resumed));
  MutexLock lock(journal_mu_);
  journal_.Reset(::openat(dir_fd_.get(), kJournal, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
  if (!journal_.valid()) return ErrnoStatus("open the journal", errno);
  return resumed;
}

Result<Staging::DirFd> Staging::Directory(const std::string& rel) {
  if (rel.empty()) return DirFd(std::shared_ptr<void>(), &dir_fd_);  // lives as long as this
  if (auto it = dirs_.find(rel); it != dirs_.end()) return it->second;
  const size_t slash = rel.rfind('/');
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  Result<DirFd> parent =
      Directory(slash == std::string::npos ? std::string() : rel.substr(0, slash));
  if (!parent.ok()) return parent.status();
  if (name.empty() || name == "." || name == "..") {
    return Status::InvalidArgument(rel + " is not a plain relative path");
  }
  if (made_.count(rel) == 0) {
    if (::mkdirat((*parent)->get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + (dir_ / rel).string(), errno);
    }
    made_.insert(rel);
  }
  auto fd = std::make_shared<const UniqueFd>(
      ::openat((*parent)->get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd->valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return Status::InvalidArgument(rel + " goes through a link (links are not followed)");
    }
    return ErrnoStatus("open " + (dir_ / rel).string(), errno);
  }
  // Bounded: forgetting them all is cheap, they are opened again as needed (a
  // descriptor in use is closed when its last user is done).
  if (dirs_.size() >= max_dirs_) dirs_.clear();
  return dirs_.emplace(rel, std::move(fd)).first->second;
}

Result<Staging::DirFd> Staging::ParentOf(const std::string& path, std::string* name) {
  const size_t slash = path.rfind('/');
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name->empty() || *name == "." || *name == "..") {
    return Status::InvalidArgument(path + " is not a plain relative path");
  }
  return Directory(slash == std::string::npos ? std::string() : path.substr(0, slash));
}

namespace {

// Opens `name` in `dir`, made when missing; `exclusive`: only if this call
// makes it. Invalid, errno set, when it fails.
UniqueFd OpenIn(int dir, const std::string& name, bool exclusive) {
  const int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (exclusive ? O_EXCL : 0);
  return UniqueFd(::openat(dir, name.c_str(), flags, 0644));
}

Status OpenError(const std::filesystem::path& shown, int err) {
  if (err == ELOOP) {
    return Status::InvalidArgument(shown.string() +
                                   " goes through a link (links are not followed)");
  }
  return ErrnoStatus("create " + shown.string(), err);
}

}  // namespace

Result<UniqueFd> Staging::OpenModelFile(const std::string& path) {
  std::string name;
  Result<DirFd> parent = ParentOf(path, &name);
  if (!parent.ok()) return parent.status();
  UniqueFd fd = OpenIn((*parent)->get(), name, false);
  if (!fd.valid()) return OpenError(dir_ / path, errno);
  // Sized once, when first opened here: holes read as zeros, and a file of a
  // resumed pull keeps its length.
  if (created_.insert(path).second) SEEDD_RETURN_IF_ERROR(Size(fd.get(), path));
  return fd;
}

Status Staging::Size(int fd, const std::string& path) const {
  auto size = sizes_.find(path);
  if (size == sizes_.end()) return Status::Internal(path + " is not a file of the model");
  if (::ftruncate(fd, static_cast<off_t>(size->second)) != 0) {
    return ErrnoStatus("size " + (dir_ / path).string(), errno);
  }
  return Status::Ok();
}

Result<std::shared_ptr<UniqueFd>> Staging::FileFor(const ManifestChunk& c) {
  auto size = sizes_.find(c.file);
  return File(c.file, c.offset == 0 && size != sizes_.end() && size->second == c.length);
}

Result<std::shared_ptr<UniqueFd>> Staging::File(const std::string& path, bool whole) {
  std::string name;
  DirFd parent;
  bool first = false;
  {
    MutexLock lock(files_mu_);
    if (auto it = open_.find(path); it != open_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.at);
      return it->second.fd;
    }
    Result<DirFd> p = ParentOf(path, &name);
    if (!p.ok()) return p.status();
    parent = std::move(*p);
    first = created_.insert(path).second;
  }
  // A file this call makes and the caller fills needs no sizing; one another
  // writer made first (or an earlier run left) is sized as it would have been.
  UniqueFd fd = OpenIn(parent->get(), name, first && whole);
  int err = fd.valid() ? 0 : errno;
  bool size = first && !whole;
  if (err == EEXIST && first && whole) {
    fd = OpenIn(parent->get(), name, false);
    err = fd.valid() ? 0 : errno;
    size = true;
  }
  Status st = fd.valid() ? Status::Ok() : OpenError(dir_ / path, err);
  if (st.ok() && size) st = Size(fd.get(), path);
  MutexLock lock(files_mu_);
  if (!st.ok()) {
    if (first) created_.erase(path);
    return st;
  }
  if (auto it = open_.find(path); it != open_.end()) {
    // Opened by another writer meanwhile: one descriptor per file.
    lru_.splice(lru_.begin(), lru_, it->second.at);
    return it->second.fd;
  }
  if (open_.size() >= kMaxOpenFiles) {
    // Closed once its last user is done with it.
    open_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(path);
  auto shared = std::make_shared<UniqueFd>(std::move(fd));
  open_[path] = OpenFile{shared, lru_.begin()};
  return shared;
}

Status Staging::Write(const UniqueFd& file, const ManifestChunk& c, uint64_t offset, const char* p,
                      size_t n) {
  const int fd = file.get();
  MutexLock lock(*write_mu_.at(c.file));
  for (uint64_t at = c.offset + offset; n > 0;) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus("write " + (dir_ / c.file).string(), errno);
    p += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status Staging::Zero(const ManifestChunk& c) {
  Result<std::shared_ptr<UniqueFd>> file = File(c.file);
  if (!file.ok()) return file.status();
  const int fd = (*file)->get();
  {
    MutexLock lock(*write_mu_.at(c.file));
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(c.offset),
                    static_cast<off_t>(c.length)) == 0) {
      return Status::Ok();
    }
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
      return ErrnoStatus("punch a hole in " + (dir_ / c.file).string(), errno);
    }
  }
  const std::string zeros(std::min<uint64_t>(c.length, 1 << 20), '\0');
  for (uint64_t done = 0; done < c.length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), c.length - done));
    SEEDD_RETURN_IF_ERROR(Write(**file, c, done, zeros.data(), n));
    done += n;
  }
  return Status::Ok();
}

Staging::~Staging() {
  {
    MutexLock lock(commit_mu_);
    stopping_ = true;
  }
  commit_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

Status Staging::Commit(uint32_t index) {
  MutexLock lock(commit_mu_);
  if (!commit_error_.ok()) return commit_error_;
  to_commit_.push_back(index);
  ++submitted_;
  if (!committer_.joinable()) committer_ = std::thread([this] { CommitLoop(); });
  // The committer wakes for a batch's first chunk and when it is full.
  if (to_commit_.size() == 1 || to_commit_.size() >= kCommitBatch) commit_cv_.notify_all();
  return Status::Ok();
}

Status Staging::Flush() {
  MutexLock lock(commit_mu_);
  ++flushing_;
  commit_cv_.notify_all();
  commit_cv_.wait(lock, [&]() REQUIRES(commit_mu_) { return committed_ == submitted_; });
  --flushing_;
  return commit_error_;
}

void Staging::CommitLoop() {
  MutexLock lock(commit_mu_);
  for (;;) {
    // Stopping, what was committed is still journaled.
    commit_cv_.wait(lock, [&]() REQUIRES(commit_mu_) { return stopping_ || !to_commit_.empty(); });
    if (to_commit_.empty()) return;
    // Gathers what lands shortly after: one sync per batch, not per chunk (a
    // model of small files commits thousands a second). A Flush or a stop does
    // not wait.
    commit_cv_.wait_for(lock, kCommitGather, [&]() REQUIRES(commit_mu_) {
      return stopping_ || flushing_ > 0 || to_commit_.size() >= kCommitBatch;
    });
    std::vector<uint32_t> batch;
    batch.swap(to_commit_);
    Status st = commit_error_;
    lock.Unlock();
    if (st.ok()) st = CommitBatch(batch);
    lock.Lock();
    if (!st.ok() && commit_error_.ok()) commit_error_ = st;
    committed_ += batch.size();
    commit_cv_.notify_all();
  }
}

Status Staging::CommitBatch(const std::vector<uint32_t>& chunks) {
  std::set<std::string> files;
  for (uint32_t i : chunks) files.insert(m_.chunks[i].file);
  if (files.size() > kSyncEachFileUpTo) {
    // Many small files: one sync of the file system, not one per file.
    if (::syncfs(dir_fd_.get()) != 0) return ErrnoStatus("sync " + dir_.string(), errno);
  } else {
    for (const std::string& path : files) {
      Result<std::shared_ptr<UniqueFd>> file = File(path);
      if (!file.ok()) return file.status();
      if (::fdatasync((*file)->get()) != 0)
        return ErrnoStatus("sync " + (dir_ / path).string(), errno);
    }
  }
  std::string records;
  records.reserve(chunks.size() * 8);
  for (uint32_t i : chunks) {
    const auto rec = JournalRecord(i, m_.root_digest);
    records.append(rec.data(), rec.size());
  }
  MutexLock lock(journal_mu_);
  for (size_t done = 0; done < records.size();) {
    const ssize_t n = ::write(journal_.get(), records.data() + done, records.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return ErrnoStatus("journal " + (dir_ / kJournal).string() + ": recording " +
                             std::to_string(chunks.size()) + " verified chunks",
                         errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Staging::Seal(bool verify_sha256, const std::map<std::string, std::string>& md5) {
  SEEDD_RETURN_IF_ERROR(Flush());
  {
    MutexLock lock(files_mu_);
    open_.clear();
    lru_.clear();
    // The files no chunk was written to (empty, or all holes).
    for (const ManifestFile& f : m_.files) {
      if (created_.count(f.path) != 0) continue;
      Result<UniqueFd> fd = OpenModelFile(f.path);
      if (!fd.ok()) return fd.status();
    }
    dirs_.clear();
  }
  std::error_code ec;
  std::set<std::string> dirs;
  // Many files: one sync of the file system makes every file and directory
  // entry durable, instead of an open and fsync of each.
  const bool sync_all = m_.files.size() > kSyncEachFileUpTo;
  if (sync_all && ::syncfs(dir_fd_.get()) != 0) {
    return ErrnoStatus("sync " + dir_.string(), errno);
  }
  for (const ManifestFile& f : m_.files) {
    if (sync_all && !verify_sha256 && md5.empty()) break;
    Result<UniqueFd> fd = OpenBeneath(dir_fd_.get(), f.path, O_RDONLY);
    if (!fd.ok()) return fd.status();
    if (!sync_all && ::fsync(fd->get()) != 0) return ErrnoStatus("fsync " + f.path, errno);
    auto refuse = [&](const std::string& why) {
      {
        MutexLock lock(journal_mu_);
        journal_.Reset();
      }
      std::filesystem::remove_all(dir_, ec);
      return Status::DataLoss(why);
    };
    if (verify_sha256) {
      Result<std::string> digest = FileDigestHex(fd->get(), f.size, EVP_sha256());
      if (!digest.ok()) return digest.status().WithContext(f.path);
      if (*digest != f.sha256) return refuse(f.path + " failed SHA-256 verification");
    }
    if (auto want = md5.find(f.path); want != md5.end()) {
      Result<std::string> digest = FileDigestHex(fd->get(), f.size, EVP_md5());
      if (!digest.ok()) return digest.status().WithContext(f.path);
      if (*digest != want->second) {
        return refuse(f.path + ": md5:" + *digest + ", the upstream's md5:" + want->second +
                      " (its ETag); nothing committed");
      }
    }
    for (auto slash = f.path.rfind('/'); slash != std::string::npos && slash > 0;
         slash = f.path.rfind('/', slash - 1)) {
      dirs.insert(f.path.substr(0, slash));
    }
  }
  {
    MutexLock lock(journal_mu_);
    journal_.Reset();
  }
  if (::unlinkat(dir_fd_.get(), kJournal, 0) != 0 && errno != ENOENT) {
    return ErrnoStatus("remove the journal", errno);
  }
  // The directories' entries are durable before the name moves.
  for (const std::string& d : sync_all ? std::set<std::string>() : dirs) {
    Result<UniqueFd> fd = OpenBeneath(dir_fd_.get(), d, O_RDONLY | O_DIRECTORY);
    if (fd.ok()) ::fsync(fd->get());
  }
  if (::fsync(dir_fd_.get()) != 0) return ErrnoStatus("fsync " + dir_.string(), errno);
  return Status::Ok();
}

}  // namespace seedd
