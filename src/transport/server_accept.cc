// Accepting control connections: on the loop's turn, and beside it on a second
// acceptor thread; the cap and the per-address limits applied at the accept.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>

#include "common/metrics.h"
#include "common/mutex.h"
#include "seedd/logging.h"
#include "transport/address_limits.h"
#include "transport/server_connection.h"
#include "transport/server_rep.h"
#include "transport/socket_io.h"

namespace seedd {

using asio::ip::tcp;
using std::chrono::milliseconds;

void SeedServer::Rep::DoAccept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](const asio::error_code& ec) {
    if (closing || ec == asio::error::operation_aborted) return;
    AcceptReady();
  });
}

namespace {

// Connections accepted per turn before anything else is served: a few, since
// small requests are answered as they are accepted (with 32, a request that a
// turn took last waited ~1 ms behind the others: p99 1.22 ms against 0.98 ms).
constexpr int kAcceptBatch = 4;

std::string AddressOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    return asio::ip::address_v4(ntohl(in.sin_addr.s_addr)).to_string();
  }
  if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    asio::ip::address_v6::bytes_type bytes;
    std::memcpy(bytes.data(), in6.sin6_addr.s6_addr, bytes.size());
    return asio::ip::address_v6(bytes, in6.sin6_scope_id).to_string();
  }
  return "?";
}

}  // namespace

void SeedServer::Rep::AcceptReady() {
  // accept4 gives the peer's address and a non-blocking, close-on-exec socket
  // in one call (a process this one starts must not hold peers' connections).
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        DoAccept();
        return;
      }
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      // Out of descriptors or a transient error: pause instead of spinning.
      Logger().warn("Accepting a control-channel connection failed: {}; retrying in 100 ms",
                    std::strerror(errno));
      retry_timer.expires_after(milliseconds(100));
      retry_timer.async_wait([this](const asio::error_code& wait_ec) {
        if (!wait_ec && !closing) DoAccept();
      });
      return;
    }
    Accepted(fd, AddressLimits::Key(AddressOf(addr)));
  }
  // More may be waiting: accept them after what else the loop has to do.
  asio::post(io, [this] {
    if (!closing) AcceptReady();
  });
}

void SeedServer::Rep::Accepted(int fd, const std::string& peer) {
  size_t now_open;
  {
    MutexLock lock(mu);
    now_open = open + tls_open.load();
  }
  if (now_open >= options.max_connections) {
    ::close(fd);
    metrics::ConnectionRefused("max_connections");
    ++refused_since_log;
    auto now = std::chrono::steady_clock::now();
    if (now - last_cap_log >= std::chrono::seconds(1)) {
      Logger().warn("Refused {} control-channel connection(s): {} open, the limit is {}",
                    refused_since_log, now_open, options.max_connections);
      last_cap_log = now;
      refused_since_log = 0;
    }
    return;
  }
  std::string victim;
  AddressLimits::Verdict verdict = limits.Admit(peer, AddressLimits::Clock::now(), &victim);
  if (verdict == AddressLimits::Verdict::kEvict) {
    verdict = AddressLimits::Verdict::kServerFull;
    MutexLock lock(mu);
    for (Connection* c : connections) {
      if (c->peer() == victim && c->EvictIfReading()) {
        limits.Transfer(victim, peer);
        verdict = AddressLimits::Verdict::kAccept;
        break;
      }
    }
  }
  if (verdict == AddressLimits::Verdict::kAccept && Tls()) {
    tcp::socket socket(io);
    if (!Wrap(fd, &socket)) {
      limits.Released(peer);
      return;
    }
    ServeTls(std::move(socket), peer);
    return;
  }
  if (verdict == AddressLimits::Verdict::kAccept) {
    Admitted(fd, peer);
    return;
  }
  ::close(fd);
  const AddressLimitOptions& l = limits.options();
  switch (verdict) {
    case AddressLimits::Verdict::kAddressFull:
      metrics::ConnectionRefused("address_unauthenticated");
      refused_address.Warn(
          "Refused a control-channel connection from {}: it holds {} unauthenticated, the limit "
          "per "
          "address",
          peer, l.max_unauthenticated_per_address);
      break;
    case AddressLimits::Verdict::kServerFull:
      metrics::ConnectionRefused("unauthenticated");
      refused_address.Warn(
          "Refused a control-channel connection from {}: {} unauthenticated connections open, the "
          "limit (the rest of --max-connections is kept for authenticated work)",
          peer, l.max_unauthenticated);
      break;
    case AddressLimits::Verdict::kThrottled:
      metrics::ConnectionRefused("auth_failures");
      refused_address.Warn(
          "Refused a control-channel connection from {}: more than {} failed authentications in {} "
          "s",
          peer, l.max_auth_failures, Seconds(l.auth_failure_window));
      break;
    default:
      metrics::ConnectionRefused("addresses");
      refused_address.Warn("Refused a control-channel connection from {}: too many peer addresses",
                           peer);
  }
}

