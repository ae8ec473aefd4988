#include "origins/oci_push.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/crypto.h"
#include "common/unique_fd.h"
#include "kinds/weights/files/manifest.h"
#include "origins/oci.h"
#include "seedd/json.h"

namespace seedd {
namespace {

constexpr std::string_view kManifestType = "application/vnd.oci.image.manifest.v1+json";
constexpr size_t kMaxFiles = 200000;

// Sends one blob unless the repository holds it; true when sent.
Result<bool> PutBlob(RegistrySession& session, const std::string& digest,
                     const std::filesystem::path& file, const std::string& body,
                     const std::string& what) {
  HttpRequest head;
  head.method = "HEAD";
  Result<HttpResponse> r = session.Send(session.Base() + "/blobs/" + digest, head);
  if (!r.ok()) return r.status();
  if (r->status == 200) return false;
  HttpRequest start;
  start.method = "POST";
  r = session.Send(session.Base() + "/blobs/uploads/", start);
  if (!r.ok()) return r.status();
  if (r->status != 202 || r->headers["location"].empty()) {
    return session.ErrorFor("start the upload of " + what, *r);
  }
  std::string url = ResolveUrl(session.Base(), r->headers["location"]);
  url += (url.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + digest;
  HttpRequest put;
  put.method = "PUT";
  put.headers.push_back("Content-Type: application/octet-stream");
  put.upload_file = file;
  put.upload_body = body;
  r = session.Send(url, put);
  if (!r.ok()) return r.status();
  if (r->status != 201) return session.ErrorFor("upload " + what, *r);
  return true;
}

}  // namespace

Result<std::string> FileSha256Hex(const std::filesystem::path& file, uint64_t offset,
                                  uint64_t length) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return Status::NotFound("cannot read " + file.string() + ": " + std::strerror(errno));
  }
  Sha256 sha;
  std::vector<char> buf(1 << 20);
  while (length > 0) {
    const ssize_t n = ::pread(fd.get(), buf.data(), std::min<uint64_t>(buf.size(), length),
                              static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError("read " + file.string() + ": " + std::strerror(errno));
    if (n == 0) {
      if (length == UINT64_MAX) break;  // its end
      return Status::IoError("read " + file.string() + ": it ends before byte " +
                             std::to_string(offset + length));
    }
    sha.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
    offset += static_cast<uint64_t>(n);
    if (length != UINT64_MAX) length -= static_cast<uint64_t>(n);
  }
  return sha.HexDigest();
}

Result<std::vector<PushFile>> FilesToPush(const std::filesystem::path& dir, uint64_t max_size) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir.string() + " is not a directory");
  }
  std::vector<PushFile> layers;
  auto it = std::filesystem::recursive_directory_iterator(
      dir, std::filesystem::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(".seedd", 0) == 0) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    PushFile l;
    l.file = it->path();
    l.path = std::filesystem::relative(it->path(), dir, ec).generic_string();
    if (Status st = ValidateRelativePath(l.path); !st.ok()) return st.WithContext(l.path);
    l.size = std::filesystem::file_size(it->path(), ec);
    if (ec) return Status::IoError(it->path().string() + ": " + ec.message());
    if (l.size > max_size) {
      return Status::InvalidArgument(l.path + ": " + std::to_string(l.size) + " bytes, over the " +
                                     std::to_string(max_size) + " this upstream takes in one file");
    }
    layers.push_back(std::move(l));
    if (layers.size() > kMaxFiles) {
      return Status::ResourceExhausted(dir.string() + ": more than " + std::to_string(kMaxFiles) +
                                       " files");
    }
  }
  if (ec) return Status::IoError(dir.string() + ": " + ec.message());
  if (layers.empty()) return Status::NotFound(dir.string() + " holds no file");
  std::sort(layers.begin(), layers.end(),
            [](const PushFile& a, const PushFile& b) { return a.path < b.path; });
  for (PushFile& l : layers) {
    Result<std::string> digest = FileSha256Hex(l.file);
    if (!digest.ok()) return digest.status();
    l.digest = "sha256:" + *digest;
  }
  return layers;
}

Result<OriginPush> PushModelPackDir(std::string_view url, const std::filesystem::path& dir,
                                    const OriginAccess& access,
                                    const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  Result<OciReference> ref = ParseOciReference(url);
  if (!ref.ok()) return ref.status();
  if (!ref->digest.empty()) {
    return Status::InvalidArgument(std::string(url) +
                                   ": push to a tag (oci://REGISTRY/REPOSITORY:TAG); the digest "
                                   "is what the push returns");
  }
  Result<std::vector<PushFile>> files = FilesToPush(dir);
  if (!files.ok()) return files.status();
  const std::vector<PushFile>& layers = *files;
  uint64_t total = 0;
  for (const PushFile& l : layers) total += l.size;
  Result<std::unique_ptr<RegistrySession>> session = OpenRegistrySession(*ref, access);
  if (!session.ok()) return session.status();
  OriginPush push;
  push.url = ref->ToString();
  push.files = layers.size();
  push.total_bytes = total;
  uint64_t done = 0;
  Json json_layers = Json::array();
  Json diff_ids = Json::array();
  for (const PushFile& l : layers) {
    Result<bool> sent = PutBlob(**session, l.digest, l.file, "", l.path);
    if (!sent.ok()) return sent.status().WithContext(push.url);
    if (*sent) push.bytes_sent += l.size;
    done += l.size;
    if (progress) progress(done, total);
    json_layers.push_back({{"mediaType", "application/vnd.cncf.model.weight.v1.raw"},
                           {"digest", l.digest},
                           {"size", l.size},
                           {"annotations", {{"org.cncf.model.filepath", l.path}}}});
    diff_ids.push_back(l.digest);
  }
  const std::string config = Json{{"descriptor", {{"name", ref->repository}}},
                                  {"config", Json::object()},
                                  {"modelfs", {{"type", "layers"}, {"diffIds", diff_ids}}}}
                                 .dump();
  const std::string config_digest = "sha256:" + Sha256Hex(config);
  Result<bool> sent = PutBlob(**session, config_digest, {}, config, "the config");
  if (!sent.ok()) return sent.status().WithContext(push.url);
  const std::string manifest = Json{
      {"schemaVersion", 2},
      {"mediaType", kManifestType},
      {"artifactType", "application/vnd.cncf.model.manifest.v1+json"},
      {"config",
       {{"mediaType", "application/vnd.cncf.model.config.v1+json"},
        {"digest", config_digest},
        {"size", config.size()}}},
      {"layers", json_layers}}.dump();
  HttpRequest put;
  put.method = "PUT";
  put.headers.push_back("Content-Type: " + std::string(kManifestType));
  put.upload_body = manifest;
  Result<HttpResponse> r = (*session)->Send((*session)->Base() + "/manifests/" + ref->tag, put);
  if (!r.ok()) return r.status().WithContext(push.url);
  if (r->status != 201) return (*session)->ErrorFor("put the manifest of " + push.url, *r);
  push.manifest = "sha256:" + Sha256Hex(manifest);
  const std::string echoed = r->headers["docker-content-digest"];
  if (!echoed.empty() && echoed != push.manifest) {
    return Status::DataLoss(push.url + ": the registry stored the manifest as " + echoed +
                            ", not " + push.manifest);
  }
  push.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return push;
}

}  // namespace seedd
