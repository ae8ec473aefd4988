// The compile_cache bundle (seedd/compile_cache.h): the key and its factors,
// bundling a directory, checking a bundle and installing it.
#include "kinds/compile_cache/bundle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/errno_status.h"
#include "common/file_util.h"
#include "seedd/json_text.h"
#include "seedd/units.h"

namespace seedd {
namespace {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}
bool FactorChar(char c) { return NameChar(c) || (c >= 'A' && c <= 'Z'); }

Status CheckNamespace(std::string_view ns) {
  if (ns.empty() || ns.size() > 64 || ns == "." || ns == ".." ||
      !std::all_of(ns.begin(), ns.end(), NameChar)) {
    return Status::InvalidArgument("invalid namespace (expected [a-z0-9_.-]{1,64})");
  }
  return Status::Ok();
}

Status CheckKey(std::string_view key) {
  if (!IsLowerHex(key, 16, 128)) {
    return Status::InvalidArgument("invalid key (expected 16-128 lowercase hex digits)");
  }
  return Status::Ok();
}

Status CheckFactorName(std::string_view name) {
  if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), FactorChar)) {
    return Status::InvalidArgument("invalid factor name '" + std::string(name.substr(0, 64)) +
                                   "' (expected [A-Za-z0-9_.-]{1,64})");
  }
  return Status::Ok();
}

// A relative '/'-separated path that stays below its root.
Status CheckPath(std::string_view path) {
  auto bad = [&](const char* why) {
    std::string shown(path.substr(0, 200));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    return Status::InvalidArgument("unsafe path '" + shown + "' in the bundle: " + why);
  };
  if (path.empty() || path.size() > 4096) return bad("empty or longer than 4096 bytes");
  if (path.front() == '/') return bad("absolute");
  if (path.find('\\') != std::string_view::npos || path.find('\0') != std::string_view::npos) {
    return bad("a backslash or NUL");
  }
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    const std::string_view part = path.substr(start, slash - start);
    if (part.empty()) return bad("an empty component");
    if (part == "." || part == "..") return bad("a '.' or '..' component");
    if (part.size() > 255) return bad("a component longer than 255 bytes");
    if (start == 0 && part.rfind(kStagingPrefix, 0) == 0) return bad("seedd's staging name");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::Ok();
}

// The file `rel` below `dir_fd`, opened without following a link anywhere on
// the way and checked to be the regular file of `size` bytes that was listed:
// a directory swapped for a link after the listing cannot make it read
// outside the cache directory.
Result<std::string> ReadBeneath(int dir_fd, const std::string& rel, uint64_t size,
                                const std::filesystem::path& shown) {
  Result<UniqueFd> fd = OpenBeneath(dir_fd, rel, O_RDONLY | O_NOFOLLOW);
  if (!fd.ok()) return fd.status().WithContext(shown.string());
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return ErrnoStatus("stat " + shown.string(), errno);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) {
    return Status::Unavailable(shown.string() + " changed while it was bundled; try again");
  }
  std::string data(size, '\0');
  SEEDD_RETURN_IF_ERROR(ReadExactly(fd->get(), 0, data.data(), size, shown.string()));
  return data;
}

// The directory `rel` below `dir_fd`, each component opened without following
// a link and made (0755) when missing: what is installed there stays below.
Result<UniqueFd> DirectoryBeneath(int dir_fd, const std::filesystem::path& rel,
                                  const std::filesystem::path& shown) {
  UniqueFd at(::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!at.valid()) return ErrnoStatus("dup", errno);
  std::filesystem::path walked = shown;
  for (const auto& part : rel) {
    walked /= part;
    if (::mkdirat(at.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + walked.string(), errno);
    }
    UniqueFd next(::openat(at.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return Status::FailedPrecondition(walked.string() +
                                        " is not a directory (a link is never followed): "
                                        "not installing below it");
    }
    at = std::move(next);
  }
  return at;
}

}  // namespace

std::string FactorText(const Json& v) { return v.is_string() ? v.get<std::string>() : DumpJson(v); }

