// ProgressLog: a pull's progress as an info line every 10 s (bytes, share,
// rate, sources, ETA), for logs people read while a pull runs; the daemon's
// pulls and PullModel both log through it. Not thread-safe: the fetch calls
// Update under its lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {

class ProgressLog {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kEvery{10};

  ProgressLog(std::string model, uint64_t total, Clock::time_point start = Clock::now())
      : model_(std::move(model)), total_(total), start_(start), last_(start_) {}

  // `verified` of the total so far, `resumed` of it from an earlier pull.
  void Update(uint64_t verified, uint64_t resumed, size_t sources,
              Clock::time_point now = Clock::now()) {
    if (now - last_ < kEvery || verified >= total_) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = static_cast<double>(verified - std::min(verified, resumed)) / secs;
    const double eta = rate > 0 ? static_cast<double>(total_ - verified) / rate : -1;
    LogFields fields{{"model", model_},       {"verified_bytes", verified},
                     {"total_bytes", total_}, {"bytes_per_second", rate},
                     {"sources", sources},    {"eta_seconds", eta >= 0 ? Json(eta) : Json()}};
    Logger().info(
        "Pulling model {}: {} of {} ({:.0f}%), {}, {} source(s), ETA {}", model_,
        HumanBytes(verified), HumanBytes(total_),
        100.0 * static_cast<double>(verified) / static_cast<double>(std::max<uint64_t>(total_, 1)),
        HumanRate(rate), sources, HumanSeconds(eta));
  }

 private:
  const std::string model_;
  const uint64_t total_;
  const Clock::time_point start_;
  Clock::time_point last_;
};

}  // namespace seedd
