#include "transport/server.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "common/metrics.h"
#include "common/mutex.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "transport/address_limits.h"
#include "transport/exchange.h"
#include "transport/server_connection.h"
#include "transport/server_rep.h"
#include "transport/socket_io.h"
#include "transport/tls.h"
#include "wire/frame.h"

namespace seedd {

using asio::ip::tcp;
using std::chrono::milliseconds;

size_t SendWithoutWaiting(int fd, std::string_view frame, bool* would_block) {
  size_t sent = 0;
  *would_block = false;
  while (sent < frame.size()) {
    const ssize_t n =
        ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      *would_block = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      break;
    }
  }
  return sent;
}

AddressLimitOptions LimitsFrom(const TransportOptions& o) {
  AddressLimitOptions l;
  l.max_unauthenticated_per_address = o.max_unauthenticated_per_address;
  l.max_unauthenticated = o.max_unauthenticated != 0
                              ? o.max_unauthenticated
                              : std::max<size_t>(1, o.max_connections * 3 / 4);
  l.max_streams_per_address = o.max_streams_per_address;
  l.max_auth_failures = o.max_auth_failures;
  l.auth_failure_window = o.auth_failure_window;
  return l;
}

std::string Seconds(milliseconds d) {
  double s = static_cast<double>(d.count()) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string KnownKind(const RequestHandler& handler, const TransportOptions& options,
                      const Json& request) {
  auto kind = request.find("kind");
  if (kind == request.end() || !kind->is_string()) return "unknown";
  const std::string& name = kind->get_ref<const std::string&>();
  if (handler.Find(name) != nullptr || options.stream_handlers.count(name) > 0) return name;
  return "unknown";
}

std::string Outcome(const std::string& frame) {
  const size_t at = frame.rfind("\"status\":\"");
  if (at == std::string::npos) return "error";
  const std::string status = frame.substr(at + 10, frame.find('"', at + 10) - (at + 10));
  return status == "ok" || status == "miss" ? status : "error";
}

void SeedServer::Rep::Register(Connection* c) {
  MutexLock lock(mu);
  connections.insert(c);
  ++open;
}

void SeedServer::Rep::Unregister(Connection* c) {
  MutexLock lock(mu);
  connections.erase(c);
  --open;
  cv.notify_all();
}

void SeedServer::Rep::OnLoop(int fd, const std::string& peer, const char* bytes, size_t n) {
  tcp::socket socket(io);
  if (!Wrap(fd, &socket)) {
    limits.Released(peer);
    return;
  }
  // No TCP_NODELAY: each side writes one whole frame, so Nagle never holds data back.
  std::make_shared<Connection>(this, std::move(socket), peer)->StartWith(bytes, n);
}

void SeedServer::Rep::AnswerOffLoop(int fd, const std::string& peer, Json request,
                                    size_t request_bytes) {
  metrics::BytesReceived(metrics::Plane::kControl, request_bytes);
  ControlExchange exchange(*this, peer);
  ControlExchange::Step step = exchange.OnAuthenticated(std::move(request));
  Resolve(fd, peer, exchange, std::move(step.request), std::chrono::steady_clock::now(),
          /*opened=*/false);
}

void SeedServer::Rep::Resolve(int fd, const std::string& peer, const ControlExchange& exchange,
                              Json request, std::chrono::steady_clock::time_point start,
                              bool opened) {
  {
    MutexLock lock(mu);
    ++open;
  }
  if (!opened) metrics::ConnectionOpened(metrics::Plane::kControl);
  if (std::optional<std::string> frame = handler.HandleToFrameNow(request)) {
    // No hand-off: a thread switch costs more than the answer here.
    Respond(fd, peer, exchange, std::move(*frame), start);
    return;
  }
  pool.Submit([this, fd, peer, exchange, request = std::move(request), start] {
    Respond(fd, peer, exchange, handler.HandleToFrame(request), start);
  });
}

void SeedServer::Rep::Respond(int fd, const std::string& peer, const ControlExchange& exchange,
                              std::string frame, std::chrono::steady_clock::time_point start) {
  auto ended = [this] {
    metrics::ConnectionClosed(metrics::Plane::kControl);
    MutexLock lock(mu);
    --open;
    cv.notify_all();
  };
  // The connection's deadline once authenticated, as on the loop's path: a
  // resolve that outlasted it gets no answer.
  const auto deadline = start + options.authenticated_timeout;
  if (std::chrono::steady_clock::now() >= deadline) {
    ::close(fd);
    ended();
    return;
  }
  const std::string outcome = exchange.Answered(frame);
  const std::string& kind = exchange.kind();
  const size_t size = frame.size();
  bool would_block = false;
  const size_t sent = SendWithoutWaiting(fd, frame, &would_block);
  if (would_block) {
    // The rest on the loop, which waits for the peer to read it until the deadline.
    frame.erase(0, sent);
    asio::post(io,
               [this, fd, peer, kind, outcome, deadline, rest = std::move(frame), ended]() mutable {
                 tcp::socket socket(io);
                 if (Wrap(fd, &socket)) {
                   std::make_shared<Connection>(this, std::move(socket), peer)
                       ->FinishWriting(std::move(rest), kind, outcome, deadline);
                 }
                 ended();
               });
    return;
  }
  ::close(fd);
  if (Logger().should_log(spdlog::level::debug)) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LogFields fields{
        {"peer", peer}, {"seed_kind", kind}, {"outcome", outcome}, {"bytes", size}, {"ms", ms}};
    Logger().debug("Control-channel access {} {} {} {} bytes {:.3f} ms", peer, kind, outcome, size,
                   ms);
  }
  ended();
}

