// Capped exponential backoff with jitter: the waits between retries of
// something that may come back (a source that starts later). Not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

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

}  // namespace seedd
