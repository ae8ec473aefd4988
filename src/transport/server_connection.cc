#include "transport/server_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "seedd/logging.h"
#include "transport/data_auth.h"
#include "transport/socket_io.h"

namespace seedd {

using asio::ip::tcp;
using std::chrono::milliseconds;

Connection::Connection(SeedServer::Rep* server, tcp::socket socket, std::string peer)
    : server_(server),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      reader_(kMaxRemoteRequestBytes),
      peer_(std::move(peer)) {
  server_->Register(this);
  metrics::ConnectionOpened(metrics::Plane::kControl);
}

Connection::~Connection() {
  metrics::ConnectionClosed(metrics::Plane::kControl);
  if (!authenticated_ && !evicted_) server_->limits.Released(peer_);
  // The access log (debug): who asked for what, the outcome, never the token.
  if (Logger().should_log(spdlog::level::debug)) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    LogFields fields{{"peer", peer_},
                     {"seed_kind", kind_},
                     {"outcome", outcome_},
                     {"bytes", bytes_out_},
                     {"ms", ms}};
    Logger().debug("Control-channel access {} {} {} {} bytes {:.3f} ms", peer_, kind_, outcome_,
                   bytes_out_, ms);
  }
  server_->Unregister(this);
}

bool Connection::EvictIfReading() {
  MutexLock lock(mu_);
  if (state_ != State::kReading || evicted_ || authenticated_) return false;
  evicted_ = true;
  state_ = State::kDone;
  CloseSocket();
  return true;
}

void Connection::Start() {
  ArmDeadline(server_->options.request_timeout);
  DoRead();
}

void Connection::StartWith(const char* bytes, size_t n) {
  ArmDeadline(server_->options.request_timeout);
  if (n == 0) {
    DoRead();
    return;
  }
  std::memcpy(buf_.data(), bytes, std::min(n, buf_.size()));
  OnRead(asio::error_code(), std::min(n, buf_.size()));
}

void Connection::FinishWriting(std::string rest, const std::string& kind,
                               const std::string& outcome,
                               std::chrono::steady_clock::time_point deadline) {
  authenticated_ = true;
  kind_ = kind;
  outcome_ = outcome;
  ArmDeadline(
      std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
  Write(std::move(rest));
}

void Connection::CloseIfReading() {
  MutexLock lock(mu_);
  if (state_ == State::kReading) {
    state_ = State::kDone;
    CloseSocket();
  }
}

void Connection::ArmDeadline(milliseconds d) {
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec) return;
    MutexLock lock(self->mu_);
    // expiry() check: a timer re-armed after firing must not act on the old expiry.
    if (self->timer_.expiry() > asio::steady_timer::clock_type::now()) return;
    self->OnDeadline();
  });
}

void Connection::OnDeadline() {
  if (state_ == State::kReading) {
    // Cancel the read; its handler answers with the reason.
    deadline_hit_ = true;
    asio::error_code ignored;
    socket_.cancel(ignored);
  } else {
    state_ = State::kDone;
    CloseSocket();
  }
}

