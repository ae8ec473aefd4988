#include "transport/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>

#include "common/errno_status.h"
#include "common/metrics.h"
#include "seedd/json_text.h"
#include "transport/tls.h"
#include "wire/frame.h"

namespace seedd {
namespace {

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits for `events` on fd until the deadline: Ok, DeadlineExceeded, or an error.
// The stop flag of the exchange this thread runs (ExchangeOptions::cancel).
thread_local const std::atomic<bool>* t_cancel = nullptr;

// `cancel` (default: the exchange's) is looked at every 50 ms.
Status WaitFor(int fd, short events, Clock::time_point deadline, const char* what,
               const std::atomic<bool>* cancel = t_cancel) {
  for (;;) {
    int ms = RemainingMs(deadline);
    if (ms == 0) {
      return Status::DeadlineExceeded(std::string("timed out ") + what);
    }
    if (cancel != nullptr) {
      if (cancel->load()) return Status::Cancelled(std::string("stopped ") + what);
      ms = std::min(ms, 50);
    }
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

Result<UniqueFd> ConnectOne(const addrinfo& ai, Clock::time_point deadline,
                            const std::atomic<bool>* cancel) {
  UniqueFd fd(
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return ErrnoStatus("connect", errno);
    SEEDD_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "connecting", cancel));
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return ErrnoStatus("connect", err);
  }
  return fd;
}

}  // namespace

Result<UniqueFd> ConnectTcp(const HostPort& peer, std::chrono::milliseconds timeout,
                            const std::atomic<bool>* cancel) {
  if (cancel == nullptr) cancel = t_cancel;
  const Clock::time_point deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(peer.port);
  int rc = ::getaddrinfo(peer.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::Unavailable("cannot resolve " + peer.host + ": " + ::gai_strerror(rc));
  }
  Status last = Status::Unavailable("no address for " + peer.host);
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Result<UniqueFd> fd = ConnectOne(*ai, deadline, cancel);
    if (fd.ok()) {
      ::freeaddrinfo(res);
      return fd;
    }
    last = fd.status();
    if (last.code() == StatusCode::kCancelled) break;  // not the next address either
  }
  ::freeaddrinfo(res);
  return last;
}

Result<std::vector<HostPort>> ResolveAll(const HostPort& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(peer.port);
  int rc = ::getaddrinfo(peer.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::Unavailable("cannot resolve " + peer.host + ": " + ::gai_strerror(rc));
  }
  std::vector<HostPort> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        ai->ai_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr);
    if (::inet_ntop(ai->ai_family, addr, text, sizeof(text)) == nullptr) continue;
    HostPort hp{text, peer.port};
    if (std::find(out.begin(), out.end(), hp) == out.end()) out.push_back(std::move(hp));
  }
  ::freeaddrinfo(res);
  if (out.empty()) return Status::Unavailable("no address for " + peer.host);
  return out;
}

Status WriteAll(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      metrics::BytesSent(metrics::Plane::kControl, static_cast<uint64_t>(n));
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      SEEDD_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "sending the request"));
      continue;
    }
    return ErrnoStatus("send", errno);
  }
  return Status::Ok();
}

namespace {

// A frame header that is text ("HTTP/1.1 400 ...", "-ERR ...") is another
// protocol's answer: say so, with what it said, rather than a length of 10^18.
Status NotOurProtocol(std::string_view first) {
  std::string said;
  for (char c : first.substr(0, 40)) {
    if (c == '\r' || c == '\n') break;
    said += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  const std::string hint = said.rfind("HTTP/", 0) == 0
                               ? "an HTTP server, such as a daemon's --admin-listen port: the seed "
                                 "protocol is on its --listen port"
                               : "check the address and port";
  return Status::Unavailable("the peer does not speak the seed protocol (it answered '" + said +
                             "'): " + hint);
}

bool LooksLikeText(std::string_view first) {
  if (first.size() < 8) return false;
  for (char c : first.substr(0, 8)) {
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace

Result<std::string> ReadFrameBody(int fd, uint64_t max_bytes, Clock::time_point deadline,
                                  Clock::time_point first_byte_deadline) {
  FrameReader reader(max_bytes);
  std::array<char, 64 * 1024> buf;
  std::string first;  // the first bytes, to name another protocol
  while (!reader.done()) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n > 0) {
      metrics::BytesReceived(metrics::Plane::kControl, static_cast<uint64_t>(n));
      if (first.size() < 64) {
        first.append(buf.data(), std::min<size_t>(static_cast<size_t>(n), 64 - first.size()));
      }
      reader.Feed(std::string_view(buf.data(), static_cast<size_t>(n)));
      if (reader.failed()) return LooksLikeText(first) ? NotOurProtocol(first) : reader.error();
      continue;
    }
    if (n == 0) return reader.EndOfStreamError();
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (first.empty() && first_byte_deadline < deadline) {
        Status began = WaitFor(fd, POLLIN, first_byte_deadline, "waiting for the response");
        if (began.code() == StatusCode::kDeadlineExceeded) {
          return Status::DeadlineExceeded(
              "no response began in time: the peer accepted the connection but sent nothing "
              "(check that this is a seed port; a busy source may also answer late)");
        }
        SEEDD_RETURN_IF_ERROR(began);
        continue;
      }
      SEEDD_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "waiting for the response"));
      continue;
    }
    return ErrnoStatus("recv", errno);
  }
  return std::move(reader.body());
}

Result<Json> ExchangeJson(const HostPort& peer, const Json& request,
                          const ExchangeOptions& options) {
  struct CancelScope {
    explicit CancelScope(const std::atomic<bool>* flag) { t_cancel = flag; }
    ~CancelScope() { t_cancel = nullptr; }
    CancelScope(const CancelScope&) = delete;
    CancelScope& operator=(const CancelScope&) = delete;
  } scope(options.cancel.get());
  Result<UniqueFd> fd = ConnectTcp(peer, options.connect_timeout);
  if (!fd.ok()) return fd.status();
  const Clock::time_point deadline = Clock::now() + options.response_timeout;
  Result<std::string> body = Status::Unavailable("no response");
  if (options.tls != nullptr && !options.tls->options().ca.empty()) {
    Result<std::unique_ptr<Conn>> conn = Conn::Connect(
        fd->get(), *options.tls, peer.host,
        std::min(deadline, Clock::now() + options.connect_timeout), options.cancel.get());
    if (!conn.ok()) return conn.status();
    const std::string frame = EncodeJsonFrame(request);
    if (!(*conn)->SendAllBy(frame.data(), frame.size(), deadline)) {
      return Status::Unavailable("cannot send the request over TLS" +
                                 ((*conn)->error().empty() ? "" : ": " + (*conn)->error()));
    }
    body = ReadFrameBody(**conn, options.max_response_bytes, deadline);
    (*conn)->Shutdown();
  } else {
    SEEDD_RETURN_IF_ERROR(WriteAll(fd->get(), EncodeJsonFrame(request), deadline));
    body = ReadFrameBody(fd->get(), options.max_response_bytes, deadline,
                         Clock::now() + options.first_byte_timeout);
  }
  if (!body.ok()) return body.status();
  Result<Json> response = ParseJson(*body);
  if (!response.ok()) return response.status().WithContext("response");
  return response;
}

}  // namespace seedd
