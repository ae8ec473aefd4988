#include "kinds/weights/files/file_digests.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <fstream>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "seedd/json_text.h"

namespace seedd {
namespace {

// Streams a file region through XXH3-128 per chunk and SHA-256 overall (when asked).
class FileReader {
 public:
  int fd() const { return fd_.get(); }
  static Result<FileReader> Open(const std::filesystem::path& p) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return ErrnoStatus("open " + p.string(), errno);
    return FileReader(std::move(fd), p.string());
  }
  // True when [offset, offset + length) lies in a hole of a sparse file: its bytes
  // are zeros and need not be read.
  bool IsHole(uint64_t offset, uint64_t length) const {
    off_t data = ::lseek(fd_.get(), static_cast<off_t>(offset), SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // no data at or after offset
    return static_cast<uint64_t>(data) >= offset + length;
  }
  Status Read(uint64_t offset, uint64_t length, std::string* buf) {
    buf->resize(length);
    uint64_t have = 0;
    while (have < length) {
      ssize_t r =
          ::pread(fd_.get(), buf->data() + have, length - have, static_cast<off_t>(offset + have));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus("read " + path_, errno);
      if (r == 0) return Status::DataLoss(path_ + " shrank while it was read");
      have += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

 private:
  FileReader(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

std::string HexBytes(const unsigned char* p, size_t n) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(p), n));
}

struct CachedDigests {
  std::vector<std::string> chunks;
  std::string content_sha256;  // for files that are not safetensors
};

std::filesystem::path CacheFile(const BuildOptions& o, const std::filesystem::path& abs) {
  return o.digest_cache / (Sha256Hex(abs.string()) + ".json");
}

// What tells one version of a file from another: a rewrite in place that keeps
// the size and the mtime (cp -p, archives made with SOURCE_DATE_EPOCH) still
// changes the ctime, and a file put in its place has another inode.
Json FileVersion(const struct stat& st) {
  return Json{
      {"size", static_cast<uint64_t>(st.st_size)},
      {"mtime_ns", MtimeNs(st)},
      {"ctime_ns", static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec},
      {"inode", static_cast<uint64_t>(st.st_ino)},
      {"device", static_cast<uint64_t>(st.st_dev)}};
}

// A cache entry is used only when the path, the file's version and the chunk
// size and digest all match.
std::optional<CachedDigests> LoadCache(const BuildOptions& o, const std::filesystem::path& abs,
                                       const struct stat& st) {
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (o.digest_cache.empty()) return std::nullopt;
  std::ifstream in(CacheFile(o, abs));
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), {});
  Result<Json> j = ParseJson(text);
  if (!j.ok() || !j->is_object() || j->value("path", "") != abs.string() ||
      !j->contains("version") || (*j)["version"] != FileVersion(st) ||
      j->value("chunk_size", uint64_t{0}) != o.chunk_size ||
      j->value("chunk_digest", "xxh3") != ChunkDigestName(o.chunk_digest) ||
      !(*j)["chunks"].is_array()) {
    return std::nullopt;
  }
  CachedDigests d;
  const size_t hex = o.chunk_digest == ChunkDigest::kSha256 ? 64 : 32;
  for (const Json& c : (*j)["chunks"]) {
    if (!c.is_string() || !IsLowerHex(c.get_ref<const std::string&>(), hex)) return std::nullopt;
    d.chunks.push_back(c.get<std::string>());
  }
  d.content_sha256 = j->value("content_sha256", "");
  if (!IsLowerHex(d.content_sha256, 64)) return std::nullopt;
  if (d.chunks.size() != (size + o.chunk_size - 1) / o.chunk_size) return std::nullopt;
  return d;
}

void StoreCache(const BuildOptions& o, const std::filesystem::path& abs, const struct stat& st,
                const CachedDigests& d) {
  if (o.digest_cache.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(o.digest_cache, ec);
  Json j = {{"path", abs.string()},       {"version", FileVersion(st)},
            {"chunk_size", o.chunk_size}, {"chunk_digest", ChunkDigestName(o.chunk_digest)},
            {"chunks", d.chunks},         {"content_sha256", d.content_sha256}};
  // Written beside and renamed: a reader never sees half an entry.
  const auto dest = CacheFile(o, abs);
  const auto tmp = dest.string() + ".tmp-" + RandomHexOrDie(4);
  std::ofstream(tmp) << DumpJson(j);
  std::filesystem::rename(tmp, dest, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string Xxh3Hex(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return HexBytes(c.digest, sizeof(c.digest));
}

std::string_view ChunkDigestName(ChunkDigest algo) {
  return algo == ChunkDigest::kSha256 ? "sha256" : "xxh3";
}

Result<ChunkDigest> ParseChunkDigest(std::string_view name, std::string_view flag) {
  if (name == "xxh3") return ChunkDigest::kXxh3;
  if (name == "sha256") return ChunkDigest::kSha256;
  return Status::InvalidArgument(std::string(flag) + ": unknown chunk digest '" +
                                 std::string(name.substr(0, 64)) +
                                 "' (xxh3: fast, catches corruption; sha256: also holds "
                                 "against forged chunks)");
}

std::string ChunkDigestHex(ChunkDigest algo, std::string_view data) {
  return algo == ChunkDigest::kSha256 ? Sha256Hex(data) : Xxh3Hex(data);
}

ChunkHasher::ChunkHasher(ChunkDigest algo) : algo_(algo) {
  if (algo_ == ChunkDigest::kSha256) {
    sha_ = EVP_MD_CTX_new();
    if (sha_ == nullptr) throw std::bad_alloc();
  } else {
    xxh3_ = XXH3_createState();
    if (xxh3_ == nullptr) throw std::bad_alloc();
  }
  Reset();
}

ChunkHasher::~ChunkHasher() {
  if (xxh3_ != nullptr) XXH3_freeState(static_cast<XXH3_state_t*>(xxh3_));
  if (sha_ != nullptr) EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(sha_));
}

void ChunkHasher::Reset() {
  if (sha_ != nullptr) {
    EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(sha_), EVP_sha256(), nullptr);
  } else {
    XXH3_128bits_reset(static_cast<XXH3_state_t*>(xxh3_));
  }
}

void ChunkHasher::Update(std::string_view piece) {
  if (sha_ != nullptr) {
    EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(sha_), piece.data(), piece.size());
  } else {
    XXH3_128bits_update(static_cast<XXH3_state_t*>(xxh3_), piece.data(), piece.size());
  }
}

std::string ChunkHasher::HexDigest() const {
  if (sha_ != nullptr) {
    // Finalizing a copy keeps this const and the hasher usable.
    EVP_MD_CTX* copy = EVP_MD_CTX_new();
    if (copy == nullptr) throw std::bad_alloc();
    EVP_MD_CTX_copy_ex(copy, static_cast<const EVP_MD_CTX*>(sha_));
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_DigestFinal_ex(copy, md, &md_len);
    EVP_MD_CTX_free(copy);
    return HexBytes(md, md_len);
  }
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<const XXH3_state_t*>(xxh3_));
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return HexBytes(c.digest, sizeof(c.digest));
}

