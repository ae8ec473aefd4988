#include "origins/http_client.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/curl_lib.h"

namespace seedd {
namespace {

struct Transfer {
  const HttpRequest* request;
  HttpResponse* response;
  Status sink_status;
  bool too_large = false;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a redirect or a 100): its status is known before
    // any of its body reaches OnBody.
    t->response->headers.clear();
    const size_t sp = line.find(' ');
    t->response->status =
        sp == std::string_view::npos ? 0 : std::strtol(line.data() + sp + 1, nullptr, 10);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string value(line.substr(colon + 1));
  value.erase(0, value.find_first_not_of(" \t"));
  value.erase(value.find_last_not_of(" \t\r\n") + 1);
  if (t->response->headers.size() < 256 && value.size() < 8192) {
    t->response->headers[name] = std::move(value);
  }
  return size * n;
}

// A file's range as a request body.
struct UploadRange {
  std::FILE* file;
  uint64_t left;
};

size_t OnUpload(char* data, size_t size, size_t n, void* user) {
  auto* u = static_cast<UploadRange*>(user);
  const size_t want = static_cast<size_t>(std::min<uint64_t>(size * n, u->left));
  if (want == 0) return 0;
  const size_t got = std::fread(data, 1, want, u->file);
  if (got == 0) return CURL_READFUNC_ABORT;  // the file shrank under the upload
  u->left -= got;
  return got;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  const long status = t->response->status;  // of the response this body belongs to
  if (t->request->sink && status >= 200 && status < 300) {
    if (!t->request->range.empty() && status != 206) {
      // The whole body where a range was asked: none of it goes to the sink.
      t->sink_status = Status::FailedPrecondition(t->request->method + " " + t->request->url +
                                                  ": HTTP " + std::to_string(status) +
                                                  " to a ranged GET (the range was ignored)");
      return 0;
    }
    t->sink_status = t->request->sink(std::string_view(data, len));
    return t->sink_status.ok() ? len : 0;
  }
  const uint64_t limit = t->request->sink ? 64 * 1024 : t->request->max_body;
  if (t->response->body.size() + len > limit) {
    if (t->request->sink) return len;  // an error's text: the first part is enough
    t->too_large = true;
    return 0;
  }
  t->response->body.append(data, len);
  return len;
}

// What went wrong on the way to an answer, in libcurl's words (`detail`, else
// its code's text), with what to do where a flag or a URL decides it.
std::string TransportError(CURLcode rc, const char* detail, const CurlLib& lib) {
  std::string text = lib.Failure(rc, detail);
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return text +
             " (the server's certificate is not trusted here: give the CA bundle that signed it, "
             "--origin-ca FILE)";
    case CURLE_SSL_CONNECT_ERROR:
      return text +
             " (no TLS handshake: if the server speaks plain HTTP, add ?plain-http=true to "
             "an oci:// URL, or give an s3:// endpoint as http://)";
    default:
      return text;
  }
}

}  // namespace

