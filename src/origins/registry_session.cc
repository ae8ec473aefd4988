// RegistrySession (oci.h): one repository's requests with the registry's
// credentials, and the credential files they come from.
#include <fstream>
#include <sstream>

#include "common/crypto.h"
#include "origins/oci.h"

namespace seedd {
namespace {

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

RegistrySession::RegistrySession(OciReference ref, OriginAccess access,
                                 std::optional<std::string> basic)
    : ref_(std::move(ref)), access_(std::move(access)), basic_(std::move(basic)) {}

std::string RegistrySession::Base() const {
  return std::string(ref_.plain_http ? "http://" : "https://") + ref_.registry + "/v2/" +
         ref_.repository;
}

Result<HttpResponse> RegistrySession::Send(const std::string& url, HttpRequest req) {
  req.url = url;
  req.ca_file = access_.ca_file;
  req.stall_timeout = access_.stall_timeout;
  const std::vector<std::string> plain = req.headers;
  std::string auth = Authorization();
  if (!auth.empty()) req.headers.push_back(auth);
  // A 401's body is kept, not streamed: the sink sees only a 2xx body.
  Result<HttpResponse> r = HttpSend(req);
  if (!r.ok() || r->status != 401) return r;
  auto challenge = ParseAuthChallenge(r->headers["www-authenticate"]);
  if (!challenge) {
    return Status::Unauthenticated("GET " + url + ": " + DescribeResponse(*r) +
                                   " with no challenge seedd can answer");
  }
  if (challenge->scheme == "basic") {
    if (!basic_) {
      return Status::Unauthenticated("GET " + url + ": the registry asks for credentials and " +
                                     NoCredentials());
    }
    auth = "Authorization: Basic " + *basic_;
  } else if (challenge->scheme == "bearer") {
    Result<std::string> token = FetchToken(*challenge);
    if (!token.ok()) return token.status();
    auth = "Authorization: Bearer " + *token;
  } else {
    return Status::Unauthenticated("GET " + url + ": the registry asks for " + challenge->scheme +
                                   " authentication, which seedd lacks");
  }
  {
    MutexLock lock(mu_);
    authorization_ = auth;
  }
  req.headers = plain;
  req.headers.push_back(auth);
  r = HttpSend(req);
  if (r.ok() && r->status == 401) {
    return Status::Unauthenticated(
        "GET " + url + ": " + DescribeResponse(*r) +
        (basic_ ? " (the credentials were refused)" : " (" + NoCredentials() + ")"));
  }
  return r;
}

std::string RegistrySession::NoCredentials() const {
  return access_.auth_file.empty() ? "none were given (--origin-auth FILE)"
                                   : access_.auth_file.string() + " has none for " + ref_.registry;
}

std::string RegistrySession::Authorization() {
  MutexLock lock(mu_);
  return authorization_;
}

Result<std::string> RegistrySession::FetchToken(const AuthChallenge& c) {
  auto realm = c.params.find("realm");
  if (realm == c.params.end() ||
      (realm->second.rfind("https://", 0) != 0 && realm->second.rfind("http://", 0) != 0)) {
    return Status::Unauthenticated(ref_.ToString() +
                                   ": the registry's Bearer challenge names no http(s) realm");
  }
  std::string url = realm->second;
  char sep = url.find('?') == std::string::npos ? '?' : '&';
  auto service = c.params.find("service");
  if (service != c.params.end()) {
    url += sep + std::string("service=") + UrlEncode(service->second);
    sep = '&';
  }
  auto scope = c.params.find("scope");
  url += sep + std::string("scope=") +
         UrlEncode(scope != c.params.end() ? scope->second
                                           : "repository:" + ref_.repository + ":pull");
  HttpRequest req;
  req.url = url;
  req.ca_file = access_.ca_file;
  req.stall_timeout = access_.stall_timeout;
  req.max_body = 1 << 20;
  if (basic_) req.headers.push_back("Authorization: Basic " + *basic_);
  Result<HttpResponse> r = HttpSend(req);
  if (!r.ok()) return r.status().WithContext("token for " + ref_.ToString());
  if (r->status != 200) {
    return Status::Unauthenticated("token for " + ref_.ToString() + " from " + realm->second +
                                   ": " + DescribeResponse(*r));
  }
  Json body = Json::parse(r->body, nullptr, false);
  std::string token;
  if (body.is_object()) {
    if (body.contains("token") && body["token"].is_string()) token = body["token"];
    if (token.empty() && body.contains("access_token") && body["access_token"].is_string()) {
      token = body["access_token"];
    }
  }
  if (token.empty() || token.size() > 64 * 1024 ||
      token.find_first_of("\r\n") != std::string::npos) {
    return Status::Unauthenticated("token for " + ref_.ToString() + " from " + realm->second +
                                   ": the answer holds no usable token");
  }
  return token;
}

Status RegistrySession::ErrorFor(const std::string& what, const HttpResponse& r) const {
  const std::string text = "GET " + r.url + " (" + what + "): " + DescribeResponse(r);
  switch (r.status) {
    case 404:
      return Status::NotFound(text);
    case 401:
      return Status::Unauthenticated(text);
    case 403:
      return Status::PermissionDenied(text);
    default:
      return r.status >= 500 ? Status::Unavailable(text) : Status::InvalidArgument(text);
  }
}

Result<std::optional<std::string>> RegistryAuthFromJson(std::string_view text,
                                                        std::string_view registry) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("not JSON ({\"auths\": {\"HOST\": {\"auth\": ...}}})");
  }
  if (!j.contains("auths")) return std::optional<std::string>();
  if (!j["auths"].is_object()) return Status::InvalidArgument("\"auths\" is not an object");
  for (const auto& [host, entry] : j["auths"].items()) {
    std::string_view h = host;
    for (std::string_view scheme : {"https://", "http://"}) {
      if (h.rfind(scheme, 0) == 0) h.remove_prefix(scheme.size());
    }
    if (!h.empty() && h.back() == '/') h.remove_suffix(1);
    if (h != registry) continue;
    if (!entry.is_object() || !entry.contains("auth") || !entry["auth"].is_string()) {
      return Status::InvalidArgument("the entry for " + std::string(registry) + " has no \"auth\"");
    }
    const std::string auth = entry["auth"];
    std::optional<std::string> decoded = Base64Decode(auth);
    if (!decoded || decoded->find(':') == std::string::npos) {
      return Status::InvalidArgument("the \"auth\" of " + std::string(registry) +
                                     " is not base64 of user:password");
    }
    return std::optional<std::string>(auth);
  }
  return std::optional<std::string>();
}

Result<std::unique_ptr<RegistrySession>> OpenRegistrySession(const OciReference& ref,
                                                             const OriginAccess& access) {
  std::optional<std::string> basic;
  if (!access.auth_file.empty()) {
    std::ifstream in(access.auth_file);
    if (!in) return Status::NotFound("cannot read " + access.auth_file.string());
    std::stringstream text;
    text << in.rdbuf();
    Result<std::optional<std::string>> auth = RegistryAuthFromJson(text.str(), ref.registry);
    if (!auth.ok()) return auth.status().WithContext(access.auth_file.string());
    basic = *auth;
  }
  return std::make_unique<RegistrySession>(ref, access, std::move(basic));
}

}  // namespace seedd
