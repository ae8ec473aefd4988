// AWS Signature Version 4 for S3 requests, and the credentials it signs with.
// Pure functions (LoadAwsCredentials reads the environment and files); thread-safe.
#pragma once

#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "seedd/status.h"

namespace seedd {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
};

// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the profile
// AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (default
// ~/.aws/credentials).
Result<AwsCredentials> LoadAwsCredentials();

// RFC 3986 percent-encoding as SigV4 wants it; '/' kept when `keep_slash`.
std::string AwsUriEncode(std::string_view s, bool keep_slash);

struct SignedRequest {
  std::string method;
  std::string host;                            // the Host header: "host" or "host:port"
  std::string path;                            // already encoded, starts with '/'
  std::map<std::string, std::string> query;    // raw (encoded when signing)
  std::map<std::string, std::string> headers;  // lowercase names; extra signed headers
  std::string payload_sha256;                  // hex
};

// Returns the headers to send: authorization, x-amz-date, x-amz-content-sha256,
// x-amz-security-token (when set) and the request's own headers.
std::map<std::string, std::string> SignV4(const SignedRequest& request,
                                          const AwsCredentials& credentials,
                                          const std::string& region, std::time_t now);

// The encoded query string in canonical (sorted) order: "a=1&b=2".
std::string CanonicalQuery(const std::map<std::string, std::string>& query);

}  // namespace seedd
