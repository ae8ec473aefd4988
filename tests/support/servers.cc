#include "support/servers.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <stdexcept>
#include <thread>

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
