#include "kinds/weights/records.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errno_status.h"

namespace seedd {
namespace {

void PutU32(uint32_t v, char* p) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

RequestRecord EncodeRequest(std::string_view magic, uint32_t index) {
  RequestRecord r{};
  std::memcpy(r.data(), magic.data(), 4);
  PutU32(index, r.data() + 4);
  return r;
}

uint32_t RequestIndex(const RequestRecord& record) { return GetU32(record.data() + 4); }

HeaderRecord EncodeHeader(std::string_view magic, uint32_t index, uint32_t status, uint32_t aux,
                          uint64_t length) {
  HeaderRecord h{};
  std::memcpy(h.data(), magic.data(), 4);
  PutU32(index, h.data() + 4);
  PutU32(status, h.data() + 8);
  PutU32(aux, h.data() + 12);
  PutU32(static_cast<uint32_t>(length >> 32), h.data() + 16);
  PutU32(static_cast<uint32_t>(length), h.data() + 20);
  return h;
}

Header DecodeHeader(const HeaderRecord& record) {
  const char* p = record.data();
  return Header{std::string_view(p, 4), GetU32(p + 4), GetU32(p + 8), GetU32(p + 12),
                (uint64_t{GetU32(p + 16)} << 32) | GetU32(p + 20)};
}

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

std::chrono::steady_clock::time_point TransferDeadline::For(uint64_t bytes) const {
  const uint64_t rate = std::max<uint64_t>(min_rate, 1);
  return std::chrono::steady_clock::now() + grace +
         std::chrono::milliseconds(bytes / rate * 1000 + bytes % rate * 1000 / rate);
}

bool ArmSendTimeout(int fd, std::chrono::steady_clock::time_point deadline) {
  return ArmTimeout(fd, SO_SNDTIMEO, deadline);
}

bool ArmRecvTimeout(int fd, std::chrono::steady_clock::time_point deadline) {
  return ArmTimeout(fd, SO_RCVTIMEO, deadline);
}

bool SendAllBy(int fd, const char* p, size_t n, std::chrono::steady_clock::time_point deadline) {
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
