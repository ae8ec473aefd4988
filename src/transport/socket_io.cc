#include "transport/socket_io.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include "common/errno_status.h"

namespace seedd {

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

Status RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    // One wakeup per piece rather than one per few packets that arrived.
    ssize_t r = ::recv(fd, p, n, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("recv", errno);
    if (r == 0) return Status::Unavailable("the source closed the data connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

namespace {

bool ArmTimeout(int fd, int option, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  timeval tv{static_cast<time_t>(left.count() / 1000000),
             static_cast<suseconds_t>(left.count() % 1000000)};
  return ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) == 0;
}

}  // namespace

bool ArmSendTimeout(int fd, std::chrono::steady_clock::time_point deadline) {
  return ArmTimeout(fd, SO_SNDTIMEO, deadline);
}

bool ArmRecvTimeout(int fd, std::chrono::steady_clock::time_point deadline) {
  return ArmTimeout(fd, SO_RCVTIMEO, deadline);
}

bool SendAllBy(int fd, const char* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  // What fits in the socket's buffer now goes without arming the timeout (a
  // setsockopt per call, most of the calls for small records).
  for (;;) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    }
    break;
  }
  while (n > 0) {
    if (!ArmSendTimeout(fd, deadline)) return false;
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

Status RecvAllBy(int fd, char* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  // What has arrived is taken without arming the timeout (a setsockopt per
  // call, most of the calls for small records).
  for (;;) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus("recv", errno);
    if (r == 0 && n > 0) return Status::Unavailable("the source closed the data connection");
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    }
    break;
  }
  while (n > 0) {
    if (!ArmRecvTimeout(fd, deadline)) {
      return Status::DeadlineExceeded("the source sent too slowly (" + std::to_string(n) +
                                      " bytes still missing at the deadline)");
    }
    ssize_t r = ::recv(fd, p, n, MSG_WAITALL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r < 0) return ErrnoStatus("recv", errno);
    if (r == 0) return Status::Unavailable("the source closed the data connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace seedd
