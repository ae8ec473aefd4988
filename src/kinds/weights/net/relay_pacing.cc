#include "kinds/weights/net/relay_pacing.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "common/metrics.h"
#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {
namespace {

// Pieces of about 2 ms of a cap, so that senders sharing it interleave
// finely, within 64 KiB (12 ms of a 45 Mbit/s cap: with 16 KiB pieces and a
// sleep before each, 16 relays so capped used 1.7x the CPU of uncapped ones)
// and 1 MiB; 256 KiB when the pacer decides: a round trip sampled every few
// ms of a fast uplink, every 40 ms of a 50 Mbit/s one, and few calls.
uint64_t Piece(uint64_t cap, bool by_delay) {
  if (by_delay) return 256 * 1024;
  return std::clamp<uint64_t>(cap / 500, 64 * 1024, 1024 * 1024);
}

// The connection's smoothed round trip (0: unknown, e.g. not TCP).
std::chrono::microseconds RoundTrip(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return {};
  return std::chrono::microseconds(info.tcpi_rtt);
}

}  // namespace

RelayPacing::RelayPacing(uint64_t cap, bool by_delay, PacerPolicy policy)
    : cap_(cap),
      by_delay_(by_delay),
      pacer_(policy),
      limiter_(cap != 0 ? cap : 1, 2 * Piece(cap, by_delay)) {}

uint64_t RelayPacing::rate() const {
  MutexLock lock(mu_);
  const uint64_t paced = by_delay_ ? pacer_.rate() : 0;
  if (paced == 0) return cap_;
  return cap_ == 0 ? paced : std::min(cap_, paced);
}

RelayPacing::Clock::duration RelayPacing::Reserve(uint64_t n, Clock::time_point now) {
  const uint64_t r = rate();
  if (r == 0) return Clock::duration::zero();
  limiter_.SetRate(r);
  return limiter_.Reserve(n, now);
}

void RelayPacing::Sent(uint64_t conn, uint64_t n, std::chrono::microseconds rtt,
                       Clock::time_point now) {
  if (!by_delay_) return;
  MutexLock lock(mu_);
  pacer_.OnSent(conn, n, rtt, now);
  const uint64_t r = pacer_.rate();
  if (r != 0 && logged_rate_ == 0) {
    Logger().info(
        "Pacing relay uploads from {}/s: the uplink queued {:.1f} ms above its least round trip "
        "({:.1f} ms), which delays this host's own pull",
        HumanBytes(r), std::chrono::duration<double, std::milli>(pacer_.queueing()).count(),
        std::chrono::duration<double, std::milli>(pacer_.base()).count());
  } else if (r != logged_rate_) {
    Logger().debug("Relay uploads paced to {}/s (queueing {:.1f} ms)", HumanBytes(r),
                   std::chrono::duration<double, std::milli>(pacer_.queueing()).count());
  }
  logged_rate_ = r;
  metrics::RelayUploadPace(cap_ != 0 && (r == 0 || r > cap_) ? cap_ : r);
}

void RelayPacing::Closed(const Conn& conn) {
  if (!by_delay_) return;
  MutexLock lock(mu_);
  pacer_.OnClosed(static_cast<uint64_t>(conn.fd()));
}

bool RelayPacing::SendFile(Conn& conn, int file, off_t offset, uint64_t n,
                           Clock::time_point deadline, const std::function<void(uint64_t)>& sent) {
  for (uint64_t done = 0; done < n;) {
    const uint64_t len = std::min(Piece(cap_, by_delay_), n - done);
    const auto now = Clock::now();
    const auto wait = Reserve(len, now);
    if (now + wait >= deadline) return false;
    if (wait > Clock::duration::zero()) {
      std::this_thread::sleep_for(wait);
      metrics::RelayUploadWaited(std::chrono::duration<double>(wait).count());
    }
    if (!conn.SendFileBy(file, offset + static_cast<off_t>(done), len, deadline, sent)) {
      return false;
    }
    done += len;
    if (by_delay_) Sent(static_cast<uint64_t>(conn.fd()), len, RoundTrip(conn.fd()), Clock::now());
  }
  return true;
}

}  // namespace seedd
