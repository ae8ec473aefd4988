#include "origins/oci.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/mutex.h"
#include "kinds/weights/files/manifest.h"
#include "origins/http_client.h"

namespace seedd {
namespace {

constexpr size_t kMaxManifestBytes = 4 << 20;
constexpr size_t kMaxLayers = 200000;
constexpr std::string_view kModelPackConfig = "application/vnd.cncf.model.config.v1+json";
constexpr std::string_view kAccept =
    "Accept: application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One path component of a repository: [a-z0-9]+((.|_|__|-+)[a-z0-9]+)*
bool ValidRepositoryComponent(std::string_view s) {
  if (s.empty() || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (IsLowerAlnum(c)) continue;
    if (c != '.' && c != '_' && c != '-') return false;
    // Separators: one '.', one or two '_', any number of '-'.
    size_t j = i;
    while (j < s.size() && !IsLowerAlnum(s[j])) ++j;
    std::string_view sep = s.substr(i, j - i);
    const bool ok = sep == "." || sep == "_" || sep == "__" ||
                    sep.find_first_not_of('-') == std::string_view::npos;
    if (!ok) return false;
    i = j - 1;
  }
  return true;
}

bool ValidTag(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (!word(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
}

bool ValidRegistry(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  std::string_view host = s;
  std::string_view port;
  if (s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return false;
      port = s.substr(close + 2);
    }
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != host.npos) {
      return false;
    }
  } else {
    const size_t colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
    }
    if (host.empty() ||
        host.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != host.npos) {
      return false;
    }
  }
  if (s.find(':') != std::string_view::npos && s.front() != '[' && port.empty()) return false;
  if (!port.empty() && (port.size() > 5 || port.find_first_not_of("0123456789") != port.npos ||
                        std::stoul(std::string(port)) > 65535)) {
    return false;
  }
  return true;
}

// Docker's rule: a registry on the loopback speaks HTTP unless told otherwise.
bool IsLoopback(std::string_view registry) {
  std::string_view host = registry.substr(0, registry.rfind(':'));
  if (registry.front() == '[') host = registry.substr(1, registry.find(']') - 1);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool ValidSha256Digest(std::string_view d) {
  return d.size() == 71 && d.substr(0, 7) == "sha256:" && IsLowerHex(d.substr(7), 64);
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

namespace {

class OciOrigin final : public Origin {
 public:
  explicit OciOrigin(std::unique_ptr<RegistrySession> session)
      : session_(std::move(session)), ref_(session_->ref()) {}

  std::string Url() const override { return ref_.ToString(); }

  Result<OriginModel> Resolve() override {
    const std::string reference = ref_.digest.empty() ? ref_.tag : ref_.digest;
    const std::string url = session_->Base() + "/manifests/" + reference;
    HttpRequest req;
    req.headers.push_back(std::string(kAccept));
    req.max_body = kMaxManifestBytes;
    Result<HttpResponse> r = session_->Send(url, req);
    if (!r.ok()) return r.status();
    if (r->status != 200) return session_->ErrorFor("the manifest of " + ref_.ToString(), *r);
    const std::string digest = "sha256:" + Sha256Hex(r->body);
    if (!ref_.digest.empty() && digest != ref_.digest) {
      return Status::DataLoss(ref_.ToString() + ": the registry sent a manifest whose digest is " +
                              digest + ", not the pinned one");
    }
    Json manifest = Json::parse(r->body, nullptr, false);
    if (manifest.is_discarded() || !manifest.is_object()) {
      return Status::InvalidArgument(ref_.ToString() + ": the manifest is not JSON");
    }
    const std::string media = manifest.value("mediaType", std::string());
    if (media.find("index") != std::string::npos || media.find("list") != std::string::npos ||
        manifest.contains("manifests")) {
      return Status::InvalidArgument(ref_.ToString() +
                                     ": an image index, not a model artifact: name one of its "
                                     "manifests by digest");
    }
    Result<std::vector<OriginFile>> files = OciManifestFiles(manifest);
    if (!files.ok()) return files.status().WithContext(ref_.ToString());
    OriginModel model;
    model.url = ref_.ToString();
    model.version = digest;
    model.files = std::move(*files);
    for (const OriginFile& f : model.files) model.total_size += f.size;
    return model;
  }

  Result<std::string> Fetch(const OriginFile& file,
                            const std::function<Status(std::string_view)>& sink) override {
    const std::string url = session_->Base() + "/blobs/" + file.digest;
    HttpRequest req;
    req.sink = sink;
    Result<HttpResponse> r = session_->Send(url, req);
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 200) return session_->ErrorFor(file.path + " (" + file.digest + ")", *r);
    return file.digest;
  }

  Result<std::string> FetchRange(const OriginFile& file, uint64_t offset, uint64_t length,
                                 const std::function<Status(std::string_view)>& sink) override {
    if (length == 0) return file.digest;
    const std::string url = session_->Base() + "/blobs/" + file.digest;
    HttpRequest req;
    req.sink = sink;
    req.range = std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    Result<HttpResponse> r = session_->Send(url, req);
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 206) return session_->ErrorFor(file.path + " (" + file.digest + ")", *r);
    return file.digest;
  }

 private:
  const std::unique_ptr<RegistrySession> session_;
  const OciReference& ref_;
};

}  // namespace

std::string OciReference::ToString() const {
  return "oci://" + registry + "/" + repository + (digest.empty() ? ":" + tag : "@" + digest);
}

Result<OciReference> ParseOciReference(std::string_view url) {
  const std::string given(url);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(given + ": " + why +
                                   " (oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST])");
  };
  if (url.rfind("oci://", 0) != 0) return bad("not an oci:// URL");
  url.remove_prefix(6);
  OciReference ref;
  std::optional<bool> plain;
  if (const size_t q = url.find('?'); q != std::string_view::npos) {
    std::string_view query = url.substr(q + 1);
    url = url.substr(0, q);
    while (!query.empty()) {
      const size_t amp = query.find('&');
      std::string_view kv = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (kv == "plain-http=true") {
        plain = true;
      } else if (kv == "plain-http=false") {
        plain = false;
      } else {
        return bad("unknown parameter '" + std::string(kv) + "' (plain-http=true|false)");
      }
    }
  }
  const size_t slash = url.find('/');
  if (slash == std::string_view::npos) return bad("no repository");
  ref.registry = std::string(url.substr(0, slash));
  if (!ValidRegistry(ref.registry)) return bad("'" + ref.registry + "' is not a registry host");
  std::string_view rest = url.substr(slash + 1);
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    ref.digest = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
    if (!ValidSha256Digest(ref.digest)) return bad("'" + ref.digest + "' is not sha256:<64 hex>");
  } else {
    const size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos && rest.find('/', colon) == std::string_view::npos) {
      ref.tag = std::string(rest.substr(colon + 1));
      rest = rest.substr(0, colon);
      if (!ValidTag(ref.tag)) return bad("'" + ref.tag + "' is not a tag");
    } else {
      ref.tag = "latest";
    }
  }
  if (rest.empty() || rest.size() > 255) return bad("no repository");
  for (size_t b = 0; b <= rest.size();) {
    size_t e = rest.find('/', b);
    if (e == std::string_view::npos) e = rest.size();
    if (!ValidRepositoryComponent(rest.substr(b, e - b))) {
      return bad("'" + std::string(rest) + "' is not a repository (lowercase names)");
    }
    b = e + 1;
  }
  ref.repository = std::string(rest);
  ref.plain_http = plain.value_or(IsLoopback(ref.registry));
  return ref;
}

