#include "kinds/weights/manifest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "seedd/json_text.h"
#include "seedd/seed_config.h"

namespace seedd {
namespace {

constexpr uint64_t kMaxFileBytes = 1ull << 50;

bool IsHex(const Json& v, size_t n) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() != n) return false;
  for (char c : v.get_ref<const std::string&>()) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<uint64_t> Uint(const Json& obj, const char* field, const std::string& where) {
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_number_integer() ||
      (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
    return Status::InvalidArgument(where + ": '" + field + "' must be a non-negative integer");
  }
  return it->get<uint64_t>();
}

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

// A cache entry is used only when path, size, mtime and chunk size all match.
std::optional<CachedDigests> LoadCache(const BuildOptions& o, const std::filesystem::path& abs,
                                       uint64_t size, int64_t mtime_ns) {
  if (o.digest_cache.empty()) return std::nullopt;
  std::ifstream in(CacheFile(o, abs));
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), {});
  Result<Json> j = ParseJson(text);
  if (!j.ok() || !j->is_object() || j->value("path", "") != abs.string() ||
      j->value("size", uint64_t{0}) != size || j->value("mtime_ns", int64_t{-1}) != mtime_ns ||
      j->value("chunk_size", uint64_t{0}) != o.chunk_size ||
      j->value("chunk_digest", "xxh3") != ChunkDigestName(o.chunk_digest) ||
      !(*j)["chunks"].is_array()) {
    return std::nullopt;
  }
  CachedDigests d;
  const size_t hex = o.chunk_digest == ChunkDigest::kSha256 ? 64 : 32;
  for (const Json& c : (*j)["chunks"]) {
    if (!IsHex(c, hex)) return std::nullopt;
    d.chunks.push_back(c.get<std::string>());
  }
  d.content_sha256 = j->value("content_sha256", "");
  if (!IsHex(Json(d.content_sha256), 64)) return std::nullopt;
  if (d.chunks.size() != (size + o.chunk_size - 1) / o.chunk_size) return std::nullopt;
  return d;
}

