#include "kinds/weights/proto/upload_pacer.h"

#include <algorithm>

namespace seedd {

void UploadPacer::OnSent(uint64_t conn, uint64_t bytes, std::chrono::microseconds rtt,
                         Clock::time_point now) {
  if (began_ == Clock::time_point{}) began_ = now;
  // A sample past the interval's end closes it first, then opens the next.
  if (now - began_ >= policy_.interval) EndInterval(now);
  bytes_ += bytes;
  if (rtt.count() > 0) {
    if (base_.count() == 0 || rtt < base_) base_ = rtt;
    auto [it, added] = bases_.try_emplace(conn, rtt);
    if (rtt < it->second) it->second = rtt;
    if (added && bases_.size() > policy_.max_connections) bases_.erase(bases_.begin());
    const std::chrono::microseconds queued = rtt - it->second;
    if (!least_.has_value() || queued < *least_) least_ = queued;
  }
}

void UploadPacer::EndInterval(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - began_).count();
  const double sent = static_cast<double>(bytes_) / seconds;  // bytes per second
  const double floor = static_cast<double>(policy_.floor);
  if (least_.has_value()) {
    queueing_ = *least_;
    const double target = static_cast<double>(policy_.target.count());
    const double queued = static_cast<double>(queueing_.count());
    if (cooling_ > 0) {
      // The round trips read are smoothed and lag a cut by a few intervals:
      // what they say until then is not the cut's effect yet.
      --cooling_;
    } else if (queued > target) {
      // What was sent overfilled the queue: below it (the rate in force, or
      // what was sent before any), the deeper the queue, the more.
      const double from = rate_ == 0 ? sent : static_cast<double>(rate_);
      const double excess = std::min(1.0, (queued - target) / (4 * target));
      rate_ = static_cast<uint64_t>(std::max(floor, from * (1 - (1 - policy_.cut) * (1 + excess))));
      cooling_ = policy_.cooldown;
    } else if (rate_ != 0) {
      // Grows while the queue is short, but no further than twice what the
      // uploads use: credit far above it would let a burst fill the queue
      // before the next cut. A quiet interval lowers nothing.
      const double grown =
          static_cast<double>(rate_) * (1 + policy_.growth * (target - queued) / target);
      const double room = std::max({static_cast<double>(rate_), 2 * sent, floor});
      rate_ = static_cast<uint64_t>(std::min(grown, room));
    }
  }
  began_ = now;
  bytes_ = 0;
  least_.reset();
}

}  // namespace seedd