// The files a bundle of `spec.dir` holds, sorted by path (stat only, no reads).
Result<std::vector<FoundFile>> ListCacheFiles(const CompileCacheSpec& spec) {
  std::vector<FoundFile> found;
  uint64_t total = 0;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(spec.dir, ec), end;
  if (ec) return Status::NotFound("cannot read " + spec.dir.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return Status::IoError("reading " + spec.dir.string() + ": " + ec.message());
    const std::string rel = it->path().lexically_relative(spec.dir).generic_string();
    if (it.depth() == 0 && rel.rfind(kStagingPrefix, 0) == 0) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (!CheckPath(rel).ok()) continue;
    total += static_cast<uint64_t>(st.st_size);
    if (total > spec.max_bytes || found.size() >= kMaxCompileCacheFiles) {
      return Status::ResourceExhausted("compile cache " + spec.name + " (" + spec.dir.string() +
                                       ") holds more than " + HumanBytes(spec.max_bytes) + " or " +
                                       std::to_string(kMaxCompileCacheFiles) +
                                       " files, the most one bundle carries");
    }
    found.push_back({rel, it->path(), static_cast<uint64_t>(st.st_size), MtimeNs(st)});
  }
  std::sort(found.begin(), found.end(),
            [](const FoundFile& a, const FoundFile& b) { return a.path < b.path; });
  return found;
}

Status ValidateCompileCacheKey(const Json& fields) {
  if (!fields.is_object()) return Status::InvalidArgument("the key must be a JSON object");
  auto ns = fields.find("namespace");
  if (ns == fields.end()) return Status::InvalidArgument("missing field 'namespace'");
  if (!ns->is_string()) return Status::InvalidArgument("field 'namespace' must be a string");
  SEEDD_RETURN_IF_ERROR(CheckNamespace(ns->get<std::string>()));
  auto key = fields.find("key");
  if (key == fields.end()) return Status::InvalidArgument("missing field 'key'");
  if (!key->is_string()) return Status::InvalidArgument("field 'key' must be a string");
  return CheckKey(key->get<std::string>());
}

Result<CompileFactors> ParseCompileFactors(const std::vector<std::string>& pairs,
                                           const std::filesystem::path& json_file) {
  CompileFactors out;
  if (!json_file.empty()) {
    std::ifstream in(json_file);
    if (!in) return Status::InvalidArgument("cannot read the factors file " + json_file.string());
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().size() > 1 << 20) {
      return Status::InvalidArgument("the factors file " + json_file.string() + " exceeds 1 MiB");
    }
    Result<Json> j = ParseJson(text.str());
    if (!j.ok() || !j->is_object()) {
      return Status::InvalidArgument("the factors file " + json_file.string() +
                                     " must hold a JSON object of NAME: VALUE");
    }
    for (auto it = j->begin(); it != j->end(); ++it) {
      SEEDD_RETURN_IF_ERROR(CheckFactorName(it.key()));
      if (it->is_object() || it->is_array()) {
        return Status::InvalidArgument("factor '" + it.key() + "' in " + json_file.string() +
                                       " must be a string, number or boolean");
      }
      out[it.key()] = FactorText(*it);
    }
  }
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("factor '" + pair + "' is not NAME=VALUE");
    }
    SEEDD_RETURN_IF_ERROR(CheckFactorName(pair.substr(0, eq)));
    out[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return out;
}

std::string CompileCacheModelName(std::string_view ns, std::string_view key) {
  return "compile_cache." + std::string(ns) + "." + std::string(key.substr(0, 48));
}

bool HasCompileCacheContent(const Json& bundle) {
  return bundle.is_object() && bundle.contains("content");
}

