#include "stores/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cstdlib>
#include <fstream>

#include "common/crypto.h"

namespace seedd {
namespace {

std::string Hmac(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

}  // namespace

std::string AwsUriEncode(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::map<std::string, std::string>& query) {
  std::map<std::string, std::string> encoded;
  for (const auto& [k, v] : query) encoded[AwsUriEncode(k, false)] = AwsUriEncode(v, false);
  std::string out;
  for (const auto& [k, v] : encoded) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

std::map<std::string, std::string> SignV4(const SignedRequest& request,
                                          const AwsCredentials& credentials,
                                          const std::string& region, std::time_t now) {
  std::tm tm{};
  gmtime_r(&now, &tm);
  char amz_date[32];
  char date[16];
  std::strftime(amz_date, sizeof(amz_date), "%Y%m%dT%H%M%SZ", &tm);
  std::strftime(date, sizeof(date), "%Y%m%d", &tm);

  std::map<std::string, std::string> headers = request.headers;
  headers["host"] = request.host;
  headers["x-amz-date"] = amz_date;
  headers["x-amz-content-sha256"] = request.payload_sha256;
  if (!credentials.session_token.empty())
    headers["x-amz-security-token"] = credentials.session_token;

  std::string canonical_headers;
  std::string signed_headers;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + Trim(v) + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + k;
  }
  const std::string canonical_request = request.method + "\n" + request.path + "\n" +
                                        CanonicalQuery(request.query) + "\n" + canonical_headers +
                                        "\n" + signed_headers + "\n" + request.payload_sha256;
  const std::string scope = std::string(date) + "/" + region + "/s3/aws4_request";
  const std::string string_to_sign = std::string("AWS4-HMAC-SHA256\n") + amz_date + "\n" + scope +
                                     "\n" + Sha256Hex(canonical_request);
  std::string key = Hmac("AWS4" + credentials.secret_access_key, date);
  key = Hmac(key, region);
  key = Hmac(key, "s3");
  key = Hmac(key, "aws4_request");
  const std::string signature = HexEncode(Hmac(key, string_to_sign));
  headers["authorization"] = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" +
                             scope + ", SignedHeaders=" + signed_headers +
                             ", Signature=" + signature;
  headers.erase("host");  // curl sends Host itself, with the same value
  return headers;
}

Result<AwsCredentials> LoadAwsCredentials() {
  const char* id = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  if (id != nullptr && secret != nullptr && *id != '\0' && *secret != '\0') {
    const char* token = std::getenv("AWS_SESSION_TOKEN");
    return AwsCredentials{id, secret, token == nullptr ? "" : token};
  }
  std::string path;
  if (const char* f = std::getenv("AWS_SHARED_CREDENTIALS_FILE"); f != nullptr && *f != '\0') {
    path = f;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    path = std::string(home) + "/.aws/credentials";
  }
  const char* profile_env = std::getenv("AWS_PROFILE");
  const std::string profile = profile_env != nullptr && *profile_env ? profile_env : "default";
  std::ifstream in(path);
  if (!in) {
    return Status::Unauthenticated(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write " +
        (path.empty() ? std::string("~/.aws/credentials") : path));
  }
  AwsCredentials creds;
  std::string line;
  bool in_profile = false;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_profile = Trim(line.substr(1, line.size() - 2)) == profile;
      continue;
    }
    if (!in_profile) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = Trim(line.substr(0, eq));
    std::string v = Trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") creds.access_key_id = v;
    if (k == "aws_secret_access_key") creds.secret_access_key = v;
    if (k == "aws_session_token") creds.session_token = v;
  }
  if (creds.access_key_id.empty() || creds.secret_access_key.empty()) {
    return Status::Unauthenticated("no AWS credentials for profile '" + profile + "' in " + path);
  }
  return creds;
}

}  // namespace seedd
