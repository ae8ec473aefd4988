#include "kinds/weights/files/manifest.h"

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
  return v.is_string() && IsLowerHex(v.get_ref<const std::string&>(), n);
}

// `where` names the object in the error: "manifest: file 'a.bin'" (`what` then
// `name` in quotes when there is one), built only on an error.
Result<uint64_t> Uint(const Json& obj, const char* field, std::string_view what,
                      std::string_view name = {}) {
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_number_integer() ||
      (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
    std::string where(what);
    if (!name.empty()) where += " '" + std::string(name) + "'";
    return Status::InvalidArgument(where + ": '" + field + "' must be a non-negative integer");
  }
  return it->get<uint64_t>();
}

// The string at `field` of `obj` if it is `n` lowercase hex digits, else null.
const std::string* HexField(const Json& obj, std::string_view field, size_t n) {
  auto it = obj.find(field);
  if (it == obj.end() || !IsHex(*it, n)) return nullptr;
  return &it->get_ref<const std::string&>();
}

}  // namespace

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
  if (format >= 2) j["format"] = format;
  j["root_digest"] = root_digest.empty() ? ManifestRootDigest(j) : root_digest;
  if (!signatures.empty()) j["signatures"] = SignaturesToJson(signatures);
  return j;
}

std::string ManifestRootDigest(const Json& manifest) {
  // The sources say where to fetch, not what: they vary per manifest handed out
  // (the origin adds the peers holding the model), so the digest leaves them out;
  // signatures are over the digest. The text is DumpJson's of the manifest
  // without those fields, written field by field and hashed as it is written
  // (a manifest of 100,000 files is 24 MB of text, never held whole).
  if (!manifest.is_object()) return Sha256Hex(DumpJson(manifest));
  const auto f = manifest.find("format");
  const bool named_apart = f != manifest.end() && f->is_number_integer() && *f >= 2;
  Sha256 hash;
  auto sink = [&](std::string_view piece) { hash.Update(piece); };
  bool first = true;
  for (const auto& [key, value] : manifest.get_ref<const Json::object_t&>()) {
    if (key == "root_digest" || key == "sources" || key == "signatures" ||
        (named_apart && key == "model")) {
      continue;
    }
    std::string head = first ? "{" : ",";
    first = false;
    AppendJson(Json(key), &head);
    head += ':';
    hash.Update(head);
    JsonTextInPieces(value, sink);
  }
  hash.Update(first ? "{}" : "}");
  return hash.HexDigest();
}

bool IsModelName(std::string_view s) {
  if (s.empty() || s.size() > 128 || s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  }
  return true;
}

