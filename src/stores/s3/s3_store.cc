// s3://bucket[/prefix]?endpoint=http://host:port&region=R
// libcurl + SigV4. Path-style addressing for custom endpoints, virtual-hosted for
// AWS. 404 NoSuchKey is a miss; 403 and other 4xx are errors carrying the server's
// message; 5xx and transport failures are retried with backoff, then an error.
// Uploads carry Content-MD5 and a signed SHA-256, both verified by the server.
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/curl_lib.h"
#include "common/mutex.h"
#include "stores/backends.h"
#include "stores/s3/s3_location.h"
#include "stores/s3/s3_xml.h"
#include "stores/s3/sigv4.h"
#include "stores/store_url.h"

namespace seedd {
namespace {

constexpr int kAttempts = 4;  // one try and three retries: 100, 200, 400 ms apart

struct S3Config {
  std::string bucket;
  std::string prefix;  // without leading or trailing '/'
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port], no trailing '/'
  std::string host;      // Host header
  bool path_style = true;
  long timeout_ms = 30000;
  long connect_timeout_ms = 5000;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string etag;
};

std::string Md5Base64(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  return Base64Encode(std::string_view(reinterpret_cast<const char*>(md), len));
}

// A response body, at most kMaxSharedValueBytes: past that the transfer stops.
struct BodySink {
  std::string* body;
  bool too_large = false;
};

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  if (sink->body->size() + size * n > kMaxSharedValueBytes) {
    sink->too_large = true;
    return 0;  // curl stops: CURLE_WRITE_ERROR
  }
  sink->body->append(data, size * n);
  return size * n;
}

struct HeaderState {
  BodySink* sink;
  std::string etag;
};

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* state = static_cast<HeaderState*>(user);
  std::string_view line(data, size * n);
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  std::string value(line.substr(colon + 1));
  value.erase(0, value.find_first_not_of(" \t"));
  value.erase(value.find_last_not_of(" \t\r\n") + 1);
  if (name == "content-length") {
    const unsigned long long len = std::strtoull(value.c_str(), nullptr, 10);
    if (len > kMaxSharedValueBytes) {
      state->sink->too_large = true;
      return 0;  // refused before any of the body is read
    }
    // Reserve the body once: a large object is then written into place, not regrown.
    if (len > 0) state->sink->body->reserve(len);
  } else if (name == "etag") {
    state->etag = value;
  }
  return size * n;
}

std::string Md5Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

struct Upload {
  std::string_view data;
  size_t offset = 0;
};

size_t ReadUpload(char* buf, size_t size, size_t n, void* user) {
  auto* up = static_cast<Upload*>(user);
  size_t take = std::min(size * n, up->data.size() - up->offset);
  std::memcpy(buf, up->data.data() + up->offset, take);
  up->offset += take;
  return take;
}

class S3Store final : public ArtifactStore {
 public:
  S3Store(const CurlLib& lib, S3Config config, AwsCredentials creds)
      : lib_(lib), config_(std::move(config)), creds_(std::move(creds)) {}
  ~S3Store() override {
    for (CURL* c : idle_) lib_.easy_cleanup(c);
  }

  // GetBucketLocation: proves the bucket exists and the credentials are accepted.
  Status Check() {
    auto r = Perform("GET", BucketPath(), {{"location", ""}}, {}, nullptr);
    if (!r.ok()) return r.status();
    if (r->status == 200) return Status::Ok();
    return ErrorFor("check the bucket", *r);
  }

  Result<std::optional<std::string>> Get(const ArtifactKey& key) override {
    std::string body;
    auto r = Perform("GET", ObjectPath(key), {}, {}, &body);
    if (!r.ok()) return r.status();
    if (r->status == 200) return std::optional<std::string>(std::move(body));
    if (r->status == 404 && XmlFirst(body, "Code") != "NoSuchBucket") {
      return std::optional<std::string>();
    }
    r->body = std::move(body);
    return ErrorFor("get " + key.ToString(), *r);
  }