bool SeedServer::Rep::Wrap(int fd, tcp::socket* socket) {
  asio::error_code ec;
  socket->assign(v6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (!ec) return true;
  ::close(fd);
  return false;
}

const StreamHandler* SeedServer::Rep::FindStream(const Json& request) const {
  auto kind = request.find("kind");
  if (kind == request.end() || !kind->is_string()) return nullptr;
  auto it = options.stream_handlers.find(kind->get<std::string>());
  return it == options.stream_handlers.end() ? nullptr : &it->second;
}

SeedServer::SeedServer(const RequestHandler& handler, const TransportOptions& options)
    : rep_(std::make_unique<Rep>(handler, options)) {}

SeedServer::~SeedServer() { Close(); }

Result<HostPort> SeedServer::Start(const HostPort& listen) {
  if (rep_->started || rep_->closed) {
    return Status::FailedPrecondition("the listener was already started");
  }
  asio::error_code ec;
  asio::ip::address addr;
  if (listen.is_ipv6() || !listen.host.empty()) {
    addr = asio::ip::make_address(listen.host, ec);
  }
  if (ec) {
    // A host name: resolve it (the reference binds names too).
    tcp::resolver resolver(rep_->io);
    auto results = resolver.resolve(listen.host, std::to_string(listen.port), ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("cannot resolve listen address " + listen.ToString() + ": " +
                                     ec.message());
    }
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(addr, listen.port);
  auto& acceptor = rep_->acceptor;
  if (acceptor.open(endpoint.protocol(), ec); ec) {
    return Status::Unavailable("cannot open a socket for " + listen.ToString() + ": " +
                               ec.message());
  }
  // Not inherited by processes this one starts: a child that outlived the daemon
  // would hold the port, and a restart could not bind it.
  ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6()) {
    acceptor.set_option(asio::ip::v6_only(true), ec);
  }
  if (acceptor.bind(endpoint, ec); ec) {
    return Status::Unavailable("cannot listen on " + listen.ToString() + ": " + ec.message());
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return Status::Unavailable("cannot listen on " + listen.ToString() + ": " + ec.message());
  }
  tcp::endpoint bound = acceptor.local_endpoint(ec);
  acceptor.non_blocking(true, ec);
  rep_->v6 = endpoint.address().is_v6();
  rep_->started = true;
  if (rep_->Tls()) rep_->StartTlsThread();
  rep_->DoAccept();
  rep_->loop = std::thread([rep = rep_.get()] {
    auto guard = asio::make_work_guard(rep->io);
    rep->io.run();
  });
  // A TLS listener's connections all go to stream threads from the loop: a
  // second acceptor would only add a hop.
  rep_->stop_fd = rep_->Tls() ? -1 : ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (rep_->stop_fd >= 0) {
    rep_->second_acceptor = std::thread([rep = rep_.get()] { rep->AcceptBesideTheLoop(); });
  }
  return HostPort{bound.address().to_string(), bound.port()};
}

void SeedServer::Close() {
  Rep& rep = *rep_;
  if (rep.closed) {
    return;
  }
  rep.closed = true;
  if (rep.second_acceptor.joinable()) {
    // Stopped first: what it posted to the loop runs before the loop closes.
    const uint64_t one = 1;
    (void)!::write(rep.stop_fd, &one, sizeof(one));
    rep.second_acceptor.join();
  }
  if (rep.stop_fd >= 0) ::close(rep.stop_fd);
  rep.stop_fd = -1;
  if (rep.started) {
    asio::post(rep.io, [&rep] {
      rep.closing = true;
      asio::error_code ignored;
      rep.acceptor.close(ignored);
      rep.retry_timer.cancel();
      MutexLock lock(rep.mu);
      for (Connection* c : rep.connections) {
        c->CloseIfReading();
      }
      rep.accepting = false;
      rep.cv.notify_all();
    });
    {
      // Once the loop accepts no more: until then a moment with no connection
      // open is no sign that none will be.
      MutexLock lock(rep.mu);
      rep.cv.wait(lock, [&rep]() REQUIRES(rep.mu) {
        return !rep.accepting && rep.open == 0 && rep.undecided == 0;
      });
    }
    rep.io.stop();
    rep.loop.join();
    rep.StopTlsThread();
  }
  rep.pool.Shutdown();
  {
    // Data connections end now: their handlers see end of stream and return.
    MutexLock lock(rep.streams_mu);
    rep.streams_closing = true;
    for (int fd : rep.stream_fds) ::shutdown(fd, SHUT_RDWR);
  }
  rep.streams.Shutdown();
}

size_t SeedServer::open_connections() const {
  MutexLock lock(rep_->mu);
  return rep_->open;
}

}  // namespace seedd
