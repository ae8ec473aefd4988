// The TLS listener's sessions. Admission: at most MaxPendingTls() connections
// between accept and authentication; a newcomer past that takes the place of one
// from the host holding the most, or else of the oldest. Then the handshake and
// the request on the handshake thread, which waits on every such socket at once
// (no thread is held by a peer that sends slowly), the whole of both within
// request_timeout; then the answer, or the data plane, on a stream thread.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "seedd/json_text.h"
#include "transport/data_auth.h"
#include "transport/exchange.h"
#include "transport/server_rep.h"
#include "transport/socket_io.h"
#include "transport/tls.h"
#include "wire/frame.h"

namespace seedd {

using asio::ip::tcp;
using std::chrono::milliseconds;
using Step = Conn::Step;

namespace {

// How long a connection we end is read and dropped, so that what we sent last
// (an alert, an error frame) reaches the peer before a reset could discard it.
constexpr milliseconds kLinger{200};

}  // namespace

// One TLS connection from its admission to its end. What it holds (its place
// among the pending handshakes, the peer's limits, the socket) is given back
// when its last owner lets go: the handshake thread's waits, then the stream
// thread it was handed to.
struct SeedServer::Rep::TlsSession {
  TlsSession(Rep* r, int f, std::string p, uint64_t i)
      : rep(r), fd(f), peer(std::move(p)), id(i), waiter(r->tls_io), timer(r->tls_io) {
    metrics::ConnectionOpened(metrics::Plane::kControl);
  }
  ~TlsSession() {
    rep->EndPendingTls(id);  // before the close: an eviction never meets a reused fd
    if (!authenticated) rep->limits.Released(peer);
    if (streaming) rep->limits.StreamEnded(peer);
    {
      MutexLock lock(rep->streams_mu);
      rep->stream_fds.erase(fd);
    }
    if (waiter.is_open()) waiter.release();
    conn.reset();
    ::close(fd);
    --rep->tls_open;
    metrics::ConnectionClosed(metrics::Plane::kControl);
  }
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  Rep* rep;
  const int fd;
  const std::string peer;
  const uint64_t id;
  asio::posix::stream_descriptor waiter;  // waits on fd; never reads, writes or closes it
  asio::steady_timer timer;               // the deadline, then the linger
  std::unique_ptr<Conn> conn;
  FrameReader reader{kMaxRemoteRequestBytes};
  bool authenticated = false;
  bool streaming = false;
  bool handshaken = false;
  bool over = false;
  // The request's exchange (made once the session binding is known), and its
  // decision, carried out on a stream thread.
  std::optional<ControlExchange> exchange;
  ControlExchange::Step step;
};

uint64_t SeedServer::Rep::AdmitTls(const std::string& peer, int fd) {
  MutexLock lock(tls_mu);
  if (tls_pending.size() >= MaxPendingTls()) {
    std::map<std::string, size_t> per_peer;
    for (const auto& [id, p] : tls_pending) ++per_peer[p.peer];
    auto heaviest =
        std::max_element(per_peer.begin(), per_peer.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    // From the host holding the most, when it holds more than the newcomer's
    // would; else the oldest: a handshake takes milliseconds, so the oldest is
    // the likeliest to be held open on purpose, and many hosts holding one each
    // cannot keep a newcomer out.
    auto victim = tls_pending.begin();
    if (heaviest->second > per_peer[peer] + 1) {
      while (victim->second.peer != heaviest->first) ++victim;
    }
    ::shutdown(victim->second.fd, SHUT_RDWR);  // its session sees the end and ends
    tls_evictions.Warn(
        "Closed a TLS handshake from {} to make room for {}: {} connections were in TLS "
        "handshakes, the limit",
        victim->second.peer, peer, MaxPendingTls());
    metrics::ConnectionRefused("tls_handshakes_evicted");
    tls_pending.erase(victim);
  }
  const uint64_t id = ++tls_next_id;
  tls_pending.emplace(id, PendingTls{peer, fd});
  return id;
}

void SeedServer::Rep::EndPendingTls(uint64_t id) {
  MutexLock lock(tls_mu);
  tls_pending.erase(id);
}

void SeedServer::Rep::ServeTls(tcp::socket socket, const std::string& peer) {
  asio::error_code ec;
  const int fd = socket.release(ec);
  if (ec) {
    limits.Released(peer);
    return;
  }
  const uint64_t id = AdmitTls(peer, fd);
  ++tls_open;
  auto session = std::make_shared<TlsSession>(this, fd, peer, id);
  {
    MutexLock lock(streams_mu);
    if (streams_closing) return;
    stream_fds.insert(fd);
  }
  asio::post(tls_io, [this, session] { BeginTls(session); });
}

void SeedServer::Rep::BeginTls(const std::shared_ptr<TlsSession>& s) {
  asio::error_code ec;
  s->waiter.assign(s->fd, ec);
  if (ec || tls_closing) return;
  tls_handshaking.emplace(s->id, s);
  s->timer.expires_after(options.request_timeout);
  s->timer.async_wait([this, s](const asio::error_code& e) {
    if (e || s->over) return;
    tls_failures.Warn("Closed a TLS connection from {}: no whole request within {} s", s->peer,
                      Seconds(options.request_timeout));
    metrics::ConnectionRefused("tls_deadline");
    if (!s->handshaken) return EndTls(*s);
    AnswerAndLinger(s, ErrorResponse("Timed out after " + Seconds(options.request_timeout) +
                                     " s reading the request"));
  });
  PeekTls(s);
}

void SeedServer::Rep::WaitTls(const std::shared_ptr<TlsSession>& s, Step want, TlsStepFn next) {
  const auto w = want == Step::kWantWrite ? asio::posix::stream_descriptor::wait_write
                                          : asio::posix::stream_descriptor::wait_read;
  s->waiter.async_wait(w, [this, s, next](const asio::error_code& e) {
    if (e || s->over) return;
    (this->*next)(s);
  });
}

void SeedServer::Rep::EndTls(TlsSession& s) {
  s.over = true;
  tls_handshaking.erase(s.id);
  asio::error_code ignored;
  s.waiter.cancel(ignored);
  s.timer.cancel();
}

void SeedServer::Rep::LingerTls(const std::shared_ptr<TlsSession>& s) {
  ::shutdown(s->fd, SHUT_WR);
  EndTls(*s);
  s->over = false;
  s->timer.expires_after(kLinger);
  s->timer.async_wait([this, s](const asio::error_code&) { EndTls(*s); });
  DrainTls(s);
}

void SeedServer::Rep::DrainTls(const std::shared_ptr<TlsSession>& s) {
  char sink[4096];
  ssize_t n;
  while ((n = ::recv(s->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) return EndTls(*s);
  WaitTls(s, Step::kWantRead, &Rep::DrainTls);
}

void SeedServer::Rep::AnswerAndLinger(const std::shared_ptr<TlsSession>& s, const Json& response) {
  AnswerAndLinger(s, EncodeJsonFrame(response));
}

void SeedServer::Rep::AnswerAndLinger(const std::shared_ptr<TlsSession>& s,
                                      const std::string& frame) {
  // What the socket takes now: the frame is small, and nobody waits for a peer
  // that does not read.
  s->conn->SendAllBy(frame.data(), frame.size(), std::chrono::steady_clock::now());
  s->conn->Shutdown();
  LingerTls(s);
}

void SeedServer::Rep::PeekTls(const std::shared_ptr<TlsSession>& s) {
  // A plain client (its frame starts with a zero byte) is told, in plain words.
  char first = 0;
  const ssize_t peeked = ::recv(s->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked < 0 && (errno == EAGAIN || errno == EINTR)) {
    return WaitTls(s, Step::kWantRead, &Rep::PeekTls);
  }
  if (peeked <= 0) return EndTls(*s);
  if (first != 0x16) {
    tls_failures.Warn(
        "A plain client connected from {} to this TLS port: it needs --tls-ca (seedctl, seedd), "
        "or a plain listener (--listen-plain)",
        s->peer);
    metrics::ConnectionRefused("plain_on_tls_port");
    const std::string frame = EncodeJsonFrame(ErrorResponse(
        "this port speaks TLS: connect with TLS (--tls-ca), or to the daemon's plain port"));
    (void)!::send(s->fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return LingerTls(s);
  }
  Result<std::unique_ptr<Conn>> conn = Conn::BeginAccept(s->fd, *options.tls);
  if (!conn.ok()) {
    tls_failures.Warn("TLS handshake with {} failed: {}", s->peer, conn.status().message());
    return EndTls(*s);
  }
  s->conn = std::move(*conn);
  HandshakeTls(s);
}

void SeedServer::Rep::HandshakeTls(const std::shared_ptr<TlsSession>& s) {
  std::string why;
  const Step step = s->conn->AcceptStep(&why);
  if (step == Step::kDone) {
    s->handshaken = true;
    return ReadTlsRequest(s);
  }
  if (step != Step::kFailed) return WaitTls(s, step, &Rep::HandshakeTls);
  tls_failures.Warn("TLS handshake with {} failed: {}", s->peer, why);
  metrics::ConnectionRefused("tls_handshake");
  LingerTls(s);
}

void SeedServer::Rep::ReadTlsRequest(const std::shared_ptr<TlsSession>& s) {
  std::array<char, 16 * 1024> buf;
  for (;;) {
    size_t got = 0;
    std::string why;
    const Step step = s->conn->ReadStep(buf.data(), buf.size(), &got, &why);
    if (step == Step::kWantRead || step == Step::kWantWrite) {
      return WaitTls(s, step, &Rep::ReadTlsRequest);
    }
    if (step == Step::kFailed) return EndTls(*s);
    s->reader.Feed(std::string_view(buf.data(), got));
    if (s->reader.failed()) {
      return AnswerAndLinger(s, ErrorResponse("Invalid request: " + s->reader.error().message()));
    }
    if (s->reader.done()) break;
  }
  metrics::BytesReceived(metrics::Plane::kControl, s->reader.body().size() + 8);
  if (!s->exchange.has_value()) s->exchange.emplace(*this, s->peer, SessionBinding(*s->conn));
  s->step = s->exchange->OnFrame(s->reader.body());
  s->reader = FrameReader(0);  // free the body
  switch (s->step.next) {
    case ControlExchange::Next::kRespond:
      return AnswerAndLinger(s, s->step.frame);
    case ControlExchange::Next::kChallenge:
      if (!s->conn->SendAllBy(s->step.frame.data(), s->step.frame.size(),
                              std::chrono::steady_clock::now())) {
        return EndTls(*s);
      }
      s->reader = FrameReader(kMaxProofBytes);
      return ReadTlsRequest(s);  // the proof, within the same deadline
    case ControlExchange::Next::kStream:
    case ControlExchange::Next::kResolve:
      s->authenticated = true;
      s->streaming = s->step.next == ControlExchange::Next::kStream;
      break;
  }
  if (streams.unserved() >= options.max_queued_streams) {
    metrics::ConnectionRefused("data_queue_full");
    busy_streams.Warn("Refused a TLS connection from {}: {} waiting, the limit is {}", s->peer,
                      streams.unserved(), options.max_queued_streams);
    Json busy = ErrorResponse("the data plane is busy: " + std::to_string(streams.unserved()) +
                              " connections are waiting");
    busy["retry_ms"] = kBusyRetryMs;
    return AnswerAndLinger(s, busy);
  }
  // The whole request is here: the rest (the answer, or the data plane) may
  // wait on a resolve or a disk, so on a stream thread.
  EndTls(*s);
  s->waiter.release();
  streams.Submit([this, s] { TlsRequest(*s); });
}

void SeedServer::Rep::TlsRequest(TlsSession& s) {
  // OpenSSL writes with write(): a peer that has gone raises SIGPIPE, blocked
  // on this thread and drained (see HandOver).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  struct Drain {
    sigset_t* set;
    ~Drain() {
      timespec zero{0, 0};
      while (sigtimedwait(set, nullptr, &zero) == SIGPIPE) {
      }
    }
  } drain{&pipe};
  Conn& conn = *s.conn;
  EndPendingTls(s.id);
  if (s.step.next == ControlExchange::Next::kStream) {
    metrics::ConnectionOpened(metrics::Plane::kData);
    (*s.step.stream)(conn, s.step.request);
    metrics::ConnectionClosed(metrics::Plane::kData);
    conn.Shutdown();
    return;
  }
  const std::string frame = handler.HandleToFrame(s.step.request);
  s.exchange->Answered(frame);
  conn.SendAllBy(frame.data(), frame.size(),
                 std::chrono::steady_clock::now() + options.authenticated_timeout);
  conn.Shutdown();
}

void SeedServer::Rep::StartTlsThread() {
  tls_work.emplace(asio::make_work_guard(tls_io));
  tls_loop = std::thread([this] { tls_io.run(); });
}

void SeedServer::Rep::StopTlsThread() {
  if (!tls_loop.joinable()) return;
  asio::post(tls_io, [this] {
    tls_closing = true;
    auto sessions = std::move(tls_handshaking);
    for (auto& [id, weak] : sessions) {
      if (auto s = weak.lock()) EndTls(*s);
    }
  });
  tls_work.reset();
  tls_loop.join();
}

}  // namespace seedd