Result<Json> BundleCompileCache(const CompileCacheSpec& spec, CompileCacheDataPlane* plane) {
  SEEDD_RETURN_IF_ERROR(CheckNamespace(spec.name));
  SEEDD_RETURN_IF_ERROR(CheckKey(spec.key));
  Result<UniqueFd> root = OpenDirectory(spec.dir);
  if (!root.ok()) return root.status();
  Result<std::vector<FoundFile>> found = ListCacheFiles(spec);
  if (!found.ok()) return found.status();
  uint64_t total = 0;
  for (const FoundFile& f : *found) total += f.size;
  const bool inline_files = total <= kMaxInlineCompileCacheBytes;
  Json files = Json::array();
  Json content;
  if (inline_files) {
    for (const FoundFile& f : *found) {
      Result<std::string> data = ReadBeneath(root->get(), f.path, f.size, f.full);
      if (!data.ok()) return data.status();
      files.push_back({{"path", f.path},
                       {"size", f.size},
                       {"sha256", Sha256Hex(*data)},
                       {"mtime_ns", f.mtime_ns},
                       {"data", Base64Encode(*data)}});
    }
  } else {
    if (plane == nullptr) {
      return Status::ResourceExhausted(
          "compile cache " + spec.name + " (" + spec.dir.string() + ") holds " + HumanBytes(total) +
          "; more than " + HumanBytes(kMaxInlineCompileCacheBytes) +
          " travels on a daemon's weights data plane, which this caller has not");
    }
    const std::string model = CompileCacheModelName(spec.name, spec.key);
    std::vector<std::string> paths;
    for (const FoundFile& f : *found) paths.push_back(f.path);
    std::map<std::string, std::string> sha256;
    Result<std::string> root_digest = plane->Serve(model, spec.dir, paths, &sha256);
    if (!root_digest.ok()) return root_digest.status().WithContext("serving " + model);
    for (const FoundFile& f : *found) {
      auto sha = sha256.find(f.path);
      if (sha == sha256.end()) {
        return Status::Unavailable(f.full.string() + " changed while it was bundled; try again");
      }
      files.push_back(
          {{"path", f.path}, {"size", f.size}, {"sha256", sha->second}, {"mtime_ns", f.mtime_ns}});
    }
    content = Json{{"model", model}, {"root_digest", *root_digest}};
  }
  Json factors = Json::object();
  for (const auto& [name, value] : spec.factors) factors[name] = value;
  Json bundle{{"namespace", spec.name},
              {"key", spec.key},
              {"factors", std::move(factors)},
              {"files", std::move(files)},
              {"total_size", total}};
  if (!content.is_null()) bundle["content"] = std::move(content);
  if (spec.sign_key != nullptr) {
    bundle["signatures"] =
        SignaturesToJson({spec.sign_key->Sign(kBundlePurpose, CompileCacheBundleDigest(bundle))});
  }
  return bundle;
}

std::string CompileCacheBundleDigest(const Json& bundle) {
  Json without = Json::object();
  if (!bundle.is_object()) return Sha256Hex(DumpJson(bundle));
  for (auto it = bundle.begin(); it != bundle.end(); ++it) {
    if (it.key() == "signatures") continue;
    if (it.key() != "files" || !it->is_array()) {
      without[it.key()] = it.value();
      continue;
    }
    Json files = Json::array();
    for (const Json& f : *it) {
      if (!f.is_object()) {
        files.push_back(f);
        continue;
      }
      Json entry = Json::object();
      for (auto field = f.begin(); field != f.end(); ++field) {
        if (field.key() != "data") entry[field.key()] = field.value();
      }
      files.push_back(std::move(entry));
    }
    without["files"] = std::move(files);
  }
  return Sha256Hex(DumpJson(without));
}

std::string CompareCompileFactors(const CompileFactors& remote, const CompileFactors& local) {
  std::set<std::string> names;
  for (const auto& [n, v] : remote) names.insert(n);
  for (const auto& [n, v] : local) names.insert(n);
  std::string out;
  for (const std::string& n : names) {
    auto r = remote.find(n);
    auto l = local.find(n);
    const std::string rv = r == remote.end() ? "(none)" : r->second;
    const std::string lv = l == local.end() ? "(none)" : l->second;
    if (r != remote.end() && l != local.end() && rv == lv) continue;
    out += (out.empty() ? "" : ", ") + n + ": remote=" + rv + " vs local=" + lv;
  }
  return out;
}