  Status Put(const ArtifactKey& key, std::string_view value) override {
    // S3 makes each PUT atomic, but S3-compatible servers on plain files (s3rver)
    // interleave concurrent PUTs of one key; this store's own writers of a key go
    // one at a time, so they never tear a value on such servers.
    MutexLock key_lock(put_locks_[std::hash<std::string>{}(key.ToString()) % put_locks_.size()]);
    auto r = Perform("PUT", ObjectPath(key), {}, value, nullptr, /*upload=*/true);
    if (!r.ok()) return r.status();
    if (r->status == 200) {
      // A single-part object's ETag is the MD5 of the bytes the server stored: a
      // second, end-to-end check beside the Content-MD5 the server verifies.
      std::string etag = r->etag;
      etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
      if (!etag.empty() && etag != Md5Hex(value)) {
        return Status::DataLoss(Describe() + ": put " + key.ToString() + ": the server stored " +
                                "different bytes (ETag " + etag + ")");
      }
      return Status::Ok();
    }
    return ErrorFor("put " + key.ToString(), *r);
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    std::vector<std::string> keys;
    std::map<std::string, std::string> query = {{"list-type", "2"},
                                                {"prefix", KeyPrefix() + std::string(prefix)}};
    for (int page = 0;; ++page) {
      if (keys.size() >= kMaxListedKeys || page >= 1000) {
        return Status::ResourceExhausted(Describe() + ": the listing goes on past " +
                                         std::to_string(keys.size()) + " keys in " +
                                         std::to_string(page) + " pages; narrow the prefix");
      }
      auto r = Perform("GET", BucketPath(), query, {}, nullptr);
      if (!r.ok()) return r.status();
      if (r->status != 200) return ErrorFor("list", *r);
      for (std::string& k : XmlAll(r->body, "Key")) {
        k.erase(0, KeyPrefix().size());
        if (ArtifactKey::Parse(k).ok()) keys.push_back(std::move(k));
      }
      std::string next = XmlFirst(r->body, "NextContinuationToken");
      if (XmlFirst(r->body, "IsTruncated") != "true" || next.empty()) break;
      query["continuation-token"] = next;
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status Delete(const ArtifactKey& key) override {
    auto r = Perform("DELETE", ObjectPath(key), {}, {}, nullptr);
    if (!r.ok()) return r.status();
    if (r->status == 204 || r->status == 200 || r->status == 404) return Status::Ok();
    return ErrorFor("delete " + key.ToString(), *r);
  }

  std::string Describe() const override {
    return "s3://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix);
  }

 private:
  std::string KeyPrefix() const { return config_.prefix.empty() ? "" : config_.prefix + "/"; }
  std::string BucketPath() const { return config_.path_style ? "/" + config_.bucket : "/"; }
  std::string ObjectPath(const ArtifactKey& key) const {
    std::string object = AwsUriEncode(KeyPrefix() + key.ToString(), /*keep_slash=*/true);
    return config_.path_style ? "/" + config_.bucket + "/" + object : "/" + object;
  }

  Status ErrorFor(const std::string& what, const HttpResponse& r) const {
    std::string code = XmlFirst(r.body, "Code");
    std::string message = XmlFirst(r.body, "Message");
    std::string text = Describe() + ": " + what + ": HTTP " + std::to_string(r.status) +
                       (code.empty() ? "" : " " + code) + (message.empty() ? "" : ": " + message);
    if (code == "NoSuchBucket" || (r.status == 404 && code.empty())) {
      return Status::NotFound(text + " (bucket '" + config_.bucket + "' does not exist)");
    }
    if (r.status == 403 || r.status == 401) return Status::PermissionDenied(text);
    if (r.status >= 500) return Status::Unavailable(text);
    return Status::InvalidArgument(text);
  }

  CURL* Acquire() {
    {
      MutexLock lock(mu_);
      if (!idle_.empty()) {
        CURL* c = idle_.back();
        idle_.pop_back();
        lib_.easy_reset(c);  // keeps the connection cache
        return c;
      }
    }
    return lib_.easy_init();
  }
  void Release(CURL* c) {
    MutexLock lock(mu_);
    if (idle_.size() < 16) {
      idle_.push_back(c);
    } else {
      lib_.easy_cleanup(c);
    }
  }

  // One signed request with retries. `out`, when given, receives the body of a
  // 200 response (and of error responses); else the body goes to HttpResponse.
  Result<HttpResponse> Perform(const std::string& method, const std::string& path,
                               const std::map<std::string, std::string>& query,
                               std::string_view payload, std::string* out, bool upload = false) {
    SignedRequest req{method, config_.host, path, query, {}, Sha256Hex(payload)};
    if (upload) req.headers["content-md5"] = Md5Base64(payload);
    std::string url = config_.endpoint + path;
    std::string q = CanonicalQuery(query);
    if (!q.empty()) url += "?" + q;
    Status last;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 << (attempt - 1)));
      HttpResponse response;
      std::string* sink = out != nullptr ? out : &response.body;
      sink->clear();
      Upload up{payload, 0};
      curl_slist* headers = nullptr;
      for (const auto& [k, v] : SignV4(req, creds_, config_.region, std::time(nullptr))) {
        headers = lib_.slist_append(headers, (k + ": " + v).c_str());
      }
      headers = lib_.slist_append(headers, "Expect:");  // no 100-continue round trip
      CURL* c = Acquire();
      lib_.Setopt(c, CURLOPT_URL, url.c_str());
      lib_.Setopt(c, CURLOPT_HTTPHEADER, headers);
      lib_.Setopt(c, CURLOPT_NOSIGNAL, 1L);
      lib_.Setopt(c, CURLOPT_TIMEOUT_MS, config_.timeout_ms);
      lib_.Setopt(c, CURLOPT_CONNECTTIMEOUT_MS, config_.connect_timeout_ms);
      BodySink body_sink{sink};
      lib_.Setopt(c, CURLOPT_WRITEFUNCTION, WriteBody);
      lib_.Setopt(c, CURLOPT_WRITEDATA, &body_sink);
      HeaderState header_state{&body_sink, {}};
      lib_.Setopt(c, CURLOPT_HEADERFUNCTION, ReadHeader);
      lib_.Setopt(c, CURLOPT_HEADERDATA, &header_state);
      if (upload) {
        lib_.Setopt(c, CURLOPT_UPLOAD, 1L);
        lib_.Setopt(c, CURLOPT_READFUNCTION, ReadUpload);
        lib_.Setopt(c, CURLOPT_READDATA, &up);
        lib_.Setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(payload.size()));
      } else if (method == "HEAD") {
        lib_.Setopt(c, CURLOPT_NOBODY, 1L);
      } else if (method != "GET") {
        lib_.Setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
      }
      char detail[CURL_ERROR_SIZE] = {};
      lib_.Setopt(c, CURLOPT_ERRORBUFFER, detail);
      CURLcode rc = lib_.easy_perform(c);
      lib_.Setopt(c, CURLOPT_ERRORBUFFER, static_cast<char*>(nullptr));
      lib_.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
      response.etag = header_state.etag;
      Release(c);
      lib_.slist_free_all(headers);
      if (body_sink.too_large) {  // not retried: the same answer would come again
        sink->clear();
        return Status::ResourceExhausted(Describe() + ": " + method + " " + path +
                                         ": the answer is larger than " +
                                         std::to_string(kMaxSharedValueBytes >> 20) +
                                         " MiB, the most a shared store's value may be");
      }
      if (rc != CURLE_OK) {
        last = Status::Unavailable(Describe() + ": " + method + " " + path + ": " +
                                   lib_.Failure(rc, detail));
        continue;
      }
      if (response.status >= 500) {
        if (out != nullptr) response.body = *out;
        last = ErrorFor(method + " " + path, response);
        continue;
      }
      if (out != nullptr && response.status != 200) response.body = *out;
      return response;
    }
    return Status::Unavailable(last.message() + " (after " + std::to_string(kAttempts) +
                               " attempts)");
  }

  const CurlLib& lib_;
  const S3Config config_;
  const AwsCredentials creds_;
  Mutex mu_;
  std::vector<CURL*> idle_ GUARDED_BY(mu_);
  std::array<Mutex, 64> put_locks_;  // striped by key
};

}  // namespace

