// TLS internals: the OpenSSL contexts behind seedd::TlsContext (built in
// tls_context.cc), and Conn, a connected blocking socket that is plain or TLS,
// every call bounded by a deadline (the socket's send and receive timeouts, as
// records.h arms them).
// The data plane and the clients read and write through a Conn; a plain Conn
// sends files with sendfile, a TLS one reads them into a buffer and encrypts
// (kernel TLS, where the kernel offers it, is OpenSSL's to use: SSL_sendfile).
//
// Thread safety: a Conn is used by one thread at a time.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedd {

// OpenSSL's queued errors as one line, the queue emptied.
std::string SslErrors();

struct TlsContext::Rep {
  ~Rep();
  SSL_CTX* server = nullptr;  // null without a certificate
  SSL_CTX* client = nullptr;  // null without a CA
};

class Conn {
 public:
  using Clock = std::chrono::steady_clock;
  // A plain connection on `fd` (not owned).
  explicit Conn(int fd);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // The server side of a TLS handshake on blocking `fd` (not owned), by `deadline`.
  static Result<std::unique_ptr<Conn>> Accept(int fd, const TlsContext& tls,
                                              Clock::time_point deadline);
  // The client side, verifying the server's certificate against the CA and
  // `host` (or the context's server_name), by `deadline`.
  static Result<std::unique_ptr<Conn>> Connect(int fd, const TlsContext& tls,
                                               const std::string& host, Clock::time_point deadline);

  int fd() const { return fd_; }
  bool tls() const { return ssl_ != nullptr; }

  bool SendAllBy(const char* p, size_t n, Clock::time_point deadline);
  Status RecvAllBy(char* p, size_t n, Clock::time_point deadline);
  // Waits up to `wait` for bytes and reads what is there (at most n): the count,
  // 0 when none came in time, -1 when the peer closed or failed.
  long RecvSome(char* p, size_t n, std::chrono::milliseconds wait);
  // Sends `n` bytes of `file` from `offset` by `deadline`; `sent` is told each
  // piece's size as it goes.
  bool SendFileBy(int file, off_t offset, uint64_t n, Clock::time_point deadline,
                  const std::function<void(uint64_t)>& sent);
  // TLS: tells the peer the connection ends (close_notify), best effort.
  void Shutdown();
  // Why the last call failed, when TLS said (an alert from the peer: "the peer
  // requires a client certificate"); empty otherwise.
  const std::string& error() const { return error_; }

 private:
  Conn(int fd, SSL* ssl, std::shared_ptr<TlsContext::Rep> ctx);
  int fd_;
  SSL* ssl_ = nullptr;
  std::shared_ptr<TlsContext::Rep> ctx_;  // keeps the context of this session alive
  std::string error_;
  void NoteError(int ret);
};

// The first bytes of a TLS ClientHello: a record of type handshake (0x16), version 3.x.
inline bool LooksLikeTls(const char* p, size_t n) {
  return n >= 2 && static_cast<unsigned char>(p[0]) == 0x16 && p[1] == 0x03;
}

// Reads one frame's body (at most `max_bytes`) from `conn` by `deadline`.
Result<std::string> ReadFrameBody(Conn& conn, uint64_t max_bytes,
                                  std::chrono::steady_clock::time_point deadline);

}  // namespace seedd