Result<Json> ValidateCompileCacheBundle(const Json& bundle, std::string_view ns,
                                        std::string_view key, const CompileFactors& local,
                                        uint64_t max_bytes, const TrustedKeys* trust) {
  if (!bundle.is_object()) return Status::InvalidArgument("the bundle must be an object");
  if (bundle.value("namespace", Json()) != ns || bundle.value("key", Json()) != key) {
    return Status::InvalidArgument("the bundle is for another cache than " + std::string(ns) + "/" +
                                   std::string(key));
  }
  auto sigs = bundle.find("signatures");
  Result<std::vector<Signature>> signatures =
      SignaturesFromJson(sigs == bundle.end() ? nullptr : &*sigs);
  if (!signatures.ok()) return signatures.status().WithContext("the bundle");
  if (trust != nullptr) {
    // The digest covers every file's size and SHA-256, checked against the bytes below.
    SEEDD_RETURN_IF_ERROR(
        trust->Check(*signatures, kBundlePurpose, CompileCacheBundleDigest(bundle),
                     "the bundle of " + std::string(ns) + "/" + std::string(key)));
  }
  auto factors = bundle.find("factors");
  if (factors == bundle.end() || !factors->is_object() || factors->size() > 1024) {
    return Status::InvalidArgument("the bundle's 'factors' must be an object");
  }
  CompileFactors remote;
  for (auto it = factors->begin(); it != factors->end(); ++it) {
    SEEDD_RETURN_IF_ERROR(CheckFactorName(it.key()));
    if (!it->is_string() || it->get<std::string>().size() > 4096) {
      return Status::InvalidArgument("factor '" + it.key() + "' must be a string");
    }
    remote[it.key()] = it->get<std::string>();
  }
  // Before the files: a cache compiled elsewhere never heals.
  if (std::string diff = CompareCompileFactors(remote, local); !diff.empty()) {
    return Status::FailedPrecondition("compile cache environment mismatch: " + diff);
  }
  const bool by_reference = HasCompileCacheContent(bundle);
  if (by_reference) {
    const Json& content = bundle["content"];
    const std::string expected = CompileCacheModelName(ns, key);
    if (!content.is_object() || content.value("model", Json()) != expected) {
      return Status::InvalidArgument("the bundle's 'content' must name the model " + expected);
    }
    auto root = content.find("root_digest");
    if (root == content.end() || !root->is_string() ||
        !IsLowerHex(root->get_ref<const std::string&>(), 64)) {
      return Status::InvalidArgument(
          "the bundle's 'content' must have a 'root_digest' of 64 lowercase hex digits");
    }
  }
  auto files = bundle.find("files");
  if (files == bundle.end() || !files->is_array() || files->size() > kMaxCompileCacheFiles) {
    return Status::InvalidArgument("the bundle's 'files' must be an array of at most " +
                                   std::to_string(kMaxCompileCacheFiles));
  }
  std::set<std::string> paths;
  uint64_t total = 0;
  for (const Json& f : *files) {
    if (!f.is_object()) return Status::InvalidArgument("a bundle file must be an object");
    auto path = f.find("path");
    if (path == f.end() || !path->is_string()) {
      return Status::InvalidArgument("a bundle file has no 'path'");
    }
    const std::string p = path->get<std::string>();
    SEEDD_RETURN_IF_ERROR(CheckPath(p));
    if (!paths.insert(p).second) return Status::InvalidArgument("'" + p + "' twice in the bundle");
    auto size = f.find("size");
    if (size == f.end() || !size->is_number_unsigned()) {
      return Status::InvalidArgument("'" + p + "': 'size' must be a non-negative integer");
    }
    // Checked before adding: sizes a peer claims must not wrap the sum around.
    if (size->get<uint64_t>() > max_bytes || total > max_bytes - size->get<uint64_t>()) {
      return Status::ResourceExhausted("the bundle's files exceed the cap of " +
                                       HumanBytes(max_bytes));
    }
    total += size->get<uint64_t>();
    auto sha = f.find("sha256");
    if (sha == f.end() || !sha->is_string() ||
        !IsLowerHex(sha->get_ref<const std::string&>(), 64)) {
      return Status::InvalidArgument("'" + p + "': 'sha256' must be 64 lowercase hex digits");
    }
    auto mtime = f.find("mtime_ns");
    if (mtime == f.end() || !mtime->is_number_integer()) {
      return Status::InvalidArgument("'" + p + "': 'mtime_ns' must be an integer");
    }
    auto data = f.find("data");
    if (by_reference) {
      if (data != f.end()) {
        return Status::InvalidArgument("'" + p +
                                       "': a bundle with 'content' carries no file 'data'");
      }
      continue;  // checked against its SHA-256 as it is installed
    }
    if (total > kMaxInlineCompileCacheBytes) {
      return Status::ResourceExhausted("the bundle carries more than " +
                                       HumanBytes(kMaxInlineCompileCacheBytes) + " inline");
    }
    if (data == f.end() || !data->is_string() ||
        data->get<std::string>().size() > (size->get<uint64_t>() + 2) / 3 * 4) {
      return Status::InvalidArgument("'" + p + "': 'data' must be base64 of 'size' bytes");
    }
    std::optional<std::string> bytes = Base64Decode(data->get<std::string>());
    if (!bytes.has_value()) return Status::InvalidArgument("'" + p + "': 'data' is not base64");
    if (bytes->size() != size->get<uint64_t>()) {
      return Status::DataLoss("'" + p + "': " + std::to_string(bytes->size()) +
                              " bytes, the bundle says " + std::to_string(size->get<uint64_t>()));
    }
    if (Sha256Hex(*bytes) != sha->get<std::string>()) {
      return Status::DataLoss("'" + p + "': SHA-256 mismatch");
    }
  }
  // A path that is also another's directory cannot be laid out.
  for (const std::string& p : paths) {
    auto next = paths.upper_bound(p + "/");
    if (next != paths.end() && next->rfind(p + "/", 0) == 0) {
      return Status::InvalidArgument("'" + p + "' is both a file and a directory in the bundle");
    }
  }
  return bundle;
}

