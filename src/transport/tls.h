// TLS internals: the OpenSSL contexts behind seedd::TlsContext (built in
// tls_context.cc), and Conn, a connected socket that is plain or TLS, every call
// bounded by a deadline for the whole call. A plain Conn is a blocking socket
// (its send and receive timeouts, as records.h arms them); a TLS Conn makes its
// socket non-blocking and waits in poll, so that a peer sending a byte at a time
// cannot stretch a record, a handshake or a send past the deadline.
// The data plane and the clients read and write through a Conn; a plain Conn
// sends files with sendfile, a TLS one reads them into a buffer and encrypts
// (kernel TLS, where the kernel offers it, is OpenSSL's to use: SSL_sendfile).
//
// Thread safety: a Conn is used by one thread at a time.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
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

  // The server side of a TLS handshake on `fd` (not owned), by `deadline`.
  static Result<std::unique_ptr<Conn>> Accept(int fd, const TlsContext& tls,
                                              Clock::time_point deadline);

  // The same a step at a time, for a driver that waits on many sockets itself:
  // BeginAccept makes the session (no I/O), then AcceptStep until kDone, waiting
  // for the socket to be readable (kWantRead) or writable (kWantWrite) in
  // between; ReadStep reads what a step can. kFailed says why in *why.
  enum class Step { kDone, kWantRead, kWantWrite, kFailed };
  static Result<std::unique_ptr<Conn>> BeginAccept(int fd, const TlsContext& tls);
  Step AcceptStep(std::string* why);
  // Up to `n` bytes into `p` (*got of them) when kDone.
  Step ReadStep(char* p, size_t n, size_t* got, std::string* why);
  // The client side, verifying the server's certificate against the CA and
  // `host` (or the context's server_name), by `deadline`. With `cancel` (which
  // must outlive the Conn), the handshake and every later wait end within about
  // 50 ms of it being set.
  static Result<std::unique_ptr<Conn>> Connect(int fd, const TlsContext& tls,
                                               const std::string& host, Clock::time_point deadline,
                                               const std::atomic<bool>* cancel = nullptr);

  int fd() const { return fd_; }
  // Whether the `cancel` given to Connect is set.
  bool cancelled() const { return cancel_ != nullptr && cancel_->load(); }
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
  // TLS: 32 bytes both ends derive from the session under `label` (RFC 5705),
  // hex; empty for a plain connection.
  std::string ExportedKey(const std::string& label) const;
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
  const std::atomic<bool>* cancel_ = nullptr;
  void NoteError(int ret);
  Step Stepped(int ret, std::string* why);
};

// The first bytes of a TLS ClientHello: a record of type handshake (0x16), version 3.x.
inline bool LooksLikeTls(const char* p, size_t n) {
  return n >= 2 && static_cast<unsigned char>(p[0]) == 0x16 && p[1] == 0x03;
}

// Reads one frame's body (at most `max_bytes`) from `conn` by `deadline`.
Result<std::string> ReadFrameBody(Conn& conn, uint64_t max_bytes,
                                  std::chrono::steady_clock::time_point deadline);

}  // namespace seedd
