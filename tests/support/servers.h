// Real servers for the store tests: redis-server and s3rver (Node.js), each on a
// free loopback port in a temporary directory, stopped on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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

 private:
  TempDir dir_;
  uint16_t port_;
  std::unique_ptr<Process> process_;
};

}  // namespace seedd::testing
