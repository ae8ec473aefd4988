#include "transport/tls.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/errno_status.h"
#include "seedd/logging.h"
#include "transport/socket_io.h"
#include "wire/frame.h"

namespace seedd {
namespace {

// OpenSSL writes to the socket with write(), which raises SIGPIPE when the peer
// has gone (send() with MSG_NOSIGNAL, as the plain paths use, cannot be asked
// for). While one lives, SIGPIPE is blocked on this thread; one raised
// meanwhile is drained, and the call sees EPIPE.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (!was_pending_) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

int MillisLeft(Conn::Clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - Conn::Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// SSL_get_error reads the calling thread's error queue: an error an earlier
// connection left there makes a mere WANT_READ look fatal (a stream thread
// then closed a healthy connection, found by bench/weights.sh over TLS). Every
// SSL call starts with the queue empty.
void FreshErrorQueue() { ERR_clear_error(); }

// After an SSL call on a non-blocking socket returned `ret`: waits until the
// socket can do what the call wants (*error, SSL_get_error's verdict), by
// `deadline`. False when the call failed for good or the deadline passed: the
// deadline bounds the whole operation, whatever the peer sends meanwhile.
bool WaitForSsl(SSL* ssl, int ret, int fd, Conn::Clock::time_point deadline, int* error,
                const std::atomic<bool>* cancel = nullptr) {
  *error = SSL_get_error(ssl, ret);
  short events = 0;
  if (*error == SSL_ERROR_WANT_READ) {
    events = POLLIN;
  } else if (*error == SSL_ERROR_WANT_WRITE) {
    events = POLLOUT;
  } else if (*error == SSL_ERROR_SYSCALL && errno == EINTR) {
    return Conn::Clock::now() < deadline;
  } else {
    return false;
  }
  for (;;) {
    int ms = MillisLeft(deadline);
    if (ms == 0) {
      errno = EAGAIN;  // HandshakeError says "timed out"
      return false;
    }
    if (cancel != nullptr) {
      if (cancel->load()) {
        errno = ECANCELED;
        return false;
      }
      ms = std::min(ms, 50);
    }
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, ms);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// Why a handshake failed, for people: the certificate check's verdict when there
// is one, a peer that does not speak TLS, or OpenSSL's reasons.
std::string HandshakeError(SSL* ssl, int error, bool client) {
  std::string errors = SslErrors();
  const long verify = SSL_get_verify_result(ssl);
  if (client && verify != X509_V_OK) {
    return std::string("the peer's certificate was refused: ") +
           X509_verify_cert_error_string(verify) +
           " (check --tls-ca, the certificate's names "
           "and dates, or --tls-server-name)";
  }
  if (errors.find("wrong version number") != std::string::npos ||
      errors.find("packet length too long") != std::string::npos ||
      errors.find("record layer failure") != std::string::npos) {
    return client ? "the peer does not speak TLS (a plain seedd? use its TLS port, or no "
                    "--tls-ca for a plain one)"
                  : "the peer did not start TLS";
  }
  if (errors.find("certificate required") != std::string::npos) {
    return "the peer requires a client certificate (--tls-cert and --tls-key)";
  }
  if (errors.find("peer did not return a certificate") != std::string::npos) {
    return "the client sent no certificate, and this daemon requires one (--tls-client-auth)";
  }
  if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN) {
    return errno == EAGAIN ? "timed out" : "the peer closed the connection (" + errors + ")";
  }
  return errors;
}

}  // namespace

Conn::Conn(int fd) : fd_(fd) {}

void Conn::NoteError(int ret) {
  const int error = SSL_get_error(ssl_, ret);
  if (error == SSL_ERROR_SSL || ERR_peek_error() != 0) error_ = HandshakeError(ssl_, error, false);
}

Conn::Conn(int fd, SSL* ssl, std::shared_ptr<TlsContext::Rep> ctx)
    : fd_(fd), ssl_(ssl), ctx_(std::move(ctx)) {
  // Every TLS call returns at once; the deadlines are kept by waiting in poll.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

Conn::~Conn() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

Result<std::unique_ptr<Conn>> Conn::BeginAccept(int fd, const TlsContext& tls) {
  std::shared_ptr<TlsContext::Rep> rep = tls.rep();
  if (rep == nullptr || rep->server == nullptr) {
    return Status::FailedPrecondition("no server certificate");
  }
  ERR_clear_error();
  SSL* ssl = SSL_new(rep->server);
  if (ssl == nullptr) return Status::Internal("SSL_new: " + SslErrors());
  auto conn = std::unique_ptr<Conn>(new Conn(fd, ssl, rep));
  SSL_set_fd(ssl, fd);
  return conn;
}

Conn::Step Conn::Stepped(int ret, std::string* why) {
  const int error = SSL_get_error(ssl_, ret);
  if (error == SSL_ERROR_WANT_READ) return Step::kWantRead;
  if (error == SSL_ERROR_WANT_WRITE) return Step::kWantWrite;
  if (error == SSL_ERROR_SYSCALL && errno == EINTR) return Step::kWantRead;
  if (why != nullptr) *why = HandshakeError(ssl_, error, false);
  return Step::kFailed;
}

Conn::Step Conn::AcceptStep(std::string* why) {
  NoSigpipe guard;
  FreshErrorQueue();
  const int r = SSL_accept(ssl_);
  return r == 1 ? Step::kDone : Stepped(r, why);
}

Conn::Step Conn::ReadStep(char* p, size_t n, size_t* got, std::string* why) {
  NoSigpipe guard;
  *got = 0;
  FreshErrorQueue();
  const int r = SSL_read_ex(ssl_, p, n, got);
  if (r == 1) return Step::kDone;
  const Step step = Stepped(r, why);
  if (step == Step::kFailed && why != nullptr && why->empty()) *why = "connection lost";
  return step;
}

Result<std::unique_ptr<Conn>> Conn::Accept(int fd, const TlsContext& tls,
                                           Clock::time_point deadline) {
  Result<std::unique_ptr<Conn>> conn = BeginAccept(fd, tls);
  if (!conn.ok()) return conn.status();
  SSL* ssl = (*conn)->ssl_;
  NoSigpipe guard;
  for (;;) {
    FreshErrorQueue();
    const int r = SSL_accept(ssl);
    if (r == 1) break;
    int error = 0;
    if (WaitForSsl(ssl, r, fd, deadline, &error)) continue;
    return Status::Unavailable("TLS handshake: " + HandshakeError(ssl, error, false));
  }
  return conn;
}

Result<std::unique_ptr<Conn>> Conn::Connect(int fd, const TlsContext& tls, const std::string& host,
                                            Clock::time_point deadline,
                                            const std::atomic<bool>* cancel) {
  std::shared_ptr<TlsContext::Rep> rep = tls.rep();
  if (rep == nullptr || rep->client == nullptr) {
    return Status::FailedPrecondition("no CA to verify peers with (--tls-ca)");
  }
  ERR_clear_error();
  SSL* ssl = SSL_new(rep->client);
  if (ssl == nullptr) return Status::Internal("SSL_new: " + SslErrors());
  auto conn = std::unique_ptr<Conn>(new Conn(fd, ssl, rep));
  SSL_set_fd(ssl, fd);
  const std::string& name = tls.options().server_name.empty() ? host : tls.options().server_name;
  // An IP address is checked against the certificate's IP names, a host name
  // against its DNS names; SNI only for host names.
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(name.c_str());
  if (ip != nullptr) {
    ASN1_OCTET_STRING_free(ip);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name.c_str());
    SSL_set1_host(ssl, name.c_str());
  }
  NoSigpipe guard;
  for (;;) {
    FreshErrorQueue();
    const int r = SSL_connect(ssl);
    if (r == 1) break;
    int error = 0;
    if (WaitForSsl(ssl, r, fd, deadline, &error, cancel)) continue;
    if (errno == ECANCELED) return Status::Cancelled("stopped during the TLS handshake");
    return Status::Unavailable("TLS handshake: " + HandshakeError(ssl, error, true));
  }
  conn->cancel_ = cancel;
  return conn;
}

bool Conn::SendAllBy(const char* p, size_t n, Clock::time_point deadline) {
  if (ssl_ == nullptr) return seedd::SendAllBy(fd_, p, n, deadline);
  NoSigpipe guard;
  while (n > 0) {
    size_t wrote = 0;
    FreshErrorQueue();
    const int r = SSL_write_ex(ssl_, p, n, &wrote);
    if (r == 1) {
      p += wrote;
      n -= wrote;
      continue;
    }
    int error = 0;
    if (!WaitForSsl(ssl_, r, fd_, deadline, &error, cancel_)) {
      NoteError(r);
      return false;
    }
  }
  return true;
}

Status Conn::RecvAllBy(char* p, size_t n, Clock::time_point deadline) {
  if (ssl_ == nullptr) return seedd::RecvAllBy(fd_, p, n, deadline);
  NoSigpipe guard;
  while (n > 0) {
    size_t got = 0;
    FreshErrorQueue();
    const int r = SSL_read_ex(ssl_, p, n, &got);
    if (r == 1) {
      p += got;
      n -= got;
      continue;
    }
    int error = 0;
    if (WaitForSsl(ssl_, r, fd_, deadline, &error, cancel_)) continue;
    if (error == SSL_ERROR_ZERO_RETURN) {
      return Status::Unavailable("the source closed the data connection");
    }
    if (cancel_ != nullptr && cancel_->load()) return Status::Cancelled("stopped");
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE ||
        (error == SSL_ERROR_SYSCALL && errno == EINTR)) {
      return Status::DeadlineExceeded("the source sent too slowly (" + std::to_string(n) +
                                      " bytes still missing at the deadline)");
    }
    NoteError(r);
    return Status::Unavailable("TLS: " +
                               (error_.empty() ? std::string("connection lost") : error_));
  }
  return Status::Ok();
}

long Conn::RecvSome(char* p, size_t n, std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  if (ssl_ == nullptr) {
    // What has arrived already (requests sent together) is taken without a poll.
    const ssize_t now = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (now > 0) return now;
    if (now == 0 && n > 0) return -1;  // the peer closed
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(wait.count()));
    if (ready == 0) return 0;
    if (ready < 0) return errno == EINTR ? 0 : -1;
    const ssize_t r = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    return r <= 0 ? -1 : r;
  }
  NoSigpipe guard;
  for (;;) {
    size_t got = 0;
    FreshErrorQueue();
    const int r = SSL_read_ex(ssl_, p, n, &got);
    if (r == 1) return static_cast<long>(got);
    int error = 0;
    if (WaitForSsl(ssl_, r, fd_, deadline, &error, cancel_)) continue;
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE ||
        (error == SSL_ERROR_SYSCALL && errno == EINTR)) {
      return 0;  // nothing whole by the deadline
    }
    NoteError(r);
    return -1;
  }
}