namespace {

// A bundle file's time, within [0, now]: a file from the future would keep
// every later install from replacing it.
int64_t MtimeOf(const Json& file) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return std::clamp<int64_t>(file["mtime_ns"].get<int64_t>(), 0, now);
}

}  // namespace

namespace {

// Writes all of `bytes` to `fd`.
Status WriteAllTo(int fd, std::string_view bytes, const std::filesystem::path& shown) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write " + shown.string(), errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Copies the bundle file `file` from below `content_fd` (no link followed) to
// `out`, checking its size and SHA-256 against the bundle's.
Status CopyChecked(int content_fd, const std::filesystem::path& content_dir, const Json& file,
                   int out, const std::filesystem::path& shown) {
  const std::string rel = file["path"].get<std::string>();
  const uint64_t size = file["size"].get<uint64_t>();
  Result<UniqueFd> in = OpenBeneath(content_fd, rel, O_RDONLY | O_NOFOLLOW);
  if (!in.ok()) return in.status().WithContext("the pulled content " + content_dir.string());
  Sha256 sha;
  std::string buf(1 << 20, '\0');
  uint64_t copied = 0;
  for (;;) {
    const ssize_t n = ::read(in->get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + (content_dir / rel).string(), errno);
    if (n == 0) break;
    copied += static_cast<uint64_t>(n);
    if (copied > size) break;
    sha.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
    SEEDD_RETURN_IF_ERROR(
        WriteAllTo(out, std::string_view(buf.data(), static_cast<size_t>(n)), shown));
  }
  if (copied != size) {
    return Status::DataLoss("'" + rel + "': the pulled file has " +
                            (copied > size ? "more than " : "") + std::to_string(copied) +
                            " bytes, the bundle says " + std::to_string(size));
  }
  const std::string actual = sha.HexDigest();
  if (actual != file["sha256"].get<std::string>()) {
    return Status::DataLoss("'" + rel + "': SHA-256 mismatch: the bundle says " +
                            file["sha256"].get<std::string>() + ", the pulled file is " + actual);
  }
  return Status::Ok();
}

}  // namespace

