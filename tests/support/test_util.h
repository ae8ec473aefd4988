// Helpers shared by the tests: temporary directories, a capturing log sink,
// polling with a deadline, and raw protocol sockets.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "seedd/json.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"

namespace seedd::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct LogLine {
  spdlog::level::level_enum level;
  std::string text;
};

// Attaches itself to the seedd logger for its lifetime and records every line.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::vector<LogLine> lines() const;
  // True when some line at `level` contains `text`.
  bool Contains(spdlog::level::level_enum level, const std::string& text) const;
  std::string Dump() const;

 private:
  class Sink;
  std::shared_ptr<Sink> sink_;
  spdlog::level::level_enum old_level_;
};

// EXPECT_OK(expr) / ASSERT_OK(expr): expr (a Status or a Result) is ok; a
// failure prints the Status.
inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}
template <typename T>
::testing::AssertionResult IsOk(const char* text, const T& value) {
  const Status& s = StatusOf(value);
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text << " is " << s.ToString();
}
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::seedd::testing::IsOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::seedd::testing::IsOk, expr)

// Polls `pred` every millisecond until true or `timeout` passes.
bool WaitUntil(const std::function<bool()>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(10));

// A listening TCP socket on 127.0.0.1 at a free port (stored in *port).
UniqueFd ListenLoopback(uint16_t* port);
// A loopback port bound but not listening, held while the descriptor lives:
// connections to it are refused, and no other test can take it meanwhile (a
// port closed after use can be).
UniqueFd RefusingPort(uint16_t* port);
// A loopback port that listens and never accepts, its accept queue full: a
// connect to it gets no answer (its SYNs are dropped) until it times out, as
// to a host whose answers are lost. port() is 0 if it could not be made.
class DeafPort {
 public:
  DeafPort();
  uint16_t port() const { return port_; }

 private:
  UniqueFd listener_;
  std::vector<UniqueFd> queued_;  // the connections that fill its queue
  uint16_t port_ = 0;
};

// A blocking TCP connection to `peer` (no timeouts: tests bound themselves).
UniqueFd ConnectRaw(const HostPort& peer);
// The same from the IPv4 address `source` (any of 127.0.0.0/8 on loopback),
// with SO_RCVBUF set first when receive_buffer > 0 (a peer that reads nothing
// then fills its window at once).
UniqueFd ConnectFrom(const std::string& source, const HostPort& peer, int receive_buffer = 0);
// Opens connections from `source` to `peer` that send nothing, up to `count`
// held at once, reopening any the peer closes, until `stop`.
void HoldIdleConnections(const std::string& source, const HostPort& peer, size_t count,
                         const std::atomic<bool>& stop);
// With the openssl CLI, in `dir`: two CAs (ca, other-ca) and certificates for
// 127.0.0.1 and localhost: server (from ca, 30 days), expired (from ca, ended a
// day ago), stranger (from other-ca), client (from ca, for client auth); each
// NAME.crt with NAME.key. False (and `*error`) when openssl failed.
bool MakeTestPki(const std::filesystem::path& dir, std::string* error);
// With the openssl CLI, in `dir`: an Ed25519 key pair per name, NAME.pem (the
// private key, for --sign-key) and NAME.pub.pem (for --trust-key).
bool MakeSigningKeys(const std::filesystem::path& dir, const std::vector<std::string>& names,
                     std::string* error);
void SendAll(int fd, const std::string& bytes);
// Reads until EOF or error; returns everything received.
std::string ReadToEof(int fd);
// Reads one response frame and parses it; a JSON null if the stream ended
// first or no whole frame came within `wait` (on a blocking socket, a recv
// waits for its SO_RCVTIMEO before the deadline is looked at).
Json ReadResponse(int fd, std::chrono::milliseconds wait = std::chrono::seconds(30));
// 8-byte big-endian length header for n.
std::string Header(uint64_t n);

}  // namespace seedd::testing
