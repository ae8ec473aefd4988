// Real servers for the store and origin tests: redis-server, s3rver (Node.js)
// and an OCI registry (Debian's docker-registry, the CNCF distribution
// registry), each on a free loopback port in a temporary directory, stopped on
// destruction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/test_util.h"

namespace seedd::testing {

// A port that was free a moment ago (bound to 127.0.0.1:0, then released).
uint16_t FreePort();
// Polls until something accepts on 127.0.0.1:port.
bool WaitForPort(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(20));

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  void Start();
  void Stop();
  uint16_t port() const { return port_; }
  std::string url(const std::string& query = "") const;

 private:
  TempDir dir_;
  uint16_t port_;
  std::unique_ptr<Process> process_;
};

class S3Server {
 public:
  static constexpr const char* kBucket = "seedd-test";
  S3Server();
  ~S3Server();
  void Start();
  void Stop();
  uint16_t port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string url(const std::string& prefix = "") const;
  // Where s3rver keeps buckets: <data_dir>/BUCKET/KEY._S3rver_object, its MD5 beside.
  std::filesystem::path data_dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  uint16_t port_;
  std::unique_ptr<Process> process_;
};

// docker-registry on a free loopback port, storing below a temporary directory.
// kBasicOverTls: basic authentication (htpasswd, bcrypt) over TLS with a test CA
// (ca_file()); registries refuse basic authentication without TLS. kToken: the
// registry token protocol over HTTP, tokens (RS256 JWTs) from a token service
// (support/token_server.py) that asks for basic credentials itself. Either way
// the user is "seedd", the password "seedd-test-password".
class OciRegistryServer {
 public:
  enum class Auth { kNone, kBasicOverTls, kToken };
  explicit OciRegistryServer(Auth auth = Auth::kNone);
  ~OciRegistryServer();
  uint16_t port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  std::filesystem::path ca_file() const { return dir_.path() / "ca.pem"; }
  // With kToken: one JSON line per token request ({"path", "query", "basic"}).
  std::filesystem::path token_log() const { return dir_.path() / "tokens.log"; }
  // Where the registry keeps blob `digest` ("sha256:<hex>"): changing it there
  // makes an upstream whose bytes no longer match their digest.
  std::filesystem::path BlobData(const std::string& digest) const;

 private:
  TempDir dir_;
  uint16_t port_;
  std::unique_ptr<Process> process_;
  std::unique_ptr<Process> token_service_;
};

// Writes `files` (path -> bytes) as a ModelPack artifact in an OCI image layout
// at `layout` (one raw layer per file, its path in org.cncf.model.filepath) and
// copies it to `dest` (docker://HOST/REPO:TAG) with skopeo, a third-party
// client. Returns the manifest's digest; throws with skopeo's error.
std::string PushModelPack(const std::filesystem::path& layout, const std::string& dest,
                          const std::map<std::string, std::string>& files,
                          const std::vector<std::string>& skopeo_flags = {
                              "--dest-tls-verify=false"});

}  // namespace seedd::testing
