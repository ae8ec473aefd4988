#include "kinds/weights/proto/upload_pacer.h"

#include <algorithm>

namespace seedd {

void UploadPacer::OnSent(uint64_t bytes, std::chrono::microseconds rtt, Clock::time_point now) {
  if (began_ == Clock::time_point{}) began_ = now;
  // A sample past the interval's end closes it first, then opens the next.
  if (now - began_ >= policy_.interval) EndInterval(now);
  bytes_ += bytes;
  if (rtt.count() > 0) {
    if (base_.count() == 0 || rtt < base_) base_ = rtt;
    if (least_.count() == 0 || rtt < least_) least_ = rtt;
  }
}

void UploadPacer::EndInterval(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - began_).count();
  const double sent = static_cast<double>(bytes_) / seconds;  // bytes per second
  const double floor = static_cast<double>(policy_.floor);
  if (least_.count() > 0) {
    queueing_ = least_ - base_;
    const double target = static_cast<double>(policy_.target.count());
    const double queued = static_cast<double>(queueing_.count());
    if (queued > target) {
      // What was sent overfilled the queue: below it, and lower each interval
      // the queue stays.
      const double from = rate_ == 0 ? sent : std::min(static_cast<double>(rate_), sent);
      rate_ = static_cast<uint64_t>(std::max(floor, from * policy_.cut));
    } else if (rate_ != 0) {
      const double grown =
          static_cast<double>(rate_) * (1 + policy_.growth * (target - queued) / target);
      // No credit beyond what the uploads use: a rate far above it would let a
      // burst fill the queue before the next cut.
      rate_ = static_cast<uint64_t>(std::max(floor, std::min(grown, std::max(2 * sent, floor))));
    }
  }
  began_ = now;
  bytes_ = 0;
  least_ = std::chrono::microseconds{0};
}

}  // namespace seedd