void Connection::DoRead() {
  socket_.async_read_some(
      asio::buffer(buf_),
      [self = shared_from_this()](const asio::error_code& ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(const asio::error_code& ec, size_t n) {
  if (state_ != State::kReading) return;
  if (deadline_hit_) {
    RespondError("Timed out after " + Seconds(server_->options.request_timeout) +
                 " s reading the request");
    return;
  }
  if (ec) {
    if (ec != asio::error::eof || !reader_.started()) {
      state_ = State::kDone;
      CloseSocket();
      return;
    }
    RespondError(reader_.EndOfStreamError().message());
    return;
  }
  metrics::BytesReceived(metrics::Plane::kControl, n);
  if (!reader_.started() && LooksLikeTls(buf_.data(), n)) {
    server_->tls_failures.Warn(
        "A TLS client connected from {} to a plain port: give this daemon --tls-cert and "
        "--tls-key, or point the client at the TLS port",
        peer_);
    metrics::ConnectionRefused("tls_on_plain_port");
    RespondError("this port speaks plain TCP, not TLS");
    return;
  }
  reader_.Feed(std::string_view(buf_.data(), n));
  if (reader_.failed()) {
    RespondError(reader_.error().message());
    return;
  }
  if (!reader_.done()) {
    DoRead();
    return;
  }
  OnRequest();
}

void Connection::OnRequest() {
  Result<Json> request = ParseJson(reader_.body());
  reader_ = FrameReader(0);  // free the body
  if (!request.ok()) {
    metrics::Request("unknown", "invalid");
    RespondError("Invalid request: " + request.status().message());
    return;
  }
  if (!challenged_.is_null()) return OnProof(*request);
  if (!server_->handler.Authenticate(*request)) {
    if (AsksForChallenge(*request) && server_->FindStream(*request) != nullptr) {
      return Challenge(std::move(*request));
    }
    return RefuseUnauthorized(*request);
  }
  OnAuthenticated(std::move(*request));
}

void Connection::RefuseUnauthorized(const Json& request) {
  metrics::AuthFailure();
  metrics::Request(KnownKind(request), "unauthorized");
  const size_t failures = server_->limits.AuthFailed(peer_, AddressLimits::Clock::now());
  server_->failed_auth.Warn("Failed authentication from {} ({} in the last {} s)", peer_, failures,
                            Seconds(server_->limits.options().auth_failure_window));
  RespondError("Unauthorized request");
}

void Connection::Challenge(Json request) {
  source_nonce_ = RandomHexOrDie(kDataNonceHexBytes / 2);
  const std::string frame =
      EncodeJsonFrame(Json{{"status", "challenge"},
                           {"auth", kDataAuthScheme},
                           {"nonce", source_nonce_},
                           {"proof", DataProof(server_->handler.tokens().Sent(), "source", request,
                                               source_nonce_, "")}});
  bool would_block = false;
  if (SendWithoutWaiting(socket_.native_handle(), frame, &would_block) != frame.size()) {
    CloseSocket();  // a fresh connection's buffer takes a small frame: the peer is gone
    return;
  }
  challenged_ = std::move(request);
  reader_ = FrameReader(kMaxProofBytes);
  DoRead();
}

void Connection::OnProof(const Json& answer) {
  const std::string proof =
      answer.is_object() && answer.contains("proof") && answer["proof"].is_string()
          ? answer["proof"].get<std::string>()
          : std::string();
  Json request = std::move(challenged_);
  challenged_ = Json();
  if (!ProvedByAny(server_->handler.tokens(), proof, "fetcher", request, source_nonce_, "")) {
    return RefuseUnauthorized(request);
  }
  OnAuthenticated(std::move(request));
}

void Connection::OnAuthenticated(Json request_value) {
  std::optional<Json> request(std::move(request_value));
  authenticated_ = true;
  server_->limits.Authenticated(peer_);
  if (auto kind = request->find("kind"); kind != request->end() && kind->is_string()) {
    kind_ = kind->get<std::string>().substr(0, 64);
  }
  metric_kind_ = KnownKind(*request);
  if (const StreamHandler* stream = server_->FindStream(*request)) {
    HandOver(*stream, std::move(*request));
    return;
  }
  // Authenticated handlers (a manifest of a large model) may be slow.
  state_ = State::kResolving;
  ArmDeadline(server_->options.authenticated_timeout);
  if (std::optional<std::string> frame = server_->handler.HandleToFrameNow(*request)) {
    FinishOnResolver(std::move(*frame));  // at hand (a small cached artifact): no hand-off
    return;
  }
  server_->pool.Submit([self = shared_from_this(), req = std::move(*request)] {
    self->FinishOnResolver(self->server_->handler.HandleToFrame(req));
  });
}

void Connection::FinishOnResolver(std::string frame) {
  MutexLock lock(mu_);
  if (state_ != State::kResolving) return;  // the deadline closed the connection
  bytes_out_ = frame.size();
  // The response's status is its last key ("payload" and "message" sort first).
  if (size_t at = frame.rfind("\"status\":\""); at != std::string::npos) {
    outcome_ = frame.substr(at + 10, frame.find('"', at + 10) - (at + 10));
  }
  metrics::Request(metric_kind_, outcome_ == "ok" || outcome_ == "miss" ? outcome_ : "error");
  metrics::BytesSent(metrics::Plane::kControl, frame.size());
  bool would_block = false;
  const size_t sent = SendWithoutWaiting(socket_.native_handle(), frame, &would_block);
  if (!would_block) {  // all sent, or the peer is gone
    state_ = State::kDone;
    CloseSocket();
    return;
  }
  state_ = State::kWriting;
  frame.erase(0, sent);
  lock.Unlock();
  asio::post(socket_.get_executor(), [self = shared_from_this(), f = std::move(frame)]() mutable {
    self->Write(std::move(f));
  });
}

std::string Connection::KnownKind(const Json& request) const {
  return seedd::KnownKind(server_->handler, server_->options, request);
}

void Connection::HandOver(const StreamHandler& handler, Json request) {
  const TransportOptions& o = server_->options;
  if (server_->streams.queued() >= o.max_queued_streams) {
    server_->busy_streams.Warn("Refused a data connection from {}: {} waiting, the limit is {}",
                               peer_, server_->streams.queued(), o.max_queued_streams);
    metrics::ConnectionRefused("data_queue_full");
    metrics::Request(metric_kind_, "busy");
    RespondBusy("the data plane is busy (" + std::to_string(o.max_queued_streams) +
                " connections waiting); retry later");
    return;
  }
  if (!server_->limits.AdmitStream(peer_)) {
    server_->busy_streams.Warn("Refused a data connection from {}: it holds {}, the limit", peer_,
                               o.max_streams_per_address);
    metrics::ConnectionRefused("data_per_address");
    metrics::Request(metric_kind_, "busy");
    RespondBusy("too many data connections from " + peer_ + " (at most " +
                std::to_string(o.max_streams_per_address) + ")");
    return;
  }
  MutexLock lock(mu_);
  state_ = State::kDone;
  outcome_ = "handed to the data plane";
  metrics::Request(metric_kind_, "data");
  timer_.cancel();
  asio::error_code ec;
  int fd = socket_.release(ec);
  if (ec) {
    server_->limits.StreamEnded(peer_);
    CloseSocket();
    return;
  }
  server_->streams.Submit([fd, handler, request = std::move(request), rep = server_, peer = peer_] {
    struct Ended {
      SeedServer::Rep* rep;
      const std::string& peer;
      ~Ended() {
        rep->limits.StreamEnded(peer);
        metrics::ConnectionClosed(metrics::Plane::kData);
      }
    } ended{rep, peer};
    metrics::ConnectionOpened(metrics::Plane::kData);
    {
      MutexLock lock(rep->streams_mu);
      if (rep->streams_closing) {
        ::close(fd);
        return;
      }
      rep->stream_fds.insert(fd);
    }
    // Stream handlers may sendfile() to a peer that has gone; sendfile has no
    // MSG_NOSIGNAL, so SIGPIPE is blocked on this thread (it would end the
    // process) and any that got raised is drained: the handler sees EPIPE.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    Conn conn(fd);
    handler(conn, request);
    {
      MutexLock lock(rep->streams_mu);
      rep->stream_fds.erase(fd);
    }
    ::close(fd);
    timespec zero{0, 0};
    while (sigtimedwait(&pipe, nullptr, &zero) == SIGPIPE) {
    }
  });
}

void Connection::RespondBusy(const std::string& message) {
  Json response = ErrorResponse(message);
  response["retry_ms"] = kBusyRetryMs;
  Respond(message, std::move(response));
}

void Connection::Respond(const std::string& message, const Json& response) {
  outcome_ = "error: " + message.substr(0, 80);
  // Best effort: the peer may be gone or never read it.
  ArmDeadline(kErrorWriteTimeout);
  std::string frame = EncodeJsonFrame(response);
  metrics::BytesSent(metrics::Plane::kControl, frame.size());
  Write(std::move(frame));
}

void Connection::Write(std::string frame) {
  if (state_ == State::kDone) return;  // the deadline passed
  state_ = State::kWriting;
  out_ = std::move(frame);
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this()](const asio::error_code&, size_t) {
                      self->state_ = State::kDone;
                      self->CloseSocket();
                    });
}

void Connection::CloseSocket() {
  asio::error_code ignored;
  timer_.cancel();
  socket_.close(ignored);
}

}  // namespace seedd
