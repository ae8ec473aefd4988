// A token bucket shared by the threads that send on one link: each asks before
// sending n bytes and waits what it is told. Debt is allowed, so senders that
// ask at once are spaced in the order they asked, and together they never send
// more than the rate allows beyond the burst. Time comes in as an argument, so
// tests drive it with a fake clock.
//
// Thread safety: Reserve may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "common/mutex.h"

namespace seedd {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // REQUIRES: bytes_per_second > 0.
  RateLimiter(uint64_t bytes_per_second, uint64_t burst_bytes)
      : rate_(static_cast<double>(bytes_per_second)),
        burst_(static_cast<double>(std::max<uint64_t>(burst_bytes, 1))),
        tokens_(burst_) {}
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Counts `n` bytes as sent and returns how long to wait, from `now`, before
  // sending them (zero when the bucket holds them).
  Clock::duration Reserve(uint64_t n, Clock::time_point now) {
    MutexLock lock(mu_);
    if (last_ == Clock::time_point{}) last_ = now;
    if (now > last_) {
      const double elapsed = std::chrono::duration<double>(now - last_).count();
      tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
      last_ = now;
    }
    tokens_ -= static_cast<double>(n);
    if (tokens_ >= 0) return Clock::duration::zero();
    // Owed from `last_`, which may be later than `now` for a caller whose clock
    // was read before another's.
    const auto owed = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(-tokens_ / rate_));
    return std::max(Clock::duration::zero(), last_ + owed - now);
  }

  uint64_t bytes_per_second() const {
    MutexLock lock(mu_);
    return static_cast<uint64_t>(rate_);
  }
  // A new rate from now on (the tokens held stay, up to the burst).
  // REQUIRES: bytes_per_second > 0.
  void SetRate(uint64_t bytes_per_second) {
    MutexLock lock(mu_);
    rate_ = static_cast<double>(bytes_per_second);
  }
  // A new rate and burst from now on (the tokens held stay, up to the burst).
  void SetRate(uint64_t bytes_per_second, uint64_t burst_bytes) {
    MutexLock lock(mu_);
    rate_ = static_cast<double>(bytes_per_second);
    burst_ = static_cast<double>(std::max<uint64_t>(burst_bytes, 1));
    tokens_ = std::min(tokens_, burst_);
  }

 private:
  mutable Mutex mu_;
  double rate_ GUARDED_BY(mu_);
  double burst_ GUARDED_BY(mu_);
  double tokens_ GUARDED_BY(mu_);
  Clock::time_point last_ GUARDED_BY(mu_){};
};

}  // namespace seedd