void SeedServer::Rep::Admitted(int fd, const std::string& peer, bool on_loop) {
  // Clients write their request as soon as they connect, so under load it is
  // usually here by the time the connection is accepted: a whole, authenticated
  // request that is not for the data plane is answered without the loop (no
  // registration, no timer, no hand-back). Anything else, and any error, takes
  // the loop's path with the bytes read so far.
  std::array<char, 16 * 1024> buf;
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  const size_t got = n > 0 ? static_cast<size_t>(n) : 0;
  if (got > 0 && !LooksLikeTls(buf.data(), got)) {
    FrameReader reader(kMaxRemoteRequestBytes);
    reader.Feed(std::string_view(buf.data(), got));
    if (reader.done() && !reader.failed()) {
      Result<Json> request = ParseJson(reader.body());
      if (request.ok() && handler.Authenticate(*request) && FindStream(*request) == nullptr) {
        AnswerOffLoop(fd, peer, std::move(*request), got);
        return;
      }
    }
  }
  if (on_loop) {
    OnLoop(fd, peer, buf.data(), got);
    return;
  }
  PostCounted([this, fd, peer, bytes = std::string(buf.data(), got)] {
    OnLoop(fd, peer, bytes.data(), bytes.size());
  });
}

void SeedServer::Rep::AcceptBesideTheLoop() {
  pollfd fds[2] = {{acceptor.native_handle(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    for (int i = 0; i < kAcceptBatch; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = ::accept4(fds[0].fd, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        // Out of descriptors or the like: the loop's acceptor logs it and pauses;
        // this one pauses too instead of spinning on a readable listener.
        if (errno != EAGAIN && errno != EWOULDBLOCK) ::poll(&fds[1], 1, 100);
        break;
      }
      std::string peer = AddressLimits::Key(AddressOf(addr));
      if (!AdmitBesideTheLoop(fd, peer)) {
        PostUndecided(fd, std::move(peer));
      }
    }
  }
}

void SeedServer::Rep::PostCounted(std::function<void()> fn) {
  {
    MutexLock lock(mu);
    ++open;
  }
  asio::post(io, [this, fn = std::move(fn)] {
    fn();
    MutexLock lock(mu);
    --open;
    cv.notify_all();
  });
}

void SeedServer::Rep::PostUndecided(int fd, std::string peer) {
  {
    MutexLock lock(mu);
    ++undecided;
  }
  asio::post(io, [this, fd, peer = std::move(peer)] {
    Accepted(fd, peer);
    MutexLock lock(mu);
    --undecided;
    cv.notify_all();
  });
}

bool SeedServer::Rep::AdmitBesideTheLoop(int fd, const std::string& peer) {
  {
    MutexLock lock(mu);
    if (open + tls_open.load() >= options.max_connections) return false;
  }
  std::string victim;
  if (limits.Admit(peer, AddressLimits::Clock::now(), &victim) != AddressLimits::Verdict::kAccept) {
    return false;  // a refusal is counted nowhere: the loop asks again, logs, evicts
  }
  Admitted(fd, peer, /*on_loop=*/false);
  return true;
}

}  // namespace seedd
