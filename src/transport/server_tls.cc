// The TLS listener's sessions: admission of handshakes (at most a quarter of
// the stream threads, the newest evicting one of the host holding the most),
// then handshake, request and answer, or the data plane, on a stream thread.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/metrics.h"
#include "seedd/json_text.h"
#include "transport/server_rep.h"
#include "transport/socket_io.h"
#include "transport/tls.h"
#include "wire/frame.h"

namespace seedd {

using asio::ip::tcp;
using std::chrono::milliseconds;

namespace {

// Ends a connection whose peer may still be sending (a request we did not read)
// without a reset: a reset would discard what we sent last (an alert, an error
// frame) before the peer reads it. Reads and drops for at most 200 ms.
void LingeringClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  char sink[4096];
  while (ArmRecvTimeout(fd, until) && ::recv(fd, sink, sizeof(sink), 0) > 0) {
  }
}

}  // namespace

uint64_t SeedServer::Rep::AdmitTls(const std::string& peer, int fd) {
  std::lock_guard<std::mutex> lock(tls_mu);
  if (tls_pending.size() >= MaxPendingTls()) {
    std::map<std::string, size_t> per_peer;
    for (const auto& [id, p] : tls_pending) ++per_peer[p.peer];
    auto heaviest =
        std::max_element(per_peer.begin(), per_peer.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (heaviest->second <= per_peer[peer] + 1) return 0;  // the newcomer's host is the heaviest
    for (auto it = tls_pending.begin(); it != tls_pending.end(); ++it) {
      if (it->second.peer != heaviest->first) continue;
      ::shutdown(it->second.fd, SHUT_RDWR);  // its thread sees the end and returns
      tls_evictions.Warn(
          "Closed a TLS handshake from {} to make room for {}: {} connections were in TLS "
          "handshakes, the limit",
          it->second.peer, peer, MaxPendingTls());
      metrics::ConnectionRefused("tls_handshakes_evicted");
      tls_pending.erase(it);
      break;
    }
  }
  const uint64_t id = ++tls_next_id;
  tls_pending.emplace(id, PendingTls{peer, fd});
  return id;
}

void SeedServer::Rep::EndPendingTls(uint64_t id) {
  std::lock_guard<std::mutex> lock(tls_mu);
  tls_pending.erase(id);
}

void SeedServer::Rep::ServeTls(tcp::socket socket, const std::string& peer) {
  asio::error_code ec;
  if (streams.queued() >= options.max_queued_streams) {
    socket.close(ec);
    limits.Released(peer);
    metrics::ConnectionRefused("data_queue_full");
    busy_streams.Warn("Refused a TLS connection from {}: {} waiting, the limit is {}", peer,
                      streams.queued(), options.max_queued_streams);
    return;
  }
  const int fd = socket.release(ec);
  if (ec) {
    limits.Released(peer);
    return;
  }
  const uint64_t id = AdmitTls(peer, fd);
  if (id == 0) {
    ::close(fd);
    limits.Released(peer);
    metrics::ConnectionRefused("tls_handshakes");
    tls_refusals.Warn(
        "Refused a TLS connection from {}: {} connections are in TLS handshakes, "
        "the most from it",
        peer, MaxPendingTls());
    return;
  }
  ++tls_open;
  streams.Submit([this, fd, peer, id] { TlsSession(fd, peer, id); });
}

void SeedServer::Rep::TlsSession(int fd, const std::string& peer, uint64_t id) {
  metrics::ConnectionOpened(metrics::Plane::kControl);
  bool authenticated = false;
  bool streaming = false;
  struct Ended {
    Rep* rep;
    int fd;
    uint64_t id;
    const std::string& peer;
    bool& authenticated;
    bool& streaming;
    ~Ended() {
      rep->EndPendingTls(id);  // before the close: an eviction never meets a reused fd
      if (!authenticated) rep->limits.Released(peer);
      if (streaming) rep->limits.StreamEnded(peer);
      {
        std::lock_guard<std::mutex> lock(rep->streams_mu);
        rep->stream_fds.erase(fd);
      }
      ::close(fd);
      --rep->tls_open;
      metrics::ConnectionClosed(metrics::Plane::kControl);
    }
  } ended{this, fd, id, peer, authenticated, streaming};
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    if (streams_closing) return;
    stream_fds.insert(fd);
  }
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
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + options.request_timeout;
  // A plain client (its frame starts with a zero byte) is told, in plain words.
  char first[2] = {0, 0};
  ArmRecvTimeout(fd, deadline);
  const ssize_t peeked = ::recv(fd, first, sizeof(first), MSG_PEEK | MSG_WAITALL);
  if (peeked <= 0) return;
  if (!LooksLikeTls(first, static_cast<size_t>(peeked))) {
    tls_failures.Warn(
        "A plain client connected from {} to this TLS port: it needs --tls-ca (seedctl, seedd), "
        "or a plain listener (--listen-plain)",
        peer);
    metrics::ConnectionRefused("plain_on_tls_port");
    const std::string frame = EncodeJsonFrame(ErrorResponse(
        "this port speaks TLS: connect with TLS (--tls-ca), or to the daemon's plain port"));
    SendAllBy(fd, frame.data(), frame.size(), deadline);
    LingeringClose(fd);
    return;
  }
  Result<std::unique_ptr<Conn>> conn = Conn::Accept(fd, *options.tls, deadline);
  if (!conn.ok()) {
    tls_failures.Warn("TLS handshake with {} failed: {}", peer, conn.status().message());
    metrics::ConnectionRefused("tls_handshake");
    LingeringClose(fd);
    return;
  }
  auto respond = [&](const Json& response, std::chrono::steady_clock::time_point by) {
    const std::string frame = EncodeJsonFrame(response);
    metrics::BytesSent(metrics::Plane::kControl, frame.size());
    (*conn)->SendAllBy(frame.data(), frame.size(), by);
    (*conn)->Shutdown();
  };
  Result<std::string> body = ReadFrameBody(**conn, kMaxRemoteRequestBytes, deadline);
  if (!body.ok()) {
    if (body.status().code() == StatusCode::kDeadlineExceeded) {
      respond(ErrorResponse("Timed out after " + Seconds(options.request_timeout) +
                            " s reading the request"),
              std::chrono::steady_clock::now() + kErrorWriteTimeout);
    }
    return;
  }
  metrics::BytesReceived(metrics::Plane::kControl, body->size() + 8);
  Result<Json> request = ParseJson(*body);
  if (!request.ok()) {
    metrics::Request("unknown", "invalid");
    respond(ErrorResponse("Invalid request: " + request.status().message()),
            std::chrono::steady_clock::now() + kErrorWriteTimeout);
    return;
  }
  const std::string kind = KnownKind(handler, options, *request);
  if (!handler.Authenticate(*request)) {
    const size_t failures = limits.AuthFailed(peer, AddressLimits::Clock::now());
    failed_auth.Warn("Failed authentication from {} ({} in the last {} s)", peer, failures,
                     Seconds(limits.options().auth_failure_window));
    metrics::AuthFailure();
    metrics::Request(kind, "unauthorized");
    respond(ErrorResponse("Unauthorized request"),
            std::chrono::steady_clock::now() + kErrorWriteTimeout);
    return;
  }
  authenticated = true;
  limits.Authenticated(peer);
  EndPendingTls(id);
  auto stream = options.stream_handlers.find(kind);
  if (stream != options.stream_handlers.end()) {
    if (!limits.AdmitStream(peer)) {
      busy_streams.Warn("Refused a data connection from {}: it holds {}, the limit", peer,
                        options.max_streams_per_address);
      metrics::ConnectionRefused("data_per_address");
      metrics::Request(kind, "busy");
      Json busy = ErrorResponse("too many data connections from " + peer + " (at most " +
                                std::to_string(options.max_streams_per_address) + ")");
      busy["retry_ms"] = kBusyRetryMs;
      respond(busy, std::chrono::steady_clock::now() + kErrorWriteTimeout);
      return;
    }
    streaming = true;
    metrics::Request(kind, "data");
    metrics::ConnectionOpened(metrics::Plane::kData);
    stream->second(**conn, *request);
    metrics::ConnectionClosed(metrics::Plane::kData);
    (*conn)->Shutdown();
    return;
  }
  const std::string frame = handler.HandleToFrame(*request);
  metrics::Request(kind, Outcome(frame));
  metrics::BytesSent(metrics::Plane::kControl, frame.size());
  (*conn)->SendAllBy(frame.data(), frame.size(),
                     std::chrono::steady_clock::now() + options.authenticated_timeout);
  (*conn)->Shutdown();
}

}  // namespace seedd
