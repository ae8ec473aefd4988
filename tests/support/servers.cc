#include "support/servers.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <fstream>
#include <stdexcept>
#include <thread>

#include "common/crypto.h"
#include "seedd/json.h"
#include "transport/client.h"

namespace seedd::testing {

uint16_t FreePort() {
  uint16_t port = 0;
  UniqueFd fd = ListenLoopback(&port);
  return port;
}

bool WaitForPort(uint16_t port, std::chrono::milliseconds timeout) {
  return WaitUntil(
      [&] {
        return ConnectTcp(HostPort{"127.0.0.1", port}, std::chrono::milliseconds(200)).ok();
      },
      timeout);
}

namespace {

// SIGTERM, then wait for the exit; a no-op when not running.
void StopProcess(std::unique_ptr<Process>* process) {
  if (*process == nullptr) return;
  (*process)->Signal(SIGTERM);
  (*process)->Wait(std::chrono::seconds(10));
  process->reset();
}

}  // namespace

RedisServer::RedisServer() : port_(FreePort()) { Start(); }
RedisServer::~RedisServer() { Stop(); }

void RedisServer::Start() {
  process_ = std::make_unique<Process>(
      std::vector<std::string>{"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind",
                               "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                               dir_.path().string(), "--daemonize", "no", "--loglevel", "warning"});
  if (!WaitForPort(port_)) throw std::runtime_error("redis-server did not start");
}

void RedisServer::Stop() { StopProcess(&process_); }

std::string RedisServer::url(const std::string& query) const {
  return "redis://127.0.0.1:" + std::to_string(port_) + (query.empty() ? "" : "?" + query);
}

S3Server::S3Server() : port_(FreePort()) { Start(); }
S3Server::~S3Server() { Stop(); }

void S3Server::Start() {
  process_ = std::make_unique<Process>(std::vector<std::string>{
      "/usr/bin/env", "node", SEEDD_SOURCE_DIR "/tools/s3rver/node_modules/s3rver/bin/s3rver.js",
      "-d", dir_.path().string(), "-a", "127.0.0.1", "-p", std::to_string(port_), "-s",
      "--configure-bucket", kBucket});
  if (!WaitForPort(port_)) throw std::runtime_error("s3rver did not start");
}

void S3Server::Stop() { StopProcess(&process_); }

std::string S3Server::url(const std::string& prefix) const {
  return std::string("s3://") + kBucket + (prefix.empty() ? "" : "/" + prefix) +
         "?endpoint=" + endpoint() + "&region=us-east-1";
}

}  // namespace seedd::testing

namespace seedd::testing {

namespace {
// The bcrypt hash of "seedd-test-password" (the registry's htpasswd needs bcrypt;
// the least cost, so that each request checks it quickly).
constexpr const char* kTestPasswordHash =
    "$2b$05$RrXrCiEecNlWcwcby65hQeW5Rl5Yuztfw0MoFxpH7o63XnzEdDoO2";
}  // namespace

OciRegistryServer::OciRegistryServer(Auth auth) : port_(FreePort()) {
  namespace fs = std::filesystem;
  std::ofstream config(dir_.path() / "config.yml");
  config << "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: "
         << (dir_.path() / "data").string() << "\nhttp:\n  addr: 127.0.0.1:" << port_ << "\n";
  if (auth == Auth::kBasicOverTls) {
    std::string error;
    if (!MakeTestPki(dir_.path() / "pki", &error)) throw std::runtime_error(error);
    fs::copy_file(dir_.path() / "pki" / "ca.crt", ca_file());
    std::ofstream(dir_.path() / "htpasswd") << "seedd:" << kTestPasswordHash << "\n";
    config << "  tls:\n    certificate: " << (dir_.path() / "pki" / "server.crt").string()
           << "\n    key: " << (dir_.path() / "pki" / "server.key").string()
           << "\nauth:\n  htpasswd:\n    realm: seedd-test\n    path: "
           << (dir_.path() / "htpasswd").string() << "\n";
  } else if (auth == Auth::kToken) {
    const fs::path key = dir_.path() / "token.key";
    const fs::path cert = dir_.path() / "token.crt";
    RunResult made = RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048",
                                 "-nodes", "-keyout", key.string(), "-out", cert.string(), "-days",
                                 "2", "-subj", "/CN=seedd-test-token"});
    if (made.status != 0) throw std::runtime_error("openssl: " + made.err);
    const uint16_t token_port = FreePort();
    token_service_ = std::make_unique<Process>(std::vector<std::string>{
        "/usr/bin/python3", SEEDD_SOURCE_DIR "/tests/support/token_server.py",
        std::to_string(token_port), key.string(), cert.string(), "seedd-test-issuer",
        "seedd-test-registry", token_log().string(), "seedd:seedd-test-password"});
    if (!WaitForPort(token_port)) throw std::runtime_error("the token service did not start");
    config << "auth:\n  token:\n    realm: http://127.0.0.1:" << token_port
           << "/token\n    service: seedd-test-registry\n    issuer: seedd-test-issuer\n"
           << "    rootcertbundle: " << cert.string() << "\n";
  }
  config.close();
  process_ = std::make_unique<Process>(std::vector<std::string>{
      "/usr/bin/docker-registry", "serve", (dir_.path() / "config.yml").string()});
  if (!WaitForPort(port_)) throw std::runtime_error("docker-registry did not start");
}

OciRegistryServer::~OciRegistryServer() {
  StopProcess(&process_);
  StopProcess(&token_service_);
}

std::filesystem::path OciRegistryServer::BlobData(const std::string& digest) const {
  const std::string hex = digest.substr(digest.find(':') + 1);
  return dir_.path() / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" /
         hex.substr(0, 2) / hex / "data";
}

std::string PushModelPack(const std::filesystem::path& layout, const std::string& dest,
                          const std::map<std::string, std::string>& files,
                          const std::vector<std::string>& skopeo_flags) {
  namespace fs = std::filesystem;
  fs::create_directories(layout / "blobs" / "sha256");
  auto blob = [&](const std::string& bytes) {
    const std::string hex = Sha256Hex(bytes);
    std::ofstream(layout / "blobs" / "sha256" / hex, std::ios::binary) << bytes;
    return Json{{"digest", "sha256:" + hex}, {"size", bytes.size()}};
  };
  Json layers = Json::array();
  Json diff_ids = Json::array();
  for (const auto& [path, bytes] : files) {
    Json l = blob(bytes);
    l["mediaType"] = "application/vnd.cncf.model.weight.v1.raw";
    l["annotations"] = {{"org.cncf.model.filepath", path}};
    diff_ids.push_back(l["digest"]);
    layers.push_back(l);
  }
  Json config = blob(Json{{"descriptor", {{"name", "test"}}},
                          {"modelfs", {{"type", "layers"}, {"diffIds", diff_ids}}}}
                         .dump());
  config["mediaType"] = "application/vnd.cncf.model.config.v1+json";
  const std::string manifest = Json{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"artifactType", "application/vnd.cncf.model.manifest.v1+json"},
      {"config", config},
      {"layers", layers}}.dump();
  Json m = blob(manifest);
  m["mediaType"] = "application/vnd.oci.image.manifest.v1+json";
  m["annotations"] = {{"org.opencontainers.image.ref.name", "latest"}};
  std::ofstream(layout / "oci-layout") << R"({"imageLayoutVersion":"1.0.0"})";
  std::ofstream(layout / "index.json") << Json{{"schemaVersion", 2}, {"manifests", {m}}}.dump();
  std::vector<std::string> argv = {"/usr/bin/skopeo", "copy", "-q"};
  argv.insert(argv.end(), skopeo_flags.begin(), skopeo_flags.end());
  argv.push_back("oci:" + layout.string() + ":latest");
  argv.push_back(dest);
  RunResult r = RunCommand(argv);
  if (r.status != 0) throw std::runtime_error("skopeo copy to " + dest + ": " + r.err);
  return m["digest"];
}

}  // namespace seedd::testing