void RememberDigests(const std::filesystem::path& abs, const BuildOptions& options,
                     const FileDigests& d) {
  struct stat st {};
  if (::stat(abs.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != d.size) return;
  StoreCache(options, abs, st, CachedDigests{d.chunks, d.sha256});
}

Result<FileDigests> DigestFile(const std::filesystem::path& abs, const BuildOptions& options,
                               BuildStats* stats) {
  Result<FileReader> reader = FileReader::Open(abs);
  if (!reader.ok()) return reader.status();
  struct stat st {};
  if (::fstat(reader->fd(), &st) != 0) return ErrnoStatus("stat " + abs.string(), errno);
  FileDigests d;
  d.size = static_cast<uint64_t>(st.st_size);
  d.mtime_ns = MtimeNs(st);
  if (std::optional<CachedDigests> cached = LoadCache(options, abs, st)) {
    d.chunks = std::move(cached->chunks);
    d.sha256 = std::move(cached->content_sha256);
    return d;
  }
  EVP_MD_CTX* sha = EVP_MD_CTX_new();
  EVP_DigestInit_ex(sha, EVP_sha256(), nullptr);
  std::string buf;
  for (uint64_t off = 0; off < d.size; off += options.chunk_size) {
    const uint64_t len = std::min(options.chunk_size, d.size - off);
    if (reader->IsHole(off, len)) {
      buf.assign(len, '\0');
    } else if (Status s = reader->Read(off, len, &buf); !s.ok()) {
      EVP_MD_CTX_free(sha);
      return s;
    }
    d.chunks.push_back(ChunkDigestHex(options.chunk_digest, buf));
    EVP_DigestUpdate(sha, buf.data(), buf.size());
    if (stats != nullptr) stats->bytes_hashed += len;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_DigestFinal_ex(sha, md, &md_len);
  EVP_MD_CTX_free(sha);
  d.sha256 = HexBytes(md, md_len);
  StoreCache(options, abs, st, CachedDigests{d.chunks, d.sha256});
  return d;
}

}  // namespace seedd
