#include "origins/s3_origin.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

#include "common/crypto.h"
#include "kinds/weights/files/manifest.h"
#include "origins/http_client.h"
#include "origins/oci_push.h"
#include "stores/s3/s3_location.h"
#include "stores/s3/s3_xml.h"
#include "stores/s3/sigv4.h"

namespace seedd {
namespace {

constexpr size_t kMaxObjects = 200000;
constexpr int kMaxPages = 1000;

bool IsLowerHexText(std::string_view s) { return IsLowerHex(s, s.size()); }

class S3Origin final : public Origin {
 public:
  struct Config {
    std::string url;
    std::string bucket;
    std::string prefix;  // "" or "dir/" (with its trailing slash)
    std::string region = "us-east-1";
    std::string endpoint;  // scheme://host[:port]
    std::string host;      // Host header
    bool path_style = true;
  };
  S3Origin(Config config, AwsCredentials creds, OriginAccess access)
      : config_(std::move(config)), creds_(std::move(creds)), access_(std::move(access)) {}

  std::string Url() const override { return config_.url; }

  Result<OriginModel> Resolve() override {
    OriginModel model;
    model.url = config_.url;
    std::map<std::string, std::string> query = {{"list-type", "2"}, {"prefix", config_.prefix}};
    std::set<std::string> paths;
    Sha256 listing;
    for (int page = 0;; ++page) {
      if (page >= kMaxPages || model.files.size() > kMaxObjects) {
        return Status::ResourceExhausted(config_.url + ": more than " +
                                         std::to_string(kMaxObjects) + " objects");
      }
      Result<HttpResponse> r = Get(BucketPath(), query, {}, nullptr);
      if (!r.ok()) return r.status();
      if (r->status != 200) return ErrorFor("list", *r);
      // Each <Contents> entry: its key, size and ETag.
      const std::string& xml = r->body;
      for (size_t p = xml.find("<Contents>"); p != std::string::npos;
           p = xml.find("<Contents>", p + 1)) {
        const size_t e = xml.find("</Contents>", p);
        if (e == std::string::npos) break;
        const std::string entry = xml.substr(p, e - p);
        const std::string key = XmlFirst(entry, "Key");
        const std::string size = XmlFirst(entry, "Size");
        std::string etag = XmlFirst(entry, "ETag");
        etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
        if (key.size() <= config_.prefix.size() || key.back() == '/') continue;  // a "folder"
        OriginFile f;
        f.path = key.substr(config_.prefix.size());
        if (IsReservedPath(f.path)) {
          return Status::InvalidArgument(config_.url + ": object '" + key +
                                         "' uses a name seedd keeps for itself (.seedd-*)");
        }
        if (Status st = ValidateRelativePath(f.path); !st.ok()) {
          return Status::InvalidArgument(config_.url + ": object '" + key.substr(0, 200) +
                                         "': " + st.message());
        }
        char* end = nullptr;
        f.size = std::strtoull(size.c_str(), &end, 10);
        if (size.empty() || *end != '\0') {
          return Status::InvalidArgument(config_.url + ": object '" + key + "' has no size");
        }
        std::transform(etag.begin(), etag.end(), etag.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (etag.size() == 32 && IsLowerHexText(etag)) f.digest = "md5:" + etag;
        if (!paths.insert(f.path).second) continue;
        listing.Update(key + "\n" + size + "\n" + etag + "\n");
        model.total_size += f.size;
        model.files.push_back(std::move(f));
      }
      const std::string next = XmlFirst(xml, "NextContinuationToken");
      if (XmlFirst(xml, "IsTruncated") != "true" || next.empty()) break;
      query["continuation-token"] = next;
    }
    if (model.files.empty()) {
      return Status::NotFound(config_.url + ": no object below the prefix '" + config_.prefix +
                              "'");
    }
    model.version = "sha256:" + listing.HexDigest();
    return model;
  }

  Result<std::string> Fetch(const OriginFile& file,
                            const std::function<Status(std::string_view)>& sink) override {
    Result<HttpResponse> r = Get(ObjectPath(config_.prefix + file.path), {},
                                 {{"x-amz-checksum-mode", "ENABLED"}}, &sink);
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 200) return ErrorFor("get " + file.path, *r);
    // A checksum stored with the object is the stronger digest; an ETag is an
    // MD5 only for objects not encrypted with KMS or a customer key.
    auto checksum = r->headers.find("x-amz-checksum-sha256");
    if (checksum != r->headers.end()) {
      std::optional<std::string> raw = Base64Decode(checksum->second);
      if (raw && raw->size() == 32) return "sha256:" + HexEncode(*raw);
    }
    auto sse = r->headers.find("x-amz-server-side-encryption");
    if (sse != r->headers.end() && sse->second != "AES256") return std::string();
    if (r->headers.count("x-amz-server-side-encryption-customer-algorithm") != 0) {
      return std::string();
    }
    return file.digest;
  }

  // Only for objects whose digest the listing gave (a single-part object's MD5
  // ETag): a multipart object's checksum comes with a whole GET alone.
  Result<std::string> FetchRange(const OriginFile& file, uint64_t offset, uint64_t length,
                                 const std::function<Status(std::string_view)>& sink) override {
    if (file.digest.empty()) {
      return Status::FailedPrecondition(file.path + ": no digest before a whole GET");
    }
    if (length == 0) return file.digest;
    Result<HttpResponse> r =
        Get(ObjectPath(config_.prefix + file.path), {}, {}, &sink,
            std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 206) return ErrorFor("get " + file.path, *r);
    return file.digest;
  }