Result<CompileCacheInstall> InstallCompileCache(const Json& bundle,
                                                const std::filesystem::path& dir,
                                                const std::filesystem::path& content_dir) {
  const bool by_reference = HasCompileCacheContent(bundle);
  if (by_reference && content_dir.empty()) {
    return Status::FailedPrecondition("the bundle's files are on the data plane: pull " +
                                      bundle["content"].value("model", std::string()) + " first");
  }
  UniqueFd content_fd;
  if (by_reference) {
    Result<UniqueFd> opened = OpenDirectory(content_dir);
    if (!opened.ok()) return opened.status();
    content_fd = std::move(*opened);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir.string() + ": " + ec.message());
  // Everything below is relative to directories held open, never a path looked
  // up again: whoever else can write `dir` (the engine's user) cannot redirect
  // a write by swapping a directory for a link.
  Result<UniqueFd> root = OpenDirectory(dir);
  if (!root.ok()) return root.status();
  // Every file lands in staging first (0700, made here): a failure leaves
  // nothing under a final name.
  const std::string staging_name = std::string(kStagingPrefix) + RandomHexOrDie(8);
  if (::mkdirat(root->get(), staging_name.c_str(), 0700) != 0) {
    return ErrnoStatus("mkdir " + (dir / staging_name).string(), errno);
  }
  UniqueFd staging(
      ::openat(root->get(), staging_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!staging.valid()) return ErrnoStatus("open " + (dir / staging_name).string(), errno);
  const Json& files = bundle["files"];
  struct Cleanup {
    int root;
    int staging;
    const std::string& name;
    size_t files;
    ~Cleanup() {
      for (size_t i = 0; i < files; ++i) ::unlinkat(staging, std::to_string(i).c_str(), 0);
      ::unlinkat(root, name.c_str(), AT_REMOVEDIR);
    }
  } cleanup{root->get(), staging.get(), staging_name, files.size()};
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string name = std::to_string(i);
    const std::filesystem::path shown = dir / staging_name / name;
    UniqueFd out(::openat(staging.get(), name.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!out.valid()) return ErrnoStatus("create " + shown.string(), errno);
    if (by_reference) {
      SEEDD_RETURN_IF_ERROR(CopyChecked(content_fd.get(), content_dir, files[i], out.get(), shown));
    } else {
      std::optional<std::string> bytes = Base64Decode(files[i]["data"].get<std::string>());
      SEEDD_RETURN_IF_ERROR(WriteAllTo(out.get(), *bytes, shown));
    }
    const int64_t ns = MtimeOf(files[i]);
    const timespec times[2] = {{0, UTIME_OMIT}, {ns / 1000000000, ns % 1000000000}};
    ::futimens(out.get(), times);
    if (::fsync(out.get()) != 0) return ErrnoStatus("sync " + shown.string(), errno);
  }
  CompileCacheInstall done;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string rel = files[i]["path"].get<std::string>();
    const int64_t mtime = MtimeOf(files[i]);
    const std::filesystem::path target = dir / rel;
    const std::filesystem::path rel_path(rel);
    Result<UniqueFd> parent = DirectoryBeneath(root->get(), rel_path.parent_path(), dir);
    if (!parent.ok()) return parent.status();
    const std::string base = rel_path.filename().string();
    struct stat st;
    if (::fstatat(parent->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISREG(st.st_mode)) {
        return Status::FailedPrecondition(target.string() +
                                          " exists and is not a file: not replaced");
      }
      if (MtimeNs(st) >= mtime) {
        ++done.kept_newer;
        continue;
      }
    }
    // renameat replaces whatever is at the name (a link itself, never its target).
    if (::renameat(staging.get(), std::to_string(i).c_str(), parent->get(), base.c_str()) != 0) {
      return ErrnoStatus("rename into " + target.string(), errno);
    }
    ++done.installed;
    done.bytes += files[i]["size"].get<uint64_t>();
    done.paths.push_back(rel);
  }
  SEEDD_RETURN_IF_ERROR(SyncDirectory(dir));
  return done;
}

Result<CompileCacheInstall> InstallCompileCacheBundle(const Json& bundle,
                                                      const std::filesystem::path& dir,
                                                      CompileCacheDataPlane* plane) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir.string() + ": " + ec.message());
  uint64_t total = 0;  // the files' sizes, validated (not the bundle's "total_size")
  for (const Json& f : bundle["files"]) total += f["size"].get<uint64_t>();
  const std::filesystem::space_info space = std::filesystem::space(dir, ec);
  if (!ec && space.available < total) {
    return Status::ResourceExhausted("the cache needs " + HumanBytes(total) + " and " +
                                     dir.string() + "'s disk has " + HumanBytes(space.available) +
                                     " free");
  }
  if (!HasCompileCacheContent(bundle)) return InstallCompileCache(bundle, dir);
  if (plane == nullptr) {
    return Status::FailedPrecondition(
        "the bundle's " + HumanBytes(total) +
        " of files travel on the weights data plane, which this caller has not");
  }
  const Json& content = bundle["content"];
  Result<std::filesystem::path> pulled =
      plane->Fetch(content["model"].get<std::string>(), content["root_digest"].get<std::string>());
  if (!pulled.ok()) return pulled.status();
  return InstallCompileCache(bundle, dir, *pulled);
}

}  // namespace seedd