bool Conn::SendFileBy(int file, off_t offset, uint64_t n, Clock::time_point deadline,
                      const std::function<void(uint64_t)>& sent) {
  if (ssl_ == nullptr) {
    while (n > 0) {  // straight from the page cache to the socket
      if (!ArmSendTimeout(fd_, deadline)) return false;
      ssize_t w = ::sendfile(fd_, file, &offset, std::min<uint64_t>(n, 1ull << 30));
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (w <= 0) return false;
      n -= static_cast<uint64_t>(w);
      sent(static_cast<uint64_t>(w));
    }
    return true;
  }
  if (BIO_get_ktls_send(SSL_get_wbio(ssl_))) {
    NoSigpipe guard;
    while (n > 0) {  // kernel TLS: encrypted by the kernel from the page cache
      FreshErrorQueue();
      ossl_ssize_t w = SSL_sendfile(ssl_, file, offset, std::min<uint64_t>(n, 1ull << 30), 0);
      if (w <= 0) {
        int error = 0;
        if (WaitForSsl(ssl_, static_cast<int>(w), fd_, deadline, &error, cancel_)) continue;
        return false;
      }
      offset += w;
      n -= static_cast<uint64_t>(w);
      sent(static_cast<uint64_t>(w));
    }
    return true;
  }
  thread_local std::vector<char> buf(256 * 1024);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    ssize_t r = ::pread(file, buf.data(), want, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (!SendAllBy(buf.data(), static_cast<size_t>(r), deadline)) return false;
    offset += r;
    n -= static_cast<uint64_t>(r);
    sent(static_cast<uint64_t>(r));
  }
  return true;
}

