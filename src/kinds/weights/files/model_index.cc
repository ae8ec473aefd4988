#include "kinds/weights/files/model_index.h"

#include <cstdlib>
#include <fstream>

#include "common/crypto.h"

namespace seedd {
namespace {

std::filesystem::path EnvPath(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::filesystem::path(v) : std::filesystem::path();
}

// True when `p` (canonical) is `root` (canonical) or below it.
bool Inside(const std::filesystem::path& p, const std::filesystem::path& root) {
  auto r = root.begin();
  auto i = p.begin();
  for (; r != root.end(); ++r, ++i) {
    if (i == p.end() || *i != *r) return false;
  }
  return true;
}

// The repository of a hub cache snapshot (…/models--ORG--NAME/snapshots/REV), else `dir`.
std::filesystem::path RepositoryRoot(const std::filesystem::path& dir) {
  const std::filesystem::path snapshots = dir.parent_path();
  const std::filesystem::path repo = snapshots.parent_path();
  if (snapshots.filename() == "snapshots" && repo.filename().string().rfind("models--", 0) == 0) {
    return repo;
  }
  return dir;
}

// An organisation or a repository name on the hub: what a model name may hold.
bool IsRepoPart(std::string_view s) { return IsModelName(s); }

std::string Listing(const std::filesystem::path& dir) {
  std::string names;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    names += (names.empty() ? "" : ", ") + it->path().filename().string();
  }
  return names.empty() ? "none" : names;
}

}  // namespace

std::filesystem::path HubCacheDir() {
  if (auto p = EnvPath("HF_HUB_CACHE"); !p.empty()) return p;
  if (auto p = EnvPath("HUGGINGFACE_HUB_CACHE"); !p.empty()) return p;
  if (auto p = EnvPath("HF_HOME"); !p.empty()) return p / "hub";
  if (auto p = EnvPath("XDG_CACHE_HOME"); !p.empty()) return p / "huggingface" / "hub";
  return EnvPath("HOME") / ".cache" / "huggingface" / "hub";
}

Result<std::filesystem::path> ResolveModelDir(std::string_view spec) {
  if (spec.rfind("hf:", 0) != 0) return std::filesystem::path(spec);
  std::string_view rest = spec.substr(3);
  std::string revision = "main";
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    revision = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
  }
  const std::string repo(rest);
  const size_t slash = repo.find('/');
  const bool valid = slash == std::string::npos
                         ? IsRepoPart(repo)
                         : IsRepoPart(std::string_view(repo).substr(0, slash)) &&
                               IsRepoPart(std::string_view(repo).substr(slash + 1));
  if (!valid) {
    return Status::InvalidArgument("'" + std::string(spec) +
                                   "' is not hf:ORG/NAME[@REVISION] (letters, digits, '_', '.', "
                                   "'-' in ORG and NAME)");
  }
  if (revision.empty() || !ValidateRelativePath(revision).ok()) {
    return Status::InvalidArgument("invalid revision '" + revision + "' in '" + std::string(spec) +
                                   "'");
  }
  std::string folder = "models--" + repo;
  if (slash != std::string::npos) folder.replace(8 + slash, 1, "--");
  const std::filesystem::path hub = HubCacheDir();
  const std::filesystem::path repo_dir = hub / folder;
  std::error_code ec;
  if (!std::filesystem::is_directory(repo_dir, ec)) {
    return Status::NotFound("model " + repo + " is not in the Hugging Face cache " + hub.string() +
                            " (no " + folder +
                            "); download it there first, or set HF_HUB_CACHE or HF_HOME");
  }
  std::string commit = revision;
  if (std::ifstream ref(repo_dir / "refs" / revision); ref) {
    std::getline(ref, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) {
      commit.pop_back();
    }
    if (commit.empty() || !ValidateRelativePath(commit).ok() ||
        commit.find('/') != std::string::npos) {
      return Status::InvalidArgument((repo_dir / "refs" / revision).string() +
                                     " does not hold a commit");
    }
  }
  const std::filesystem::path snapshot = repo_dir / "snapshots" / commit;
  if (!std::filesystem::is_directory(snapshot, ec)) {
    return Status::NotFound("no snapshot of " + repo + " at revision '" + revision + "' in " +
                            repo_dir.string() + " (refs: " + Listing(repo_dir / "refs") +
                            "; snapshots: " + Listing(repo_dir / "snapshots") + ")");
  }
  return snapshot;
}

