// The pace of a daemon's relay uploads (what it sends of a model it is still
// pulling): a CapacityPacer (proto/upload_pacer.h) fed the bytes the upload
// connections' receivers acknowledged, or an UploadPacer fed their round trips
// (both from TCP_INFO), and --relay-upload-rate as a cap. Shared by every
// upload thread of a WeightServer: they share the host's uplink.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include "common/mutex.h"
#include "common/rate_limiter.h"
#include "kinds/weights/proto/upload_pacer.h"
#include "transport/tls.h"

namespace seedd {

// How relay uploads are paced below the cap (--relay-upload-pacing).
enum class RelayPacingMode {
  kOff,       // only the cap
  kCapacity,  // from the uplink's capacity as measured (CapacityPacer)
  kDelay,     // from the round trips' queueing (UploadPacer)
};

// "capacity", "delay" or "off".
std::optional<RelayPacingMode> ParseRelayPacingMode(std::string_view text);

class RelayPacing {
 public:
  using Clock = std::chrono::steady_clock;

  // `cap`: bytes per second never exceeded (0: none); `mode`: what decides
  // below the cap.
  RelayPacing(uint64_t cap, RelayPacingMode mode, PacerPolicy policy = {},
              CapacityPolicy capacity = {});

  // Whether relay uploads are paced at all (a cap, or a pacer).
  bool active() const { return cap_ != 0 || mode_ != RelayPacingMode::kOff; }
  // The rate uploads are held to now; 0: none.
  uint64_t rate() const;

  // sendfile() of [offset, offset + n) of `file` on `conn`, a piece at a time,
  // each when the pace lets it go (the wait counts against `deadline`), each
  // piece's round trip then given to the pacer. `sent` as Conn::SendFileBy's.
  bool SendFile(Conn& conn, int file, off_t offset, uint64_t n, Clock::time_point deadline,
                const std::function<void(uint64_t)>& sent);
  // `conn` is done with: its round trips are forgotten.
  void Closed(const Conn& conn);

 private:
  // How long to wait before sending `n` bytes, from `now`, at `rate` (0: none).
  Clock::duration Reserve(uint64_t n, uint64_t rate, Clock::time_point now);
  // A piece of `n` bytes went out on `fd`: its TCP_INFO to the pacer.
  void Sent(int fd, uint64_t n, Clock::time_point now);
  void Waited();
  // What every paced connection's receiver acknowledged since it was first
  // paced, closed ones included.
  uint64_t Acked() REQUIRES(mu_);
  // The rate a pacer holds uploads to (0: none).
  uint64_t Paced() const REQUIRES(mu_);
  // The bytes sent between two looks at the pace, at `rate` (0: none).
  uint64_t Piece(uint64_t rate) const;
  // What seedd_relay_upload_pace_bytes_per_second shows for a pacer's `paced`.
  uint64_t Gauge(uint64_t paced) const;

  const uint64_t cap_;
  const RelayPacingMode mode_;
  mutable Mutex mu_;
  UploadPacer pacer_ GUARDED_BY(mu_);
  CapacityPacer capacity_ GUARDED_BY(mu_);
  // Connections paced by capacity (open: Closed takes them out before their
  // socket closes) and their bytes acknowledged when first paced.
  std::map<int, uint64_t> paced_ GUARDED_BY(mu_);
  uint64_t closed_acked_ GUARDED_BY(mu_) = 0;
  uint64_t logged_rate_ GUARDED_BY(mu_) = 0;  // the rate last logged
  RateLimiter limiter_;                       // at the rate in force; unused while there is none
};

}  // namespace seedd
