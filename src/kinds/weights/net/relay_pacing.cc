#include "kinds/weights/net/relay_pacing.h"

#include <linux/tcp.h>  // tcp_info with tcpi_bytes_acked (glibc's lacks it)
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "common/metrics.h"
#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {
namespace {

// TCP_INFO of `fd`; nullopt when it has none (not TCP).
std::optional<tcp_info> Info(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len < offsetof(tcp_info, tcpi_bytes_acked) + sizeof(info.tcpi_bytes_acked)) {
    return std::nullopt;
  }
  return info;
}

}  // namespace

std::optional<RelayPacingMode> ParseRelayPacingMode(std::string_view text) {
  if (text == "capacity") return RelayPacingMode::kCapacity;
  if (text == "delay") return RelayPacingMode::kDelay;
  if (text == "off") return RelayPacingMode::kOff;
  return std::nullopt;
}

RelayPacing::RelayPacing(uint64_t cap, RelayPacingMode mode, PacerPolicy policy,
                         CapacityPolicy capacity)
    : cap_(cap),
      mode_(mode),
      pacer_(policy),
      capacity_(capacity),
      limiter_(cap != 0 ? cap : 1, 2 * 64 * 1024) {}

uint64_t RelayPacing::Paced() const {
  switch (mode_) {
    case RelayPacingMode::kCapacity:
      return capacity_.rate();
    case RelayPacingMode::kDelay:
      return pacer_.rate();
    case RelayPacingMode::kOff:
      break;
  }
  return 0;
}

uint64_t RelayPacing::rate() const {
  MutexLock lock(mu_);
  const uint64_t paced = Paced();
  if (paced == 0) return cap_;
  return cap_ == 0 ? paced : std::min(cap_, paced);
}

// Pieces of about 2 ms of the rate in force, so that senders sharing it
// interleave finely, within 64 KiB (12 ms of a 45 Mbit/s cap: with 16 KiB
// pieces and a sleep before each, 16 relays so capped used 1.7x the CPU of
// uncapped ones) and 1 MiB; 256 KiB when the delay pacer decides (a round
// trip sampled every few ms of a fast uplink, every 40 ms of a 50 Mbit/s one)
// or nothing holds uploads yet.
uint64_t RelayPacing::Piece(uint64_t rate) const {
  if (mode_ == RelayPacingMode::kDelay || rate == 0) return 256 * 1024;
  return std::clamp<uint64_t>(rate / 500, 64 * 1024, 1024 * 1024);
}

RelayPacing::Clock::duration RelayPacing::Reserve(uint64_t n, uint64_t rate,
                                                  Clock::time_point now) {
  if (rate == 0) return Clock::duration::zero();
  // Bursts of two pieces at most: more would queue at the uplink.
  limiter_.SetRate(rate, 2 * Piece(rate));
  return limiter_.Reserve(n, now);
}

uint64_t RelayPacing::Gauge(uint64_t paced) const {
  return cap_ != 0 && (paced == 0 || paced > cap_) ? cap_ : paced;
}

void RelayPacing::Waited() {
  if (mode_ != RelayPacingMode::kCapacity) return;
  MutexLock lock(mu_);
  capacity_.OnWaited();
}

uint64_t RelayPacing::Acked() {
  uint64_t total = closed_acked_;
  for (const auto& [fd, base] : paced_) {
    const std::optional<tcp_info> info = Info(fd);
    if (info.has_value() && info->tcpi_bytes_acked > base) total += info->tcpi_bytes_acked - base;
  }
  return total;
}

void RelayPacing::Sent(int fd, uint64_t n, Clock::time_point now) {
  if (mode_ == RelayPacingMode::kOff) return;
  MutexLock lock(mu_);
  if (mode_ == RelayPacingMode::kCapacity) {
    if (!paced_.contains(fd)) {
      // Counted from now: what it had acknowledged before was not paced.
      const std::optional<tcp_info> info = Info(fd);
      if (!info.has_value()) return;
      paced_.emplace(fd, info->tcpi_bytes_acked);
    }
    if (!capacity_.Due(now)) return;
    const uint64_t before = capacity_.rate();
    capacity_.OnAcked(Acked(), now);
    const uint64_t r = capacity_.rate();
    if (r != 0 && before == 0) {
      Logger().info(
          "Pacing relay uploads at {}/s: {:.0f}% of the {}/s they were acknowledged at, so "
          "that this host's own chunk requests and acknowledgements do not queue behind them",
          HumanBytes(r), 100 * capacity_.policy().gain, HumanBytes(capacity_.capacity()));
    } else if (r == 0 && before != 0) {
      Logger().info("Relay uploads unpaced: the uplink carried more than {}/s",
                    HumanBytes(capacity_.capacity()));
    } else if (r != before) {
      Logger().debug("Relay uploads paced to {}/s{}", HumanBytes(r),
                     capacity_.probing() ? " (probing for more)" : "");
    }
    metrics::RelayUploadPace(Gauge(r));
    return;
  }
  const std::optional<tcp_info> info = Info(fd);
  pacer_.OnSent(static_cast<uint64_t>(fd), n,
                std::chrono::microseconds(info.has_value() ? info->tcpi_rtt : 0), now);
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
  metrics::RelayUploadPace(Gauge(r));
}

void RelayPacing::Closed(const Conn& conn) {
  MutexLock lock(mu_);
  pacer_.OnClosed(static_cast<uint64_t>(conn.fd()));
  auto it = paced_.find(conn.fd());
  if (it == paced_.end()) return;
  // Its last acknowledgements still count (the socket is open until this returns).
  const std::optional<tcp_info> info = Info(conn.fd());
  if (info.has_value() && info->tcpi_bytes_acked > it->second) {
    closed_acked_ += info->tcpi_bytes_acked - it->second;
  }
  paced_.erase(it);
}

bool RelayPacing::SendFile(Conn& conn, int file, off_t offset, uint64_t n,
                           Clock::time_point deadline, const std::function<void(uint64_t)>& sent) {
  for (uint64_t done = 0; done < n;) {
    const uint64_t r = rate();
    const uint64_t len = std::min(Piece(r), n - done);
    const auto now = Clock::now();
    const auto wait = Reserve(len, r, now);
    if (now + wait >= deadline) return false;
    if (wait > Clock::duration::zero()) {
      Waited();
      std::this_thread::sleep_for(wait);
      metrics::RelayUploadWaited(std::chrono::duration<double>(wait).count());
    }
    if (!conn.SendFileBy(file, offset + static_cast<off_t>(done), len, deadline, sent)) {
      return false;
    }
    done += len;
    Sent(conn.fd(), len, Clock::now());
  }
  return true;
}

}  // namespace seedd