Result<ArtifactStorePtr> OpenS3Store(std::string_view url) {
  Result<const CurlLib*> lib = Curl();
  if (!lib.ok()) return lib.status();
  std::map<std::string, std::string> extra;
  Result<S3Location> loc = ParseS3Location(url, &extra);
  if (!loc.ok()) return loc.status();
  S3Config config;
  config.bucket = loc->bucket;
  config.prefix = loc->prefix;
  config.region = loc->region;
  config.endpoint = loc->endpoint;
  config.host = loc->host;
  config.path_style = loc->path_style;
  for (const auto& [k, v] : extra) {
    if (k == "timeout_ms") {
      config.timeout_ms = std::strtol(v.c_str(), nullptr, 10);
      if (config.timeout_ms <= 0) return Status::InvalidArgument("timeout_ms must be positive");
    } else {
      return Status::InvalidArgument("unknown s3 parameter '" + k +
                                     "' (known: endpoint, region, timeout_ms)");
    }
  }
  Result<AwsCredentials> creds = LoadAwsCredentials();
  if (!creds.ok()) return creds.status();
  auto store = std::make_unique<S3Store>(**lib, std::move(config), std::move(*creds));
  SEEDD_RETURN_IF_ERROR(store->Check());
  return ArtifactStorePtr(std::move(store));
}

}  // namespace seedd
