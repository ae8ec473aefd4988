// Capped exponential backoff with jitter: the waits between retries of
// something that may come back (a source that starts later), and the rounds
// of a retried attempt. Not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

namespace seedd {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : next_(initial), max_(max), rng_(std::random_device{}()) {}

  // The next wait: the current step with +-20% jitter (so a fleet that started
  // together does not retry together); the step then doubles, up to the cap.
  std::chrono::milliseconds Next() {
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const auto wait = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(
        static_cast<double>(next_.count()) * jitter(rng_)));
    next_ = std::min(max_, next_ * 2);
    return wait;
  }

 private:
  std::chrono::milliseconds next_;
  const std::chrono::milliseconds max_;
  std::mt19937_64 rng_;
};

// The rounds of an attempt retried until a deadline (a pull whose sources may
// start later): between rounds, a Backoff from 0.5 s doubling to 30 s, cut
// short by the deadline and by a stop. `seedctl pull`, the library's PullModel
// and the daemon's --pull wait alike.
class RetryRounds {
 public:
  using Clock = std::chrono::steady_clock;
  RetryRounds(Clock::time_point deadline, std::function<bool()> stopped)
      : deadline_(deadline), stopped_(std::move(stopped)) {}

  // The round being run, from 1.
  int round() const { return round_; }
  // After round() failed: false when the deadline has passed (the caller gives
  // up). Otherwise calls `before(wait, left)` with the wait ahead and the time
  // left until the deadline, waits (polling `stopped` every 50 ms) and moves to
  // the next round; true, also when stopped meanwhile (the caller checks).
  bool WaitBeforeNext(const std::function<void(Clock::duration, Clock::duration)>& before) {
    const auto now = Clock::now();
    if (now >= deadline_) return false;
    const auto wait = std::min<Clock::duration>(backoff_.Next(), deadline_ - now);
    if (before) before(wait, deadline_ - now);
    for (const auto until = now + wait; Clock::now() < until && !stopped_();) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(50), until - Clock::now()));
    }
    ++round_;
    return true;
  }

 private:
  const Clock::time_point deadline_;
  const std::function<bool()> stopped_;
  Backoff backoff_{std::chrono::milliseconds(500), std::chrono::seconds(30)};
  int round_ = 1;
};

}  // namespace seedd
