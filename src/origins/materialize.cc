#include "origins/materialize.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "seedd/json.h"

namespace seedd {
namespace {

constexpr std::string_view kFormat = "seedd.origin/1";
constexpr size_t kCopyBlock = 1 << 20;

std::string HexOf(const std::string& version) {
  const size_t colon = version.find(':');
  return colon == std::string::npos ? version : version.substr(colon + 1);
}

std::filesystem::path RecordPath(const std::filesystem::path& root, const std::string& hex) {
  return root / (hex + ".seedd-origin.json");
}

// A file of a recorded copy, still as recorded.
struct LocalFile {
  std::filesystem::path path;
  uint64_t size = 0;
  std::string sha256;  // "sha256:<hex>", as recorded
};

Result<Json> ReadRecord(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no record " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", std::string()) != kFormat ||
      !j.contains("files") || !j["files"].is_array()) {
    return Status::DataLoss(path.string() + " is not a seedd.origin/1 record");
  }
  return j;
}

// Whether `dir`/path has the size and mtime the record's entry says.
bool Unchanged(const std::filesystem::path& dir, const Json& f) {
  if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
      !f["size"].is_number_unsigned() || !f.contains("mtime_ns") ||
      !f["mtime_ns"].is_number_integer()) {
    return false;
  }
  struct stat st {};
  const std::filesystem::path p = dir / f["path"].get<std::string>();
  if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  return static_cast<uint64_t>(st.st_size) == f["size"].get<uint64_t>() &&
         MtimeNs(st) == f["mtime_ns"].get<int64_t>();
}

// Calls `fn(hex, record, record path)` for each readable record below `root`.
void ForEachRecord(
    const std::filesystem::path& root,
    const std::function<void(const std::string&, const Json&, const std::filesystem::path&)>& fn) {
  std::error_code ec;
  const std::string suffix = ".seedd-origin.json";
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) {
      continue;
    }
    Result<Json> record = ReadRecord(e.path());
    if (record.ok()) fn(name.substr(0, name.size() - suffix.size()), *record, e.path());
  }
}

// Every file of every recorded copy below `roots` that is still as recorded, by digest.
std::map<std::string, LocalFile> LocalFiles(const std::vector<std::filesystem::path>& roots) {
  std::map<std::string, LocalFile> out;
  for (const auto& root : roots) {
    ForEachRecord(
        root, [&](const std::string& hex, const Json& record, const std::filesystem::path&) {
          const std::filesystem::path dir = root / hex;
          for (const Json& f : record["files"]) {
            if (!Unchanged(dir, f) || !f.contains("sha256") || !f["sha256"].is_string()) continue;
            const LocalFile file{dir / f["path"].get<std::string>(), f["size"].get<uint64_t>(),
                                 f["sha256"].get<std::string>()};
            // By the digest its upstream gave it too (an S3 ETag), when it had one.
            if (f.contains("digest") && f["digest"].is_string() && !f["digest"].empty()) {
              out.emplace(f["digest"].get<std::string>(), file);
            }
            out.emplace(file.sha256, file);
          }
        });
  }
  return out;
}

// The copy of `hex` below `root`, when its record says every file is as written.
bool RecordedCopy(const std::filesystem::path& root, const std::string& hex,
                  const OriginModel& model) {
  Result<Json> record = ReadRecord(RecordPath(root, hex));
  if (!record.ok() || record->value("version", std::string()) != model.version) return false;
  const std::filesystem::path dir = root / hex;
  if ((*record)["files"].size() != model.files.size()) return false;
  for (const Json& f : (*record)["files"]) {
    if (!Unchanged(dir, f)) return false;
  }
  return true;
}

// MD5 over pieces (S3's ETag of a single-part object).
class Md5 {
 public:
  Md5() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_md5(), nullptr); }
  ~Md5() { EVP_MD_CTX_free(ctx_); }
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;
  void Update(std::string_view piece) { EVP_DigestUpdate(ctx_, piece.data(), piece.size()); }
  std::string HexDigest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
  }

 private:
  EVP_MD_CTX* ctx_;
};

bool IsMd5(const std::string& digest) { return digest.rfind("md5:", 0) == 0; }

