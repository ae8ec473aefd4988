// OCI registries as origins (the distribution API, v2): a model is an artifact
// whose layers are its files. A ModelPack artifact (config media type
// application/vnd.cncf.model.config.v1+json) names each layer's path in the
// annotation org.cncf.model.filepath; a plain artifact (as `oras push` writes
// one) in org.opencontainers.image.title. A layer's digest is the SHA-256 of its
// file: raw layers only (a tar layer is refused, saying so).
//
//   oci://REGISTRY[:PORT]/REPOSITORY[:TAG]          (TAG defaults to latest)
//   oci://REGISTRY[:PORT]/REPOSITORY@sha256:DIGEST  (pinned: the manifest's digest)
//   ...?plain-http=true                             (HTTP; a loopback registry
//                                                     speaks HTTP unless told
//                                                     ?plain-http=false)
//
// Credentials: anonymous first; a 401 with a Bearer challenge gets a token from
// the realm it names (with basic credentials for the registry, when the auth
// file has some), a Basic challenge gets the credentials.
//
// Thread safety: RegistrySession's and OciOrigin's methods may be called
// concurrently (the token is kept under a mutex).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "origins/http_client.h"
#include "origins/origin.h"
#include "seedd/json.h"

namespace seedd {

struct OciReference {
  std::string registry;    // HOST[:PORT]
  std::string repository;  // lowercase path components
  std::string tag;         // empty when pinned by digest
  std::string digest;      // "sha256:<hex>" when pinned
  bool plain_http = false;
  std::string ToString() const;  // oci://REGISTRY/REPOSITORY(:TAG|@DIGEST)
};

// InvalidArgument naming what is wrong.
Result<OciReference> ParseOciReference(std::string_view url);

// A challenge of a 401 answer: "Bearer realm=...,service=...,scope=..." or "Basic realm=...".
struct AuthChallenge {
  std::string scheme;  // lowercased: "bearer", "basic"
  std::map<std::string, std::string> params;
};
std::optional<AuthChallenge> ParseAuthChallenge(std::string_view header);

// The files of an OCI image manifest (its JSON text): InvalidArgument naming the
// layer for a missing or unsafe path, a duplicate, a digest that is not
// sha256, or a tar layer.
Result<std::vector<OriginFile>> OciManifestFiles(const Json& manifest);

// base64("user:password") for `registry` from an auth file's text; nullopt when
// it names none. InvalidArgument for a file that is not such JSON.
Result<std::optional<std::string>> RegistryAuthFromJson(std::string_view text,
                                                        std::string_view registry);

// Requests to one repository of a registry with its credentials: anonymous
// (or the token got before) first; a 401 is answered as its challenge asks
// (a Bearer token from the realm, or basic credentials), once.
class RegistrySession {
 public:
  // `basic`: base64("user:password") for the registry, when the auth file has it.
  RegistrySession(OciReference ref, OriginAccess access, std::optional<std::string> basic);
  RegistrySession(const RegistrySession&) = delete;
  RegistrySession& operator=(const RegistrySession&) = delete;

  const OciReference& ref() const { return ref_; }
  // scheme://REGISTRY/v2/REPOSITORY
  std::string Base() const;
  Result<HttpResponse> Send(const std::string& url, HttpRequest req);
  // An answer other than the one expected, as a Status naming `what` and the URL:
  // 404 NotFound, 401 Unauthenticated, 403 PermissionDenied, 5xx Unavailable.
  Status ErrorFor(const std::string& what, const HttpResponse& r) const;

 private:
  std::string NoCredentials() const;
  std::string Authorization();
  Result<std::string> FetchToken(const AuthChallenge& c);

  const OciReference ref_;
  const OriginAccess access_;
  const std::optional<std::string> basic_;
  Mutex mu_;
  std::string authorization_ GUARDED_BY(mu_);
};

// A session to `ref`'s repository, with the auth file's credentials for its
// registry (an unreadable or malformed file is an error naming it).
Result<std::unique_ptr<RegistrySession>> OpenRegistrySession(const OciReference& ref,
                                                             const OriginAccess& access);

Result<OriginPtr> OpenOciOrigin(const OciReference& ref, const OriginAccess& access);

}  // namespace seedd