std::optional<AuthChallenge> ParseAuthChallenge(std::string_view header) {
  std::string_view h = header;
  const size_t sp = h.find(' ');
  if (h.empty() || sp == std::string_view::npos || sp == 0) return std::nullopt;
  AuthChallenge c;
  c.scheme = std::string(h.substr(0, sp));
  std::transform(c.scheme.begin(), c.scheme.end(), c.scheme.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  h.remove_prefix(sp + 1);
  while (!h.empty()) {
    const size_t eq = h.find('=');
    if (eq == std::string_view::npos) break;
    std::string key = Trim(h.substr(0, eq));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    h.remove_prefix(eq + 1);
    std::string value;
    if (!h.empty() && h.front() == '"') {
      size_t i = 1;
      for (; i < h.size() && h[i] != '"'; ++i) {
        if (h[i] == '\\' && i + 1 < h.size()) ++i;
        value += h[i];
      }
      if (i >= h.size()) return std::nullopt;  // unterminated
      h.remove_prefix(i + 1);
    } else {
      const size_t comma = h.find(',');
      value = Trim(h.substr(0, comma));
      h.remove_prefix(comma == std::string_view::npos ? h.size() : comma);
    }
    if (!key.empty() && c.params.size() < 16) c.params[key] = value;
    const size_t next = h.find_first_not_of(" \t,");
    h.remove_prefix(next == std::string_view::npos ? h.size() : next);
  }
  return c;
}

Result<std::vector<OriginFile>> OciManifestFiles(const Json& manifest) {
  if (!manifest.contains("layers") || !manifest["layers"].is_array()) {
    return Status::InvalidArgument("the manifest lists no layers");
  }
  const Json& layers = manifest["layers"];
  if (layers.empty()) return Status::InvalidArgument("the manifest lists no layers");
  if (layers.size() > kMaxLayers) {
    return Status::InvalidArgument("the manifest lists " + std::to_string(layers.size()) +
                                   " layers, more than " + std::to_string(kMaxLayers));
  }
  bool modelpack = false;
  if (manifest.contains("config") && manifest["config"].is_object()) {
    modelpack = manifest["config"].value("mediaType", std::string()) == kModelPackConfig;
  }
  std::vector<OriginFile> files;
  std::set<std::string> paths;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Json& l = layers[i];
    const std::string name = "layer " + std::to_string(i);
    if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string() ||
        !l.contains("size") || !l["size"].is_number_integer() || l["size"].get<int64_t>() < 0) {
      return Status::InvalidArgument(name + ": no digest or size");
    }
    OriginFile f;
    f.digest = l["digest"].get<std::string>();
    f.size = l["size"].get<uint64_t>();
    if (!ValidSha256Digest(f.digest)) {
      return Status::InvalidArgument(name + ": digest '" + f.digest.substr(0, 80) +
                                     "' is not sha256:<64 hex>");
    }
    const std::string media = l.value("mediaType", std::string());
    if (media.find("tar") != std::string::npos || media.find("gzip") != std::string::npos ||
        media.find("zstd") != std::string::npos) {
      return Status::InvalidArgument(name + " (" + f.digest + ") is an archive (" + media +
                                     "): seedd takes raw file layers (modctl build --raw)");
    }
    std::string path;
    if (l.contains("annotations") && l["annotations"].is_object()) {
      const Json& a = l["annotations"];
      for (const char* key : {"org.cncf.model.filepath", "org.opencontainers.image.title"}) {
        if (path.empty() && a.contains(key) && a[key].is_string()) path = a[key];
      }
    }
    if (path.empty()) {
      return Status::InvalidArgument(
          name + " (" + f.digest + ") names no file path (" +
          (modelpack ? "org.cncf.model.filepath" : "org.opencontainers.image.title") + ")");
    }
    if (Status st = ValidateRelativePath(path); !st.ok()) {
      return Status::InvalidArgument(name + ": path '" + path.substr(0, 200) +
                                     "': " + st.message());
    }
    if (IsReservedPath(path)) {
      return Status::InvalidArgument(name + ": path '" + path +
                                     "' uses a name seedd keeps for itself (.seedd-*)");
    }
    if (!paths.insert(path).second) {
      return Status::InvalidArgument(name + ": path '" + path + "' is named twice");
    }
    f.path = std::move(path);
    files.push_back(std::move(f));
  }
  return files;
}

Result<OriginPtr> OpenOciOrigin(const OciReference& ref, const OriginAccess& access) {
  Result<std::unique_ptr<RegistrySession>> session = OpenRegistrySession(ref, access);
  if (!session.ok()) return session.status();
  return OriginPtr(std::make_unique<OciOrigin>(std::move(*session)));
}

}  // namespace seedd