Result<IndexedModel> IndexModel(const std::string& model, const std::filesystem::path& dir,
                                const BuildOptions& given, BuildStats* stats) {
  if (!IsModelName(model)) return Status::InvalidArgument("invalid model name '" + model + "'");
  BuildOptions options = given;
  if (options.chunk_size != 0 &&
      (options.chunk_size < kMinChunkBytes || options.chunk_size > kMaxChunkBytes)) {
    return Status::InvalidArgument("chunk size must be 4 KiB to 1 GiB");
  }
  std::error_code ec;
  const std::filesystem::path top = std::filesystem::canonical(dir, ec);
  if (ec || !std::filesystem::is_directory(top)) {
    return Status::NotFound(dir.string() + " is not a directory");
  }
  IndexedModel index;
  index.root = RepositoryRoot(top);
  // Manifest path → where its bytes are (canonical), sorted by manifest path.
  std::map<std::string, std::filesystem::path> found;
  for (auto it = std::filesystem::recursive_directory_iterator(top, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(top).generic_string();
    if (IsReservedPath(rel)) continue;  // seedd's own (a journal, a record)
    if (options.include && !options.include(rel)) continue;
    std::filesystem::path target = it->path();
    if (it->is_symlink(ec)) {
      target = std::filesystem::canonical(it->path(), ec);
      if (ec) return Status::NotFound(it->path().string() + " is a broken link");
      if (!Inside(target, index.root)) {
        return Status::InvalidArgument(it->path().string() + " links to " + target.string() +
                                       ", outside the model's root " + index.root.string());
      }
      if (!std::filesystem::is_regular_file(target, ec)) {
        return Status::InvalidArgument(it->path().string() +
                                       " links to something that is not a regular file");
      }
    } else if (!it->is_regular_file(ec)) {
      continue;
    }
    SEEDD_RETURN_IF_ERROR(ValidateRelativePath(rel));
    found.emplace(rel, target);
    if (found.size() > kMaxManifestFiles) {
      return Status::ResourceExhausted("more than " + std::to_string(kMaxManifestFiles) +
                                       " files in " + dir.string());
    }
  }
  if (ec) return Status::IoError("walk " + top.string() + ": " + ec.message());
  if (found.empty()) {
    return Status::InvalidArgument(dir.string() + " holds no files: there is no model to serve");
  }
  if (options.chunk_size == 0) {
    uint64_t total = 0;
    for (const auto& [rel, abs] : found) {
      const uintmax_t size = std::filesystem::file_size(abs, ec);
      if (ec) return Status::IoError("stat " + abs.string() + ": " + ec.message());
      total += size;
    }
    options.chunk_size = AutoChunkBytes(total);
  }
  Manifest& m = index.manifest;
  m.model = model;
  m.chunk_size = options.chunk_size;
  m.chunk_digest = options.chunk_digest;
  m.sources = options.sources;
  std::string fingerprint_input;
  for (const auto& [rel, abs] : found) {
    Result<FileDigests> d = DigestFile(abs, options, stats);
    if (!d.ok()) return d.status().WithContext(rel);
    std::string identity = d->sha256;  // what the fingerprint covers besides path and size
    if (std::filesystem::path(rel).extension() == ".safetensors") {
      Result<SafetensorsHeader> h = ReadSafetensorsHeader(abs.string());
      if (!h.ok()) return h.status().WithContext(rel);
      identity = h->header_json;
      for (auto& t : h->tensors) m.tensors.push_back({rel, std::move(t)});
    }
    for (size_t i = 0; i < d->chunks.size(); ++i) {
      const uint64_t off = i * options.chunk_size;
      m.chunks.push_back({rel, off, std::min(options.chunk_size, d->size - off), d->chunks[i]});
    }
    m.files.push_back({rel, d->size, d->sha256});
    m.total_size += d->size;
    fingerprint_input += rel + '\0' + std::to_string(d->size) + '\0' + identity + '\n';
    index.files[rel] = {abs.lexically_relative(index.root).generic_string(), d->size, d->mtime_ns};
  }
  m.fingerprint = Sha256Hex(fingerprint_input);
  m.root_digest = ManifestRootDigest(m.ToJson());
  if (options.sign_key != nullptr) {
    m.signatures.push_back(options.sign_key->Sign(kManifestPurpose, m.root_digest));
  }
  return index;
}

Result<Manifest> BuildManifest(const std::string& model, const std::filesystem::path& dir,
                               const BuildOptions& options, BuildStats* stats) {
  Result<IndexedModel> index = IndexModel(model, dir, options, stats);
  if (!index.ok()) return index.status();
  return std::move(index->manifest);
}

ServedModel ServeIndexed(IndexedModel index) {
  ServedModel served;
  served.manifest = std::move(index.manifest);
  served.dir = std::move(index.root);
  served.files = std::move(index.files);
  return served;
}

}  // namespace seedd
