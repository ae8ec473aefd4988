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
      exchange_(*server, peer),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      reader_(kMaxRemoteRequestBytes),
      peer_(std::move(peer)) {
  server_->Register(this);
  metrics::ConnectionOpened(metrics::Plane::kControl);
}

Connection::~Connection() {
  if (!handed_off_) metrics::ConnectionClosed(metrics::Plane::kControl);
  if (!authenticated_ && !evicted_) server_->limits.Released(peer_);
  // The access log (debug): who asked for what, the outcome, never the token.
  if (!handed_off_ && Logger().should_log(spdlog::level::debug)) {
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
  if (state_ == State::kReading) {
    state_ = State::kDone;
    CloseSocket();
  }
}

void Connection::ArmDeadline(milliseconds d) {
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec) return;
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
  ControlExchange::Step step = exchange_.OnFrame(reader_.body());
  reader_ = FrameReader(0);  // free the body
  switch (step.next) {
    case ControlExchange::Next::kRespond:
      return Respond(exchange_.refusal(), std::move(step.frame));
    case ControlExchange::Next::kChallenge: {
      bool would_block = false;
      if (SendWithoutWaiting(socket_.native_handle(), step.frame, &would_block) !=
          step.frame.size()) {
        state_ = State::kDone;
        CloseSocket();  // a fresh connection's buffer takes a small frame: the peer is gone
        return;
      }
      reader_ = FrameReader(kMaxProofBytes);  // the proof, within the same deadline
      DoRead();
      return;
    }
    case ControlExchange::Next::kStream:
      authenticated_ = true;
      kind_ = exchange_.kind();
      return HandOver(*step.stream, std::move(step.request));
    case ControlExchange::Next::kResolve:
      authenticated_ = true;
      kind_ = exchange_.kind();
      return HandToResolve(std::move(step.request));
  }
}

void Connection::HandToResolve(Json request) {
  state_ = State::kDone;
  timer_.cancel();
  asio::error_code ec;
  const int fd = socket_.release(ec);
  if (ec) {
    CloseSocket();
    return;
  }
  handed_off_ = true;  // the resolve's Respond logs the access and closes the count
  server_->Resolve(fd, peer_, exchange_, std::move(request), std::chrono::steady_clock::now(),
                   /*opened=*/true);
}

void Connection::HandOver(const StreamHandler& handler, Json request) {
  const TransportOptions& o = server_->options;
  if (server_->streams.unserved() >= o.max_queued_streams) {
    server_->limits.StreamEnded(peer_);  // the exchange admitted it
    server_->busy_streams.Warn("Refused a data connection from {}: {} waiting, the limit is {}",
                               peer_, server_->streams.unserved(), o.max_queued_streams);
    metrics::ConnectionRefused("data_queue_full");
    const std::string message = "the data plane is busy (" + std::to_string(o.max_queued_streams) +
                                " connections waiting); retry later";
    Json response = ErrorResponse(message);
    response["retry_ms"] = kBusyRetryMs;
    std::string frame = EncodeJsonFrame(response);
    metrics::BytesSent(metrics::Plane::kControl, frame.size());
    return Respond("error: " + message.substr(0, 80), std::move(frame));
  }
  state_ = State::kDone;
  outcome_ = "handed to the data plane";
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

void Connection::RespondError(const std::string& message) {
  std::string frame = EncodeJsonFrame(ErrorResponse(message));
  metrics::BytesSent(metrics::Plane::kControl, frame.size());
  Respond("error: " + message.substr(0, 80), std::move(frame));
}

void Connection::Respond(const std::string& outcome, std::string frame) {
  outcome_ = outcome;
  // Best effort: the peer may be gone or never read it.
  ArmDeadline(kErrorWriteTimeout);
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