void StoreCache(const BuildOptions& o, const std::filesystem::path& abs, uint64_t size,
                int64_t mtime_ns, const CachedDigests& d) {
  if (o.digest_cache.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(o.digest_cache, ec);
  Json j = {{"path", abs.string()},
            {"size", size},
            {"mtime_ns", mtime_ns},
            {"chunk_size", o.chunk_size},
            {"chunk_digest", ChunkDigestName(o.chunk_digest)},
            {"chunks", d.chunks},
            {"content_sha256", d.content_sha256}};
  // Written beside and renamed: a reader never sees half an entry.
  const auto dest = CacheFile(o, abs);
  const auto tmp = dest.string() + ".tmp-" + RandomHex(4);
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

bool IsReservedPath(std::string_view path) {
  for (size_t at = 0; at < path.size();) {
    if (path.substr(at, 7) == ".seedd-") return true;
    const size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return false;
}

Status ValidateRelativePath(std::string_view path) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("unsafe path '" + std::string(path.substr(0, 200)) +
                                   "': " + why);
  };
  if (path.empty()) return bad("empty");
  if (path.size() > 4096) return bad("longer than 4096 bytes");
  if (path.front() == '/') return bad("absolute");
  if (path.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (path.find('\\') != std::string_view::npos) return bad("contains '\\'");
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty()) return bad("empty component");
    if (part == "." || part == "..") return bad("'.' or '..' component");
    if (part.size() > 255) return bad("component longer than 255 bytes");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::Ok();
}

Json Manifest::ToJson() const {
  Json files_j = Json::array();
  for (const auto& f : files) {
    files_j.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  }
  Json tensors_j = Json::array();
  for (const auto& t : tensors) {
    tensors_j.push_back({{"file", t.file},
                         {"name", t.info.name},
                         {"dtype", t.info.dtype},
                         {"shape", t.info.shape},
                         {"begin", t.info.begin},
                         {"end", t.info.end}});
  }
  Json chunks_j = Json::array();
  const std::string key(ChunkDigestName(chunk_digest));
  for (const auto& c : chunks) {
    chunks_j.push_back(
        {{"file", c.file}, {"offset", c.offset}, {"length", c.length}, {key, c.digest}});
  }
  Json j = {{"model", model},           {"fingerprint", fingerprint}, {"chunk_size", chunk_size},
            {"total_size", total_size}, {"files", files_j},           {"tensors", tensors_j},
            {"chunks", chunks_j},       {"sources", sources}};
  // Absent means XXH3-128, which keeps the manifests (and root digests) made
  // before SHA-256 chunks existed as they were.
  if (chunk_digest != ChunkDigest::kXxh3) j["chunk_digest"] = key;
  j["root_digest"] = root_digest.empty() ? ManifestRootDigest(j) : root_digest;
  return j;
}

std::string ManifestRootDigest(const Json& manifest) {
  // The sources say where to fetch, not what: they vary per manifest handed out
  // (the origin adds the peers holding the model), so the digest leaves them out.
  Json without = manifest;
  if (without.is_object()) {
    without.erase("root_digest");
    without.erase("sources");
  }
  return Sha256Hex(DumpJson(without));
}

bool IsModelName(std::string_view s) {
  if (s.empty() || s.size() > 128 || s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  }
  return true;
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
  if (std::optional<CachedDigests> cached = LoadCache(options, abs, d.size, d.mtime_ns)) {
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
  StoreCache(options, abs, d.size, d.mtime_ns, CachedDigests{d.chunks, d.sha256});
  return d;
}

Result<Manifest> ParseManifest(const Json& j, const ManifestLimits& limits) {
  auto bad = [](const std::string& why) { return Status::InvalidArgument("manifest: " + why); };
  if (!j.is_object()) return bad("not a JSON object");
  Manifest m;
  if (!j.contains("model") || !j["model"].is_string() ||
      !IsModelName(j["model"].get<std::string>())) {
    return bad("invalid model name");
  }
  m.model = j["model"];
  if (!IsHex(j.value("fingerprint", Json()), 64)) return bad("invalid fingerprint");
  m.fingerprint = j["fingerprint"];
  Result<uint64_t> cs = Uint(j, "chunk_size", "manifest");
  if (!cs.ok()) return cs.status();
  if (*cs < 4096 || *cs > (1ull << 30)) return bad("chunk_size must be 4 KiB to 1 GiB");
  m.chunk_size = *cs;
  if (auto algo = j.find("chunk_digest"); algo != j.end()) {
    if (!algo->is_string()) return bad("'chunk_digest' must be a string");
    Result<ChunkDigest> parsed = ParseChunkDigest(algo->get_ref<const std::string&>(), "manifest");
    if (!parsed.ok()) return parsed.status();
    m.chunk_digest = *parsed;
  }
  const std::string digest_key(ChunkDigestName(m.chunk_digest));
  const size_t digest_hex = m.chunk_digest == ChunkDigest::kSha256 ? 64 : 32;
  Result<uint64_t> total = Uint(j, "total_size", "manifest");
  if (!total.ok()) return total.status();
  m.total_size = *total;
  for (const char* field : {"files", "tensors", "chunks", "sources"}) {
    if (!j.contains(field) || !j[field].is_array())
      return bad(std::string("'") + field + "' must be an array");
  }
  if (j["files"].empty()) return bad("the model has no files");
  auto over = [&](const char* what, size_t n, size_t limit) {
    return bad(std::to_string(n) + " " + what + " (at most " + std::to_string(limit) + ")");
  };
  if (j["files"].size() > limits.files) return over("files", j["files"].size(), limits.files);
  if (j["chunks"].size() > limits.chunks) return over("chunks", j["chunks"].size(), limits.chunks);
  if (j["tensors"].size() > limits.tensors) {
    return over("tensors", j["tensors"].size(), limits.tensors);
  }
  if (j["sources"].size() > limits.sources) {
    return over("sources", j["sources"].size(), limits.sources);
  }
  std::map<std::string, uint64_t> sizes;
  uint64_t sum = 0;
  for (const Json& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string())
      return bad("a file without a path");
    const std::string path = f["path"];
    SEEDD_RETURN_IF_ERROR(ValidateRelativePath(path).WithContext("manifest"));
    if (IsReservedPath(path)) {
      return bad("file '" + path + "' uses a name seedd keeps for itself (.seedd-*)");
    }
    Result<uint64_t> size = Uint(f, "size", "manifest: file '" + path + "'");
    if (!size.ok()) return size.status();
    if (*size > kMaxFileBytes) return bad("file '" + path + "' is larger than 1 PiB");
    if (!sizes.emplace(path, *size).second) return bad("file '" + path + "' is listed twice");
    if (!IsHex(f.value("sha256", Json()), 64)) return bad("file '" + path + "' has a bad sha256");
    m.files.push_back({path, *size, f["sha256"]});
    sum += *size;
  }
  for (const auto& [path, size] : sizes) {
    auto below = sizes.lower_bound(path + "/");
    if (below != sizes.end() && below->first.rfind(path + "/", 0) == 0) {
      return bad("'" + path + "' is both a file and a directory");
    }
  }
  if (sum != m.total_size) {
    return bad("file sizes add up to " + std::to_string(sum) + ", not total_size " +
               std::to_string(m.total_size));
  }
  std::map<std::string, uint64_t> covered;  // file → bytes tiled so far
  for (const Json& c : j["chunks"]) {
    if (!c.is_object() || !c.contains("file") || !c["file"].is_string())
      return bad("a chunk without a file");
    const std::string file = c["file"];
    auto it = sizes.find(file);
    if (it == sizes.end()) return bad("a chunk names the unlisted file '" + file + "'");
    Result<uint64_t> off = Uint(c, "offset", "manifest: chunk of '" + file + "'");
    if (!off.ok()) return off.status();
    Result<uint64_t> len = Uint(c, "length", "manifest: chunk of '" + file + "'");
    if (!len.ok()) return len.status();
    if (!IsHex(c.value(digest_key, Json()), digest_hex)) {
      return bad("a chunk of '" + file + "' has a bad " + digest_key);
    }
    uint64_t& done = covered[file];
    if (*off != done) {
      return bad("chunks of '" + file + "' do not tile it: expected offset " +
                 std::to_string(done) + ", got " + std::to_string(*off));
    }
    if (*len == 0 || *len > m.chunk_size || *len > it->second - done) {
      return bad("chunk of '" + file + "' at " + std::to_string(*off) + " has a bad length " +
                 std::to_string(*len));
    }
    done += *len;
    m.chunks.push_back({file, *off, *len, c[digest_key]});
  }
  for (const auto& [path, size] : sizes) {
    if (covered[path] != size) {
      return bad("chunks of '" + path + "' cover " + std::to_string(covered[path]) + " of " +
                 std::to_string(size) + " bytes");
    }
  }
  for (const Json& t : j["tensors"]) {
    if (!t.is_object() || !t.contains("file") || !t["file"].is_string() || !t.contains("name") ||
        !t["name"].is_string() || !t.contains("dtype") || !t["dtype"].is_string() ||
        !t.contains("shape") || !t["shape"].is_array()) {
      return bad("a tensor needs file, name, dtype and shape");
    }
    if (t["name"].get_ref<const std::string&>().size() > limits.name_bytes) {
      return bad("a tensor name is longer than " + std::to_string(limits.name_bytes) + " bytes");
    }
    if (t["shape"].size() > limits.dims) {
      return bad("tensor '" + t["name"].get<std::string>() + "' has " +
                 std::to_string(t["shape"].size()) + " dimensions (at most " +
                 std::to_string(limits.dims) + ")");
    }
    ManifestTensor mt;
    mt.file = t["file"];
    mt.info.name = t["name"];
    mt.info.dtype = t["dtype"];
    auto it = sizes.find(mt.file);
    if (it == sizes.end()) return bad("tensor '" + mt.info.name + "' names an unlisted file");
    if (DtypeBytes(mt.info.dtype) == 0)
      return bad("tensor '" + mt.info.name + "' has an unknown dtype");
    for (const Json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor '" + mt.info.name + "' has a bad shape");
      mt.info.shape.push_back(d);
    }
    Result<uint64_t> b = Uint(t, "begin", "manifest: tensor '" + mt.info.name + "'");
    Result<uint64_t> e = Uint(t, "end", "manifest: tensor '" + mt.info.name + "'");
    if (!b.ok()) return b.status();
    if (!e.ok()) return e.status();
    if (*b > *e || *e > it->second)
      return bad("tensor '" + mt.info.name + "' lies outside its file");
    mt.info.begin = *b;
    mt.info.end = *e;
    m.tensors.push_back(std::move(mt));
  }
  for (const Json& s : j["sources"]) {
    if (!s.is_string() || !ParseHostPort(s.get<std::string>()).ok())
      return bad("a source is not HOST:PORT");
    m.sources.push_back(s);
  }
  if (!IsHex(j.value("root_digest", Json()), 64)) return bad("invalid root_digest");
  if (j["root_digest"] != ManifestRootDigest(j))
    return bad("root digest does not match the manifest");
  m.root_digest = j["root_digest"];
  return m;
}

Status ValidatePin(std::string_view pin, std::string_view flag) {
  if (!IsHex(Json(std::string(pin)), 64)) {
    return Status::InvalidArgument(std::string(flag) + ": '" + std::string(pin.substr(0, 80)) +
                                   "' is not a root digest (64 lowercase hex digits, as "
                                   "`seedctl manifest` prints it)");
  }
  return Status::Ok();
}

Status CheckPinned(const Manifest& m, std::string_view pin) {
  if (pin.empty() || pin == m.root_digest) return Status::Ok();
  return Status::FailedPrecondition("the source offers model '" + m.model + "' at root digest " +
                                    m.root_digest + ", not the pinned " + std::string(pin) +
                                    "; nothing was fetched");
}

}  // namespace seedd