  // PUTs `file` as the object of its path below the prefix.
  Status Put(const PushFile& file) {
    std::string raw;
    const std::string hex = file.digest.substr(file.digest.find(':') + 1);
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    const std::string path = ObjectPath(config_.prefix + file.path);
    SignedRequest signed_req{
        "PUT", config_.host, path, {}, {{"x-amz-checksum-sha256", Base64Encode(raw)}}, hex};
    HttpRequest req;
    req.method = "PUT";
    req.url = config_.endpoint + path;
    for (const auto& [k, v] : SignV4(signed_req, creds_, config_.region, std::time(nullptr))) {
      req.headers.push_back(k + ": " + v);
    }
    req.upload_file = file.file;
    req.ca_file = access_.ca_file;
    req.stall_timeout = access_.stall_timeout;
    Result<HttpResponse> r = HttpSend(req);
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 200) return ErrorFor("put " + file.path, *r);
    return Status::Ok();
  }

 private:
  std::string BucketPath() const { return config_.path_style ? "/" + config_.bucket : "/"; }
  std::string ObjectPath(const std::string& key) const {
    const std::string object = AwsUriEncode(key, /*keep_slash=*/true);
    return config_.path_style ? "/" + config_.bucket + "/" + object : "/" + object;
  }

  Result<HttpResponse> Get(const std::string& path, const std::map<std::string, std::string>& query,
                           const std::map<std::string, std::string>& extra,
                           const std::function<Status(std::string_view)>* sink,
                           const std::string& range = "") {
    SignedRequest signed_req{"GET", config_.host, path, query, extra, Sha256Hex("")};
    HttpRequest req;
    req.url = config_.endpoint + path;
    const std::string q = CanonicalQuery(query);
    if (!q.empty()) req.url += "?" + q;
    for (const auto& [k, v] : SignV4(signed_req, creds_, config_.region, std::time(nullptr))) {
      req.headers.push_back(k + ": " + v);
    }
    req.ca_file = access_.ca_file;
    req.stall_timeout = access_.stall_timeout;
    req.max_body = 64 << 20;  // a listing page is about 1,000 keys
    if (sink != nullptr) req.sink = *sink;
    req.range = range;  // unsigned: SigV4 does not need it signed
    return HttpSend(req);
  }

  Status ErrorFor(const std::string& what, const HttpResponse& r) const {
    const std::string code = XmlFirst(r.body, "Code");
    const std::string message = XmlFirst(r.body, "Message");
    const std::string text = config_.url + ": " + what + ": GET " + r.url + ": HTTP " +
                             std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                             (message.empty() ? "" : ": " + message);
    if (r.status == 404) return Status::NotFound(text);
    if (r.status == 403 || r.status == 401) return Status::PermissionDenied(text);
    if (r.status >= 500) return Status::Unavailable(text);
    return Status::InvalidArgument(text);
  }

  const Config config_;
  const AwsCredentials creds_;
  const OriginAccess access_;
};

}  // namespace

namespace {

Result<std::unique_ptr<S3Origin>> OpenS3(std::string_view url, const OriginAccess& access) {
  std::map<std::string, std::string> extra;
  Result<S3Location> loc = ParseS3Location(url, &extra);
  if (!loc.ok()) return loc.status().WithContext(std::string(url));
  if (!extra.empty()) {
    return Status::InvalidArgument(std::string(url) + ": unknown parameter '" +
                                   extra.begin()->first + "' (endpoint, region)");
  }
  S3Origin::Config config;
  config.url = std::string(url);
  config.bucket = loc->bucket;
  config.prefix = loc->prefix.empty() ? "" : loc->prefix + "/";
  config.region = loc->region;
  config.endpoint = loc->endpoint;
  config.host = loc->host;
  config.path_style = loc->path_style;
  Result<AwsCredentials> creds = LoadAwsCredentials();
  if (!creds.ok()) return creds.status().WithContext(std::string(url));
  return std::make_unique<S3Origin>(std::move(config), std::move(*creds), access);
}

}  // namespace

Result<OriginPtr> OpenS3Origin(std::string_view url, const OriginAccess& access) {
  Result<std::unique_ptr<S3Origin>> s3 = OpenS3(url, access);
  if (!s3.ok()) return s3.status();
  return OriginPtr(std::move(*s3));
}

Result<OriginPush> PushS3Dir(std::string_view url, const std::filesystem::path& dir,
                             const OriginAccess& access,
                             const std::function<void(uint64_t, uint64_t)>& progress) {
  constexpr uint64_t kMaxPut = uint64_t{5} << 30;
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<S3Origin>> s3 = OpenS3(url, access);
  if (!s3.ok()) return s3.status();
  Result<std::vector<PushFile>> files = FilesToPush(dir, kMaxPut);
  if (!files.ok()) {
    if (files.status().code() != StatusCode::kInvalidArgument) return files.status();
    return Status::InvalidArgument(files.status().message() +
                                   " (5 GiB, one S3 PUT: multipart uploads are not supported); "
                                   "nothing was sent");
  }
  OriginPush push;
  push.url = std::string(url);
  push.files = files->size();
  for (const PushFile& f : *files) push.total_bytes += f.size;
  for (const PushFile& f : *files) {
    SEEDD_RETURN_IF_ERROR((*s3)->Put(f).WithContext(push.url));
    push.bytes_sent += f.size;
    if (progress) progress(push.bytes_sent, push.total_bytes);
  }
  Result<OriginModel> listed = (*s3)->Resolve();
  if (!listed.ok()) return listed.status().WithContext("reading back " + push.url);
  push.manifest = listed->version;
  push.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return push;
}

}  // namespace seedd