// Hashes and counts what is written to `fd`, refusing more than `size` bytes.
// The SHA-256 always (the file's identity in the record); the MD5 only when
// `md5` (an S3 ETag is the digest to check): MD5 costs more than a SHA-256
// with the CPU's SHA extensions, and every daemon of a fleet checks every file.
class Landing {
 public:
  Landing(int fd, const OriginFile& file, bool md5) : fd_(fd), file_(file) {
    if (md5) md5_.emplace();
  }
  Status Write(std::string_view piece) {
    if (written_ + piece.size() > file_.size) {
      return Status::DataLoss(file_.path + ": more than the " + std::to_string(file_.size) +
                              " bytes the upstream listed");
    }
    sha_.Update(piece);
    if (md5_.has_value()) md5_->Update(piece);
    if (fd_ < 0) {  // checking bytes in place
      written_ += piece.size();
      return Status::Ok();
    }
    while (!piece.empty()) {
      const ssize_t n = ::write(fd_, piece.data(), piece.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("write " + file_.path, errno);
      piece.remove_prefix(static_cast<size_t>(n));
      written_ += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }
  // Size and digest (`expected`: "sha256:..", "md5:..", or empty: none to
  // check) against the upstream's; then fsync. The file's SHA-256 in *sha256.
  Status Finish(const std::string& expected, const std::string& from, std::string* sha256) {
    if (written_ != file_.size) {
      return Status::DataLoss(file_.path + ": " + from + " sent " + std::to_string(written_) +
                              " bytes, not " + std::to_string(file_.size));
    }
    *sha256 = "sha256:" + sha_.HexDigest();
    if (IsMd5(expected) && !md5_.has_value()) {
      return Status::Internal(file_.path + ": an MD5 to check (" + expected +
                              ") but none computed");
    }
    const std::string md5 = md5_.has_value() ? "md5:" + md5_->HexDigest() : std::string();
    if (!expected.empty()) {
      const std::string& actual = IsMd5(expected) ? md5 : *sha256;
      if (actual != expected) {
        return Status::DataLoss(file_.path + ": digest " + actual + ", expected " + expected +
                                " (from " + from + "); not kept");
      }
    }
    if (fd_ >= 0 && ::fsync(fd_) != 0) return ErrnoStatus("fsync " + file_.path, errno);
    return Status::Ok();
  }

 private:
  int fd_;  // -1: only checked
  const OriginFile& file_;
  Sha256 sha_;
  std::optional<Md5> md5_;
  uint64_t written_ = 0;
};

// Reads `fd` (the file at `path`) to its end into `landing`.
Status ReadInto(int fd, const std::filesystem::path& path, Landing& landing,
                const std::function<void(uint64_t)>& count) {
  std::string buf(kCopyBlock, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + path.string(), errno);
    if (n == 0) return Status::Ok();
    SEEDD_RETURN_IF_ERROR(landing.Write(std::string_view(buf.data(), static_cast<size_t>(n))));
    count(static_cast<uint64_t>(n));
  }
}

// Checks the file at `path` against `file`'s size and `expected` digest (bytes
// `from` sent), and syncs it; its SHA-256 in *sha256.
Status CheckInPlace(const std::filesystem::path& path, const OriginFile& file,
                    const std::string& expected, const std::string& from,
                    const std::function<void(uint64_t)>& count, std::string* sha256) {
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in.valid()) return ErrnoStatus("open " + path.string(), errno);
  Landing landing(-1, file, IsMd5(expected));
  SEEDD_RETURN_IF_ERROR(ReadInto(in.get(), path, landing, count));
  SEEDD_RETURN_IF_ERROR(landing.Finish(expected, from, sha256));
  if (::fsync(in.get()) != 0) return ErrnoStatus("fsync " + path.string(), errno);
  return Status::Ok();
}

