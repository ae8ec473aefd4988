// Bounded HTTP(S) requests for upstream origins (libcurl): a small body into
// memory or a large one handed to a sink piece by piece, an upload from memory
// or a file, every response header kept, a stalled transfer cut off. Redirects
// are followed (a registry sends blobs from object storage); credentials set
// here are not sent to another host.
//
// Thread safety: HttpSend is a function of its arguments; each call uses its
// own handle.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/status.h"

namespace seedd {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, POST, PUT, DELETE
  std::string url;
  // A POST's or PUT's body: `upload_file` when set (upload_length bytes of it
  // from upload_offset; all of it from there when UINT64_MAX), else
  // `upload_body`.
  std::string upload_body;
  std::filesystem::path upload_file;
  uint64_t upload_offset = 0;
  uint64_t upload_length = UINT64_MAX;
  std::vector<std::string> headers;  // "Name: value"
  std::filesystem::path ca_file;     // trust this bundle instead of the system's
  // A transfer slower than 1 KiB/s for this long ends (an upstream that stalls).
  std::chrono::milliseconds stall_timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  // With `sink` null: the body is kept, at most this many bytes (larger is an
  // error naming the URL).
  uint64_t max_body = 4 << 20;
  // When set, a 2xx body goes here as it comes (other bodies are kept, bounded,
  // for their error text); an error return stops the transfer with it.
  std::function<Status(std::string_view)> sink;
  // "START-END" (inclusive), for a ranged GET. A 2xx answer other than 206
  // (the whole body) is then FailedPrecondition, before any byte reaches `sink`.
  std::string range;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercased; the last response's
  std::string body;
  std::string url;  // after redirects
};

// Performs the request. Transport failures (refused, a name that does not resolve,
// TLS, a stall) are Unavailable or DeadlineExceeded naming the URL; any HTTP
// status is a response.
Result<HttpResponse> HttpSend(const HttpRequest& request);
// A path of `url` (after a registry's Location header, say) resolved against
// `base` ("http://host:port"): absolute URLs are kept.
std::string ResolveUrl(const std::string& base, const std::string& location);

// "401 Unauthorized: <first line of the body's error message>", for errors.
std::string DescribeResponse(const HttpResponse& response);

}  // namespace seedd