Result<HttpResponse> HttpSend(const HttpRequest& request) {
  Result<const CurlLib*> loaded = Curl();
  if (!loaded.ok()) return loaded.status();
  const CurlLib& lib = **loaded;
  std::unique_ptr<CURL, void (*)(CURL*)> curl(lib.easy_init(), lib.easy_cleanup);
  if (!curl) return Status::Internal("libcurl could not make a handle");
  HttpResponse response;
  Transfer t{&request, &response, Status::Ok()};
  curl_slist* headers = nullptr;
  for (const std::string& h : request.headers) headers = lib.slist_append(headers, h.c_str());
  if (request.method == "PUT" || request.method == "POST") {
    headers = lib.slist_append(headers, "Expect:");  // no 100-continue round trip
  }
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> header_list(headers, lib.slist_free_all);
  CURL* c = curl.get();
  lib.Setopt(c, CURLOPT_URL, request.url.c_str());
  // The body to send, from memory or a file, and its length up front.
  std::FILE* upload = nullptr;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> upload_closer(nullptr, std::fclose);
  UploadRange range{nullptr, 0};
  if (request.method == "GET") {
    lib.Setopt(c, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    lib.Setopt(c, CURLOPT_NOBODY, 1L);
  } else if (request.method == "DELETE") {
    lib.Setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (request.method == "PUT" || request.method == "POST") {
    if (!request.upload_file.empty()) {
      upload = std::fopen(request.upload_file.c_str(), "rb");
      if (upload == nullptr) {
        return Status::NotFound("cannot read " + request.upload_file.string() + ": " +
                                std::strerror(errno));
      }
      upload_closer.reset(upload);
      std::error_code ec;
      const uint64_t size = std::filesystem::file_size(request.upload_file, ec);
      if (ec || request.upload_offset > size ||
          ::fseeko(upload, static_cast<off_t>(request.upload_offset), SEEK_SET) != 0) {
        return Status::InvalidArgument("cannot read " + request.upload_file.string() + " from " +
                                       std::to_string(request.upload_offset));
      }
      range = {upload, std::min(request.upload_length, size - request.upload_offset)};
      lib.Setopt(c, CURLOPT_UPLOAD, 1L);
      lib.Setopt(c, CURLOPT_READFUNCTION, OnUpload);
      lib.Setopt(c, CURLOPT_READDATA, &range);
      lib.Setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(range.left));
      if (request.method == "POST") lib.Setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
    } else if (request.method == "POST") {
      lib.Setopt(c, CURLOPT_POST, 1L);
      lib.Setopt(c, CURLOPT_POSTFIELDS, request.upload_body.data());
      lib.Setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                 static_cast<curl_off_t>(request.upload_body.size()));
    } else {
      lib.Setopt(c, CURLOPT_POSTFIELDS, request.upload_body.data());
      lib.Setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                 static_cast<curl_off_t>(request.upload_body.size()));
      lib.Setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    }
  } else {
    return Status::InvalidArgument("HTTP method " + request.method);
  }
  lib.Setopt(c, CURLOPT_HTTPHEADER, headers);
  lib.Setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  lib.Setopt(c, CURLOPT_MAXREDIRS, 5L);
  lib.Setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  lib.Setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  lib.Setopt(c, CURLOPT_NOSIGNAL, 1L);
  lib.Setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout.count()));
  lib.Setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  lib.Setopt(c, CURLOPT_LOW_SPEED_TIME,
             std::max(1L, static_cast<long>(request.stall_timeout.count() / 1000)));
  lib.Setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  lib.Setopt(c, CURLOPT_HEADERDATA, &t);
  lib.Setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  lib.Setopt(c, CURLOPT_WRITEDATA, &t);
  if (!request.ca_file.empty()) lib.Setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
  if (!request.range.empty()) lib.Setopt(c, CURLOPT_RANGE, request.range.c_str());
  // libcurl's own account of a failure (the address and port it could not
  // reach, the certificate problem), which its code's text leaves out.
  char detail[CURL_ERROR_SIZE] = {};
  lib.Setopt(c, CURLOPT_ERRORBUFFER, detail);
  const CURLcode rc = lib.easy_perform(c);
  lib.Setopt(c, CURLOPT_ERRORBUFFER, static_cast<char*>(nullptr));
  char* effective = nullptr;
  lib.easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &effective);
  response.url = effective != nullptr ? effective : request.url;
  if (rc != CURLE_OK) {
    if (!t.sink_status.ok()) return t.sink_status;
    if (t.too_large) {
      return Status::ResourceExhausted(request.method + " " + request.url +
                                       ": the answer is larger than " +
                                       std::to_string(request.max_body) + " bytes");
    }
    const std::string what =
        request.method + " " + request.url + ": " + TransportError(rc, detail, lib);
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return Status::DeadlineExceeded(what + " (nothing for " +
                                      std::to_string(request.stall_timeout.count() / 1000) + " s)");
    }
    return Status::Unavailable(what);
  }
  long status = 0;
  lib.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  response.status = status;
  return response;
}

std::string ResolveUrl(const std::string& base, const std::string& location) {
  if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) return location;
  const size_t scheme = base.find("://");
  const size_t path = base.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const std::string origin = path == std::string::npos ? base : base.substr(0, path);
  return origin + (location.empty() || location.front() != '/' ? "/" : "") + location;
}

std::string DescribeResponse(const HttpResponse& r) {
  std::string out = "HTTP " + std::to_string(r.status);
  std::string text = r.body.substr(0, 300);
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  if (!text.empty()) out += ": " + text;
  return out;
}

}  // namespace seedd
