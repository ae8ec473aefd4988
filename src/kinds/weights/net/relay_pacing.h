// The pace of a daemon's relay uploads (what it sends of a model it is still
// pulling): an UploadPacer (proto/upload_pacer.h) fed the round trips of the
// upload connections (TCP_INFO), and --relay-upload-rate as a cap. Shared by
// every upload thread of a WeightServer: they share the host's uplink.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "common/mutex.h"
#include "common/rate_limiter.h"
#include "kinds/weights/proto/upload_pacer.h"
#include "transport/tls.h"

namespace seedd {

class RelayPacing {
 public:
  using Clock = std::chrono::steady_clock;

  // `cap`: bytes per second never exceeded (0: none); `by_delay`: the pacer
  // decides below the cap.
  RelayPacing(uint64_t cap, bool by_delay, PacerPolicy policy = {});

  // Whether relay uploads are paced at all (a cap, or the pacer).
  bool active() const { return cap_ != 0 || by_delay_; }
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
  // How long to wait before sending `n` bytes, from `now`.
  Clock::duration Reserve(uint64_t n, Clock::time_point now);
  void Sent(uint64_t conn, uint64_t n, std::chrono::microseconds rtt, Clock::time_point now);

  const uint64_t cap_;
  const bool by_delay_;
  mutable Mutex mu_;
  UploadPacer pacer_ GUARDED_BY(mu_);
  uint64_t logged_rate_ GUARDED_BY(mu_) = 0;  // the rate last logged
  RateLimiter limiter_;                       // at the rate in force; unused while there is none
};

}  // namespace seedd
