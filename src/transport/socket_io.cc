#include "transport/socket_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
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

namespace {

// A blocking read of a large record asks the kernel to wake its thread once
// the record is in (SO_RCVLOWAT), not at each segment: MSG_WAITALL alone only
// puts the thread back to sleep after every wakeup (a 256 KiB piece sent in
// 8 KiB segments woke its reader 32 times). At most a quarter of the socket's
// receive buffer: the kernel grows the buffer for a larger mark and clamps
// the window to it for good (at 256 KiB, links with 50-100 ms of queue ran
// at a fraction of their rate). Set back to one byte when the read ends, so
// a later small read is not held.
constexpr size_t kLowWaterMin = 16 * 1024;
constexpr size_t kLowWaterMax = 256 * 1024;

class LowWater {
 public:
  explicit LowWater(int fd) : fd_(fd) {}
  ~LowWater() {
    if (set_ != 0) Set(1);
  }
  LowWater(const LowWater&) = delete;
  LowWater& operator=(const LowWater&) = delete;
  // Before a wait for `n` more bytes, none of them queued yet (the kernel
  // wakes a reader once the bytes queued and not yet read reach the mark: a
  // wait begun with a part of them queued would wake only after more than
  // the rest).
  void Before(size_t n) {
    size_t want = 0;
    if (n >= kLowWaterMin) {
      int buffer = 0;
      socklen_t len = sizeof(buffer);
      if (::getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buffer, &len) == 0 && buffer > 0) {
        want = std::min({n, kLowWaterMax, static_cast<size_t>(buffer) / 4});
      }
      if (want < kLowWaterMin) want = 0;
    }
    if (want == set_) return;
    Set(want == 0 ? 1 : want);
    set_ = want;
  }

 private:
  void Set(size_t bytes) {
    const int v = static_cast<int>(bytes);
    (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v));
  }
  const int fd_;
  size_t set_ = 0;  // zero: the default (one byte)
};

}  // namespace

Status RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    // One call per piece (the thread still wakes at each segment: RecvAllBy
    // does not).
    ssize_t r = ::recv(fd, p, n, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("recv", errno);
    if (r == 0) return Status::Unavailable("the source closed the data connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

bool ArmSendTimeout(int fd, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  timeval tv{static_cast<time_t>(left.count() / 1000000),
             static_cast<suseconds_t>(left.count() % 1000000)};
  return ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0;
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
  // What has arrived is taken at once; then a wait in poll() for the rest,
  // woken once that much is in (LowWater), and the rest taken.
  LowWater low_water(fd);
  for (;;) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus("recv", errno);
    if (r == 0 && n > 0) return Status::Unavailable("the source closed the data connection");
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    }
    if (n == 0) return Status::Ok();
    // Nothing is queued now: the mark counts only bytes still to come.
    low_water.Before(n);
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status::DeadlineExceeded("the source sent too slowly (" + std::to_string(n) +
                                      " bytes still missing at the deadline)");
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>((left.count() + 999) / 1000));
    if (ready < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

}  // namespace seedd
