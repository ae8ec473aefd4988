#include "kinds/weights/staging.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fstream>

#include "common/crypto.h"
#include "common/errno_status.h"

namespace seedd {
namespace {

constexpr const char* kJournal = ".seedd-journal";
constexpr const char* kRootMarker = ".seedd-root";

Result<std::string> FileSha256(int fd, uint64_t size) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
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

Staging::Staging(const Manifest& manifest, std::filesystem::path dir)
    : m_(manifest), dir_(std::move(dir)) {}

Result<std::vector<uint32_t>> Staging::Open() {
  std::error_code ec;
  // A staging directory of another model version starts over.
  std::ifstream marker(dir_ / kRootMarker);
  std::string root((std::istreambuf_iterator<char>(marker)), {});
  if (root != m_.root_digest) std::filesystem::remove_all(dir_, ec);
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Status::IoError("create " + dir_.string() + ": " + ec.message());
  std::ofstream(dir_ / kRootMarker) << m_.root_digest;
  // Chunks a previous run verified.
  std::vector<uint32_t> resumed;
  std::vector<bool> seen(m_.chunks.size());
  uint64_t resumed_bytes = 0;
  std::ifstream journal(dir_ / kJournal, std::ios::binary);
  unsigned char rec[4];
  while (journal.read(reinterpret_cast<char*>(rec), 4)) {
    const uint32_t i =
        (uint32_t{rec[0]} << 24) | (uint32_t{rec[1]} << 16) | (uint32_t{rec[2]} << 8) | rec[3];
    if (i < m_.chunks.size() && !seen[i]) {
      seen[i] = true;
      resumed.push_back(i);
      resumed_bytes += m_.chunks[i].length;
    }
  }
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
    const auto path = dir_ / f.path;
    std::filesystem::create_directories(path.parent_path(), ec);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd.valid()) return ErrnoStatus("create " + path.string(), errno);
    if (::ftruncate(fd.get(), static_cast<off_t>(f.size)) != 0) {
      return ErrnoStatus("size " + path.string(), errno);
    }
    files_[f.path] = std::move(fd);
    write_mu_.emplace(f.path, std::make_unique<std::mutex>());
  }
  journal_.Reset(
      ::open((dir_ / kJournal).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!journal_.valid()) return ErrnoStatus("open the journal", errno);
  return resumed;
}

Status Staging::Write(const ManifestChunk& c, uint64_t offset, const char* p, size_t n) {
  const int fd = files_.at(c.file).get();
  std::lock_guard<std::mutex> lock(*write_mu_.at(c.file));
  for (uint64_t at = c.offset + offset; n > 0;) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus("write " + c.file, errno);
    p += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status Staging::Sync(const ManifestChunk& c) {
  if (::fdatasync(files_.at(c.file).get()) != 0) return ErrnoStatus("sync " + c.file, errno);
  return Status::Ok();
}

Status Staging::Journal(uint32_t index) {
  unsigned char rec[4] = {
      static_cast<unsigned char>(index >> 24), static_cast<unsigned char>(index >> 16),
      static_cast<unsigned char>(index >> 8), static_cast<unsigned char>(index)};
  std::lock_guard<std::mutex> lock(journal_mu_);
  if (::write(journal_.get(), rec, 4) != 4) {
    return ErrnoStatus("journal chunk " + std::to_string(index), errno);
  }
  return Status::Ok();
}

Status Staging::Commit(const std::filesystem::path& into, bool verify_sha256) {
  for (auto& [path, fd] : files_) {
    if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path, errno);
  }
  std::error_code ec;
  if (verify_sha256) {
    for (const ManifestFile& f : m_.files) {
      Result<std::string> digest = FileSha256(files_.at(f.path).get(), f.size);
      if (!digest.ok()) return digest.status().WithContext(f.path);
      if (*digest != f.sha256) {
        files_.clear();
        std::filesystem::remove_all(dir_, ec);
        return Status::DataLoss(f.path + " failed SHA-256 verification");
      }
    }
  }
  files_.clear();
  {
    std::lock_guard<std::mutex> lock(journal_mu_);
    journal_.Reset();
  }
  std::filesystem::remove(dir_ / kJournal, ec);
  std::filesystem::remove(dir_ / kRootMarker, ec);
  // Nothing partial is ever visible under the final name.
  std::filesystem::rename(dir_, into, ec);
  if (ec) {
    return Status::IoError("rename " + dir_.string() + " to " + into.string() + ": " +
                           ec.message());
  }
  const auto parent = into.has_parent_path() ? into.parent_path() : std::filesystem::path(".");
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) ::fsync(dir.get());
  return Status::Ok();
}

}  // namespace seedd
