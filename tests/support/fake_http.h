// A scripted HTTP server on loopback: answers each request with the next canned
// response (the last one repeats), counts the requests and keeps their request
// lines ("METHOD TARGET HTTP/1.1").
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace seedd::testing {

class FakeHttpServer {
 public:
  explicit FakeHttpServer(std::vector<std::string> responses);
  ~FakeHttpServer();
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }
  std::vector<std::string> request_lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  // "HTTP/1.1 <status>" with a body and Content-Length.
  static std::string Response(int status, const std::string& reason, const std::string& body);

 private:
  void Serve();
  std::vector<std::string> responses_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace seedd::testing