Result<Manifest> ParseManifest(const Json& j, const ManifestLimits& limits) {
  auto bad = [](const std::string& why) { return Status::InvalidArgument("manifest: " + why); };
  if (!j.is_object()) return bad("not a JSON object");
  Manifest m;
  if (auto f = j.find("format"); f == j.end()) {
    m.format = 1;
  } else if (!f->is_number_integer() || *f < 2 || *f > kManifestFormat) {
    return bad("format " + f->dump() + " is not one this seedd reads (1 and " +
               std::to_string(kManifestFormat) + "): upgrade seedd on this host");
  } else {
    m.format = f->get<int>();
  }
  if (!j.contains("model") || !j["model"].is_string() ||
      !IsModelName(j["model"].get<std::string>())) {
    return bad("invalid model name");
  }
  m.model = j["model"];
  if (!IsHex(j.value("fingerprint", Json()), 64)) return bad("invalid fingerprint");
  m.fingerprint = j["fingerprint"];
  Result<uint64_t> cs = Uint(j, "chunk_size", "manifest");
  if (!cs.ok()) return cs.status();
  if (*cs < kMinChunkBytes || *cs > kMaxChunkBytes) return bad("chunk_size must be 4 KiB to 1 GiB");
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
  // By path: the file's size and how many of its bytes the chunks tile so far.
  struct Tiled {
    uint64_t size = 0;
    uint64_t covered = 0;
  };
  std::map<std::string, Tiled, std::less<>> sizes;
  uint64_t sum = 0;
  m.files.reserve(j["files"].size());
  for (const Json& f : j["files"]) {
    auto p = f.is_object() ? f.find("path") : f.end();
    if (p == f.end() || !p->is_string()) return bad("a file without a path");
    const std::string& path = p->get_ref<const std::string&>();
    SEEDD_RETURN_IF_ERROR(ValidateRelativePath(path).WithContext("manifest"));
    if (IsReservedPath(path)) {
      return bad("file '" + path + "' uses a name seedd keeps for itself (.seedd-*)");
    }
    Result<uint64_t> size = Uint(f, "size", "manifest: file", path);
    if (!size.ok()) return size.status();
    if (*size > kMaxFileBytes) return bad("file '" + path + "' is larger than 1 PiB");
    if (!sizes.emplace(path, Tiled{*size, 0}).second) {
      return bad("file '" + path + "' is listed twice");
    }
    const std::string* sha256 = HexField(f, "sha256", 64);
    if (sha256 == nullptr) return bad("file '" + path + "' has a bad sha256");
    m.files.push_back({path, *size, *sha256});
    sum += *size;
  }
  for (const auto& [path, tiled] : sizes) {
    auto below = sizes.lower_bound(path + "/");
    if (below != sizes.end() && below->first.rfind(path + "/", 0) == 0) {
      return bad("'" + path + "' is both a file and a directory");
    }
  }
  if (sum != m.total_size) {
    return bad("file sizes add up to " + std::to_string(sum) + ", not total_size " +
               std::to_string(m.total_size));
  }
  m.chunks.reserve(j["chunks"].size());
  for (const Json& c : j["chunks"]) {
    auto fi = c.is_object() ? c.find("file") : c.end();
    if (fi == c.end() || !fi->is_string()) return bad("a chunk without a file");
    const std::string& file = fi->get_ref<const std::string&>();
    auto it = sizes.find(file);
    if (it == sizes.end()) return bad("a chunk names the unlisted file '" + file + "'");
    Result<uint64_t> off = Uint(c, "offset", "manifest: chunk of", file);
    if (!off.ok()) return off.status();
    Result<uint64_t> len = Uint(c, "length", "manifest: chunk of", file);
    if (!len.ok()) return len.status();
    const std::string* digest = HexField(c, digest_key, digest_hex);
    if (digest == nullptr) return bad("a chunk of '" + file + "' has a bad " + digest_key);
    uint64_t& done = it->second.covered;
    if (*off != done) {
      return bad("chunks of '" + file + "' do not tile it: expected offset " +
                 std::to_string(done) + ", got " + std::to_string(*off));
    }
    if (*len == 0 || *len > m.chunk_size || *len > it->second.size - done) {
      return bad("chunk of '" + file + "' at " + std::to_string(*off) + " has a bad length " +
                 std::to_string(*len));
    }
    done += *len;
    m.chunks.push_back({file, *off, *len, *digest});
  }
  for (const auto& [path, tiled] : sizes) {
    if (tiled.covered != tiled.size) {
      return bad("chunks of '" + path + "' cover " + std::to_string(tiled.covered) + " of " +
                 std::to_string(tiled.size) + " bytes");
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
    Result<uint64_t> b = Uint(t, "begin", "manifest: tensor", mt.info.name);
    Result<uint64_t> e = Uint(t, "end", "manifest: tensor", mt.info.name);
    if (!b.ok()) return b.status();
    if (!e.ok()) return e.status();
    if (*b > *e || *e > it->second.size)
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
  auto sigs = j.find("signatures");
  Result<std::vector<Signature>> signatures =
      SignaturesFromJson(sigs == j.end() ? nullptr : &*sigs);
  if (!signatures.ok()) return bad(signatures.status().message());
  m.signatures = std::move(*signatures);
  return m;
}

Status CheckManifestSigned(const Manifest& m, const TrustedKeys* trust, std::string_view from) {
  if (trust == nullptr) return Status::Ok();
  return trust->Check(m.signatures, kManifestPurpose, m.root_digest,
                      "the manifest of model " + m.model + " (root digest " + m.root_digest +
                          ") from " + std::string(from));
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
