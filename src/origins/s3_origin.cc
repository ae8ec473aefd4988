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

// The bytes lowercase hex `hex` spells.
std::string HexToBytes(std::string_view hex) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string raw;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    raw += static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1]));
  }
  return raw;
}

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
        if (f.digest.empty()) {
          // Not an MD5 (a multipart object): the object's own headers may
          // carry its SHA-256.
          Result<std::string> digest = HeadDigest(key);
          if (!digest.ok()) return digest.status();
          f.digest = *digest;
        }
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
    if (std::string sha256 = Sha256Of(*r); !sha256.empty()) return sha256;
    auto sse = r->headers.find("x-amz-server-side-encryption");
    if (sse != r->headers.end() && sse->second != "AES256") return std::string();
    if (r->headers.count("x-amz-server-side-encryption-customer-algorithm") != 0) {
      return std::string();
    }
    return file.digest;
  }

  // Only for objects whose digest the listing (or a HEAD) gave: a multipart
  // object without a SHA-256 of its own has one with a whole GET alone.
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

  // Uploads `file` as the object of its path below the prefix: one PUT, or a
  // multipart upload of `part` bytes per part when it is larger than that.
  Status Upload(const PushFile& file, uint64_t part, const std::function<void(uint64_t)>& sent) {
    if (file.size <= part) {
      SEEDD_RETURN_IF_ERROR(Put(file));
      if (sent) sent(file.size);
      return Status::Ok();
    }
    return PutInParts(file, part, sent);
  }

  // PUTs `file` as the object of its path below the prefix.
  Status Put(const PushFile& file) {
    const std::string hex = file.digest.substr(file.digest.find(':') + 1);
    const std::string raw = HexToBytes(hex);
    HttpRequest body;
    body.upload_file = file.file;
    Result<HttpResponse> r = Send("PUT", ObjectPath(config_.prefix + file.path), {},
                                  {{"x-amz-checksum-sha256", Base64Encode(raw)}}, "", &body, hex);
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 200) return ErrorFor("put " + file.path, *r, "PUT");
    return Status::Ok();
  }

  // A multipart upload of `file` in parts of `part` bytes, each PUT with its own
  // x-amz-checksum-sha256 (S3 checks it); the whole file's SHA-256 goes with
  // the object as x-amz-meta-sha256, which Resolve reads back (a multipart
  // object's ETag is no MD5 of its bytes). An upload that fails is aborted, so
  // no parts are left behind.
  // An upload's id goes into every part's URL and into errors: S3's are a few
  // hundred bytes.
  static constexpr size_t kMaxUploadId = 1024;

  Status PutInParts(const PushFile& file, uint64_t part,
                    const std::function<void(uint64_t)>& sent) {
    const std::string hex = file.digest.substr(file.digest.find(':') + 1);
    const std::string path = ObjectPath(config_.prefix + file.path);
    Result<HttpResponse> r =
        Send("POST", path, {{"uploads", ""}},
             {{"x-amz-meta-sha256", hex}, {"x-amz-checksum-algorithm", "SHA256"}}, "");
    if (!r.ok()) return r.status().WithContext(file.path);
    if (r->status != 200) return ErrorFor("start a multipart upload of " + file.path, *r, "POST");
    const std::string id = XmlFirst(r->body, "UploadId");
    if (id.empty() || id.size() > kMaxUploadId) {
      return Status::Unavailable(config_.url + ": " +
                                 (id.empty() ? std::string("no UploadId")
                                             : "an UploadId of " + std::to_string(id.size()) +
                                                   " bytes (at most " +
                                                   std::to_string(kMaxUploadId) + ")") +
                                 " in the answer to a multipart upload of " + file.path);
    }
    Status st = PutParts(file, path, id, part, sent);
    if (!st.ok()) {
      // The parts are billed until the upload is aborted; one that could not
      // be is named, for its owner to abort it (or for a bucket's lifecycle
      // rule for incomplete uploads to remove it).
      Result<HttpResponse> abort = Send("DELETE", path, {{"uploadId", id}}, {}, "");
      if (!abort.ok() || (abort->status != 204 && abort->status != 200)) {
        return st.WithContext(
            "the multipart upload " + id + " of " + file.path + " was not aborted (" +
            (abort.ok() ? "DELETE answered HTTP " + std::to_string(abort->status)
                        : abort.status().message()) +
            "): its parts stay in the bucket until it is aborted or a lifecycle rule removes "
            "them");
      }
      return st;
    }
    return Status::Ok();
  }

 private:
  Status PutParts(const PushFile& file, const std::string& path, const std::string& id,
                  uint64_t part, const std::function<void(uint64_t)>& sent) {
    std::string complete = "<CompleteMultipartUpload>";
    const uint64_t parts = (file.size + part - 1) / part;
    for (uint64_t n = 1; n <= parts; ++n) {
      const uint64_t offset = (n - 1) * part;
      const uint64_t length = std::min(part, file.size - offset);
      Result<std::string> hex = FileSha256Hex(file.file, offset, length);
      if (!hex.ok()) return hex.status().WithContext(file.path);
      const std::string checksum = Base64Encode(HexToBytes(*hex));
      HttpRequest body;
      body.upload_file = file.file;
      body.upload_offset = offset;
      body.upload_length = length;
      Result<HttpResponse> r =
          Send("PUT", path, {{"partNumber", std::to_string(n)}, {"uploadId", id}},
               {{"x-amz-checksum-sha256", checksum}}, "", &body, *hex);
      if (!r.ok()) return r.status().WithContext(file.path + " part " + std::to_string(n));
      if (r->status != 200) {
        return ErrorFor("put part " + std::to_string(n) + " of " + file.path, *r, "PUT");
      }
      auto etag = r->headers.find("etag");
      if (etag == r->headers.end() || etag->second.empty() || etag->second.size() > 256) {
        return Status::Unavailable(config_.url + ": no ETag for part " + std::to_string(n) +
                                   " of " + file.path);
      }
      complete += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" +
                  XmlEscape(etag->second) + "</ETag><ChecksumSHA256>" + checksum +
                  "</ChecksumSHA256></Part>";
      if (sent) sent(length);
    }
    complete += "</CompleteMultipartUpload>";
    Result<HttpResponse> r = Send("POST", path, {{"uploadId", id}}, {}, complete);
    if (!r.ok()) return r.status().WithContext(file.path);
    // S3 may answer 200 and put its error in the body.
    if (r->status != 200 || r->body.find("<Error>") != std::string::npos) {
      return ErrorFor("complete the multipart upload of " + file.path, *r, "POST");
    }
    return Status::Ok();
  }

  // The SHA-256 of a whole object as its headers give it: a full-object
  // x-amz-checksum-sha256 (not a multipart upload's checksum of checksums,
  // "...-N"), else the x-amz-meta-sha256 `seedctl push` sets; "" for none.
  static std::string Sha256Of(const HttpResponse& r) {
    auto checksum = r.headers.find("x-amz-checksum-sha256");
    if (checksum != r.headers.end()) {
      std::optional<std::string> raw = Base64Decode(checksum->second);
      if (raw && raw->size() == 32) return "sha256:" + HexEncode(*raw);
    }
    auto meta = r.headers.find("x-amz-meta-sha256");
    if (meta != r.headers.end() && meta->second.size() == 64 && IsLowerHexText(meta->second)) {
      return "sha256:" + meta->second;
    }
    return "";
  }

  // The SHA-256 of object `key` from a HEAD, "" when it names none.
  Result<std::string> HeadDigest(const std::string& key) {
    Result<HttpResponse> r =
        Send("HEAD", ObjectPath(key), {}, {{"x-amz-checksum-mode", "ENABLED"}}, "");
    if (!r.ok()) return r.status().WithContext(key);
    if (r->status != 200) return ErrorFor("head " + key, *r, "HEAD");
    return Sha256Of(*r);
  }

  // A signed request: `body`'s settings (its upload_file range, a sink, a range)
  // when given, else `text` as its body; signed with `payload_sha256`, by
  // default the SHA-256 of `text`.
  Result<HttpResponse> Send(const std::string& method, const std::string& path,
                            const std::map<std::string, std::string>& query,
                            const std::map<std::string, std::string>& extra,
                            const std::string& text, const HttpRequest* body = nullptr,
                            std::string payload_sha256 = "") {
    if (payload_sha256.empty()) payload_sha256 = Sha256Hex(text);
    SignedRequest signed_req{method, config_.host, path, query, extra, payload_sha256};
    HttpRequest req;
    if (body != nullptr) req = *body;
    req.method = method;
    req.url = config_.endpoint + path;
    const std::string q = CanonicalQuery(query);
    if (!q.empty()) req.url += "?" + q;
    for (const auto& [k, v] : SignV4(signed_req, creds_, config_.region, std::time(nullptr))) {
      req.headers.push_back(k + ": " + v);
    }
    if (body == nullptr) req.upload_body = text;
    req.ca_file = access_.ca_file;
    req.stall_timeout = access_.stall_timeout;
    return HttpSend(req);
  }

  std::string BucketPath() const { return config_.path_style ? "/" + config_.bucket : "/"; }
  std::string ObjectPath(const std::string& key) const {
    const std::string object = AwsUriEncode(key, /*keep_slash=*/true);
    return config_.path_style ? "/" + config_.bucket + "/" + object : "/" + object;
  }

  Result<HttpResponse> Get(const std::string& path, const std::map<std::string, std::string>& query,
                           const std::map<std::string, std::string>& extra,
                           const std::function<Status(std::string_view)>* sink,
                           const std::string& range = "") {
    HttpRequest get;
    get.max_body = 64 << 20;  // a listing page is about 1,000 keys
    if (sink != nullptr) get.sink = *sink;
    get.range = range;  // unsigned: SigV4 does not need it signed
    return Send("GET", path, query, extra, "", &get);
  }

  Status ErrorFor(const std::string& what, const HttpResponse& r,
                  const std::string& method = "GET") const {
    const std::string code = XmlFirst(r.body, "Code");
    const std::string message = XmlFirst(r.body, "Message");
    const std::string text = config_.url + ": " + what + ": " + method + " " + r.url + ": HTTP " +
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
  constexpr uint64_t kMiB = 1 << 20;
  constexpr uint64_t kMaxPut = uint64_t{5} << 30;          // one PUT, and one part
  constexpr uint64_t kMaxObject = uint64_t{5} << 40;       // an object
  constexpr uint64_t kMaxParts = 10000;                    // parts of one upload
  constexpr uint64_t kDefaultPart = uint64_t{512} * kMiB;  // parts of a file over kMaxPut
  const auto start = std::chrono::steady_clock::now();
  if (access.push_part_bytes != 0 &&
      (access.push_part_bytes < 5 * kMiB || access.push_part_bytes > kMaxPut)) {
    return Status::InvalidArgument("a multipart upload's parts are 5 MiB to 5 GiB, not " +
                                   std::to_string(access.push_part_bytes) + " bytes");
  }
  Result<std::unique_ptr<S3Origin>> s3 = OpenS3(url, access);
  if (!s3.ok()) return s3.status();
  Result<std::vector<PushFile>> files = FilesToPush(dir, kMaxObject);
  if (!files.ok()) {
    if (files.status().code() != StatusCode::kInvalidArgument) return files.status();
    return Status::InvalidArgument(files.status().message() + " (5 TiB, S3's largest object); " +
                                   "nothing was sent");
  }
  // A file up to the part size (5 GiB by default) goes in one PUT with its
  // SHA-256 checksum; a larger one in parts.
  auto part_of = [&](const PushFile& f) -> uint64_t {
    if (access.push_part_bytes == 0 && f.size <= kMaxPut) return kMaxPut;
    const uint64_t part = access.push_part_bytes != 0 ? access.push_part_bytes : kDefaultPart;
    const uint64_t least = (f.size + kMaxParts - 1) / kMaxParts;  // 10,000 parts at most
    return std::max(part, (least + kMiB - 1) / kMiB * kMiB);
  };
  OriginPush push;
  push.url = std::string(url);
  push.files = files->size();
  for (const PushFile& f : *files) push.total_bytes += f.size;
  for (const PushFile& f : *files) {
    const uint64_t part = part_of(f);
    if (f.size > part) ++push.multipart_files;
    SEEDD_RETURN_IF_ERROR((*s3)
                              ->Upload(f, part,
                                       [&](uint64_t n) {
                                         push.bytes_sent += n;
                                         if (progress) progress(push.bytes_sent, push.total_bytes);
                                       })
                              .WithContext(push.url));
  }
  Result<OriginModel> listed = (*s3)->Resolve();
  if (!listed.ok()) return listed.status().WithContext("reading back " + push.url);
  push.manifest = listed->version;
  push.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return push;
}

}  // namespace seedd