std::string Conn::ExportedKey(const std::string& label) const {
  if (ssl_ == nullptr) return "";
  unsigned char out[32];
  if (SSL_export_keying_material(ssl_, out, sizeof(out), label.data(), label.size(), nullptr, 0,
                                 0) != 1) {
    return "";
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : out) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

void Conn::Shutdown() {
  if (ssl_ == nullptr) return;
  NoSigpipe guard;
  FreshErrorQueue();
  SSL_shutdown(ssl_);  // once, without waiting: the socket does not block
  FreshErrorQueue();   // a peer gone already is not the next call's error
}

Result<std::string> ReadFrameBody(Conn& conn, uint64_t max_bytes,
                                  std::chrono::steady_clock::time_point deadline) {
  FrameReader reader(max_bytes);
  std::array<char, 16 * 1024> buf;
  while (!reader.done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::DeadlineExceeded("no whole response in time");
    if (conn.cancelled()) return Status::Cancelled("stopped waiting for the response");
    const long n = conn.RecvSome(buf.data(), buf.size(), left);
    if (n < 0 && !conn.error().empty()) return Status::Unavailable(conn.error());
    if (n < 0) return reader.EndOfStreamError();
    if (n == 0) continue;
    reader.Feed(std::string_view(buf.data(), static_cast<size_t>(n)));
    if (reader.failed()) return reader.error();
  }
  return std::move(reader.body());
}

}  // namespace seedd