// Copies `from` into `fd` (a reflink where the filesystem can), verifying it.
Status CopyLocal(const LocalFile& from, int fd, const OriginFile& file,
                 const std::function<void(uint64_t)>& count, std::string* sha256) {
  UniqueFd in(::open(from.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in.valid()) return ErrnoStatus("open " + from.path.string(), errno);
  const std::string& expected = file.digest.empty() ? from.sha256 : file.digest;
  Landing landing(fd, file, IsMd5(expected));
  SEEDD_RETURN_IF_ERROR(ReadInto(in.get(), from.path, landing, count));
  return landing.Finish(expected, from.path.string(), sha256);
}

// `file` into `fd` as ranged GETs of `range_bytes`, `streams` at once, each
// written at its offset: the digest the whole file must have (not checked
// here), or the first error (FailedPrecondition: the origin or upstream cannot).
Result<std::string> FetchRanges(Origin& origin, const OriginFile& file, int fd,
                                uint64_t range_bytes, int streams,
                                const std::function<void(uint64_t)>& count,
                                std::atomic<uint64_t>* ranged, const std::atomic<bool>* cancel) {
  const uint64_t ranges = (file.size + range_bytes - 1) / range_bytes;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  Mutex mu;
  Status failure;
  std::string expected;
  auto worker = [&] {
    for (;;) {
      const uint64_t r = next.fetch_add(1);
      if (r >= ranges || stop.load()) return;
      const uint64_t offset = r * range_bytes;
      const uint64_t length = std::min(range_bytes, file.size - offset);
      uint64_t at = offset;
      Result<std::string> digest =
          origin.FetchRange(file, offset, length, [&](std::string_view piece) -> Status {
            if (stop.load()) return Status::Cancelled("another range failed");
            if (cancel != nullptr && cancel->load()) return Status::Cancelled("stopped");
            if (at + piece.size() > offset + length) {
              return Status::DataLoss(file.path + ": more than the " + std::to_string(length) +
                                      " bytes of a range");
            }
            while (!piece.empty()) {
              const ssize_t n = ::pwrite(fd, piece.data(), piece.size(), static_cast<off_t>(at));
              if (n < 0 && errno == EINTR) continue;
              if (n < 0) return ErrnoStatus("write " + file.path, errno);
              piece.remove_prefix(static_cast<size_t>(n));
              at += static_cast<uint64_t>(n);
              count(static_cast<uint64_t>(n));
            }
            return Status::Ok();
          });
      Status st = digest.status();
      if (st.ok() && at != offset + length) {
        st = Status::DataLoss(file.path + ": a range of " + std::to_string(length) + " bytes at " +
                              std::to_string(offset) + " ended after " +
                              std::to_string(at - offset));
      }
      MutexLock lock(mu);
      if (!st.ok()) {
        if (failure.ok()) failure = st;
        stop = true;
        return;
      }
      expected = *digest;
      ++*ranged;
    }
  };
  std::vector<std::thread> threads;
  const uint64_t n = std::clamp<uint64_t>(static_cast<uint64_t>(std::max(1, streams)), 1, ranges);
  for (uint64_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  MutexLock lock(mu);
  if (!failure.ok()) return failure;
  return expected;
}

}  // namespace

Result<HeldCopy> LatestHeldCopy(const std::filesystem::path& root, const std::string& url) {
  std::optional<HeldCopy> best;
  std::filesystem::file_time_type best_time;
  ForEachRecord(
      root, [&](const std::string& hex, const Json& record, const std::filesystem::path& path) {
        const std::string version = record.value("version", std::string());
        if (!IsLowerHex(hex, 64) || record.value("url", std::string()) != url ||
            HexOf(version) != hex) {
          return;
        }
        for (const Json& f : record["files"]) {
          if (!Unchanged(root / hex, f)) return;
        }
        std::error_code ec;
        const std::filesystem::file_time_type written = std::filesystem::last_write_time(path, ec);
        if (ec) return;
        if (!best.has_value() || written > best_time) {
          best = HeldCopy{root / hex, version};
          best_time = written;
        }
      });
  if (!best.has_value())
    return Status::NotFound("no copy of " + url + " is held in " + root.string());
  return *best;
}

bool HoldsVersion(const std::filesystem::path& root, const OriginModel& model) {
  const std::string hex = HexOf(model.version);
  return IsLowerHex(hex, 64) && RecordedCopy(root, hex, model);
}

Result<std::filesystem::path> MaterializeModel(Origin& origin, const OriginModel& model,
                                               const std::filesystem::path& root,
                                               const MaterializeOptions& options,
                                               MaterializeStats* stats) {
  MaterializeStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = MaterializeStats{};
  stats->files = model.files.size();
  const std::string hex = HexOf(model.version);
  if (!IsLowerHex(hex, 64)) return Status::InvalidArgument("version " + model.version);
  const std::filesystem::path final_dir = root / hex;
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return Status::IoError("create " + root.string() + ": " + ec.message());
  if (RecordedCopy(root, hex, model)) {
    stats->already_here = true;
    return final_dir;
  }
  // A directory without a record (or with files changed since) is not trusted.
  if (std::filesystem::exists(final_dir, ec)) {
    std::filesystem::remove_all(final_dir, ec);
    std::filesystem::remove(RecordPath(root, hex), ec);
  }
  // Enough space for the whole model (copies of held files take space too),
  // before any byte moves: a listing may name more than the disk holds.
  struct statvfs fs {};
  if (::statvfs(root.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < model.total_size) {
      return Status::ResourceExhausted("not enough space in " + root.string() + " for " +
                                       model.url + ": " + std::to_string(model.total_size) +
                                       " bytes needed, " + std::to_string(free_bytes) +
                                       " available");
    }
  }
  const std::filesystem::path staging = root / (".staging-" + hex + "-" + RandomHexOrDie(4));
  if (!std::filesystem::create_directory(staging, ec)) {
    return Status::IoError("create " + staging.string() + ": " + ec.message());
  }
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code e;
      if (!dir.empty()) std::filesystem::remove_all(dir, e);
    }
  } cleanup{staging};
  Result<UniqueFd> staging_fd = OpenDirectory(staging);
  if (!staging_fd.ok()) return staging_fd.status();

  std::vector<std::filesystem::path> search = options.reuse_from;
  search.push_back(root);
  std::map<std::string, LocalFile> local = LocalFiles(search);

  // Each digest is fetched once; its other files (a duplicate within the model)
  // are copied from the first once it landed.
  std::vector<size_t> first;  // by file: the index of the first file of its digest
  std::map<std::string, size_t> first_of;
  for (size_t i = 0; i < model.files.size(); ++i) {
    const OriginFile& f = model.files[i];
    const std::string key = f.digest.empty() ? "path:" + f.path : f.digest;
    first.push_back(first_of.emplace(key, i).first->second);
  }
  std::vector<std::string> sha256s(model.files.size());  // as landed
  std::atomic<uint64_t> unverified{0};
  std::vector<size_t> order;
  for (size_t i = 0; i < model.files.size(); ++i) {
    if (first[i] == i) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return model.files[a].size > model.files[b].size; });

  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> fetched{0};
  std::atomic<uint64_t> reused{0};
  std::atomic<uint64_t> files_reused{0};
  std::atomic<uint64_t> ranged{0};
  auto count = [&](uint64_t n) {
    const uint64_t d = done.fetch_add(n) + n;
    if (options.progress) options.progress(d, model.total_size);
  };
  std::atomic<size_t> next{0};
  Mutex mu;
  Status failure;  // the first
  std::atomic<bool> failed{false};
  auto land = [&](size_t i) -> Status {
    const OriginFile& f = model.files[i];
    Result<UniqueFd> fd =
        CreateBeneath(staging_fd->get(), f.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (!fd.ok()) return fd.status().WithContext(f.path);
    // Bytes held here that may be this file, each checked as it is copied
    // against the upstream's digest (a file with none is fetched): a recorded
    // copy with that digest, then the same path in a directory laid out as the
    // model. One that does not match (changed since) is passed over.
    std::vector<LocalFile> held_here;
    if (!f.digest.empty()) {
      auto have = local.find(f.digest);
      if (have != local.end() && have->second.size == f.size) held_here.push_back(have->second);
      for (const std::filesystem::path& dir : options.reuse_dirs) {
        struct stat st {};
        const std::filesystem::path candidate = dir / f.path;
        if (::lstat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<uint64_t>(st.st_size) == f.size) {
          held_here.push_back(LocalFile{candidate, f.size, ""});
        }
      }
    }
    for (const LocalFile& from : held_here) {
      uint64_t copied = 0;  // counted once the copy checks out
      if (CopyLocal(
              from, fd->get(), f, [&](uint64_t n) { copied += n; }, &sha256s[i])
              .ok()) {
        count(copied);
        reused += f.size;
        ++files_reused;
        return Status::Ok();
      }
      if (::ftruncate(fd->get(), 0) != 0 || ::lseek(fd->get(), 0, SEEK_SET) != 0) {
        return ErrnoStatus("truncate " + f.path, errno);
      }
    }
    Result<std::optional<Origin::LocalBytes>> held = origin.FetchLocal(f);
    if (!held.ok()) return held.status();
    if (held->has_value()) {
      // Linked in place of the file just made, once its bytes check out.
      const Origin::LocalBytes& bytes = **held;
      SEEDD_RETURN_IF_ERROR(
          CheckInPlace(bytes.path, f, bytes.expected, "the fleet", count, &sha256s[i]));
      fetched += f.size;
      if (bytes.expected.empty()) ++unverified;
      const std::filesystem::path target = staging / f.path;
      std::error_code link_ec;
      std::filesystem::remove(target, link_ec);
      std::filesystem::create_hard_link(bytes.path, target, link_ec);
      if (link_ec) return Status::IoError("link " + target.string() + ": " + link_ec.message());
      return Status::Ok();
    }
    if (options.range_bytes > 0 && f.size > options.range_bytes) {
      Result<std::string> expected = FetchRanges(
          origin, f, fd->get(), options.range_bytes, options.range_streams,
          [&](uint64_t n) {
            fetched += n;
            count(n);
          },
          &ranged, options.cancel.get());
      if (expected.ok()) {
        if (expected->empty()) ++unverified;
        // Checked whole, from the page cache, once every range is in place.
        return CheckInPlace(
            staging / f.path, f, *expected, model.url, [](uint64_t) {}, &sha256s[i]);
      }
      // FailedPrecondition: the origin cannot, or the upstream answered the first
      // range with the whole file before any byte was written; one GET instead.
      if (expected.status().code() != StatusCode::kFailedPrecondition) return expected.status();
      if (::ftruncate(fd->get(), 0) != 0) return ErrnoStatus("truncate " + f.path, errno);
    }
    // The upstream answers with the listing's digest or a SHA-256 of its own
    // (an S3 object's checksum header), so an MD5 is due only for an ETag.
    Landing landing(fd->get(), f, IsMd5(f.digest));
    Result<std::string> expected = origin.Fetch(f, [&](std::string_view piece) -> Status {
      if (failed.load()) return Status::Cancelled("another file failed");
      if (options.cancel && options.cancel->load()) return Status::Cancelled("stopped");
      SEEDD_RETURN_IF_ERROR(landing.Write(piece));
      fetched += piece.size();
      count(piece.size());
      return Status::Ok();
    });
    if (!expected.ok()) return expected.status();
    if (expected->empty()) ++unverified;
    return landing.Finish(*expected, model.url, &sha256s[i]);
  };
  auto worker = [&] {
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= order.size() || failed.load()) return;
      if (options.cancel && options.cancel->load()) {
        MutexLock lock(mu);
        if (failure.ok()) failure = Status::Cancelled("stopped");
        failed = true;
        return;
      }
      Status st = land(order[k]);
      if (st.ok() && options.landed) {
        options.landed(order[k], staging / model.files[order[k]].path, sha256s[order[k]]);
      }
      if (!st.ok()) {
        if (options.failed) options.failed(order[k], st);
        MutexLock lock(mu);
        if (failure.ok()) failure = st;
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(1, options.parallel)), 1,
                                      std::max<size_t>(order.size(), 1));
  for (size_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  {
    MutexLock lock(mu);
    if (!failure.ok()) return failure;
  }
  // Duplicates within the model, from their first copy.
  for (size_t i = 0; i < model.files.size(); ++i) {
    if (first[i] == i) continue;
    const OriginFile& f = model.files[i];
    Result<UniqueFd> fd =
        CreateBeneath(staging_fd->get(), f.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (!fd.ok()) return fd.status().WithContext(f.path);
    SEEDD_RETURN_IF_ERROR(
        CopyLocal(LocalFile{staging / model.files[first[i]].path, f.size, sha256s[first[i]]},
                  fd->get(), f, count, &sha256s[i]));
    reused += f.size;
    ++files_reused;
  }
  // The record: each file's size and mtime as they are now.
  Json files = Json::array();
  for (size_t i = 0; i < model.files.size(); ++i) {
    const OriginFile& f = model.files[i];
    struct stat st {};
    const std::filesystem::path p = staging / f.path;
    if (::stat(p.c_str(), &st) != 0) return ErrnoStatus("stat " + p.string(), errno);
    files.push_back({{"path", f.path},
                     {"size", f.size},
                     {"digest", f.digest},
                     {"sha256", sha256s[i]},
                     {"mtime_ns", MtimeNs(st)}});
  }
  // Directories below the staging one: their entries made durable.
  std::vector<std::filesystem::path> dirs = {staging};
  for (const auto& e : std::filesystem::recursive_directory_iterator(staging, ec)) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  for (const auto& d : dirs) SEEDD_RETURN_IF_ERROR(SyncDirectory(d));
  std::filesystem::rename(staging, final_dir, ec);
  if (ec) return Status::IoError("rename to " + final_dir.string() + ": " + ec.message());
  cleanup.dir.clear();
  SEEDD_RETURN_IF_ERROR(SyncDirectory(root));
  Json record = {{"format", kFormat},
                 {"url", model.url},
                 {"version", model.version},
                 {"files", std::move(files)}};
  SEEDD_RETURN_IF_ERROR(WriteFileAtomic(RecordPath(root, hex), record.dump()));
  stats->bytes_fetched = fetched.load();
  stats->bytes_reused = reused.load();
  stats->files_reused = files_reused.load();
  stats->files_unverified = unverified.load();
  stats->ranged_gets = ranged.load();
  return final_dir;
}

}  // namespace seedd
