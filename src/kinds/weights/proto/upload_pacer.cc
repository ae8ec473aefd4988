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

void CapacityPacer::OnAcked(uint64_t acked, Clock::time_point now) {
  if (began_ != Clock::time_point{}) {
    if (now - began_ < policy_.window) return;
    const double seconds = std::chrono::duration<double>(now - began_).count();
    // A long silence is no window: nothing was measured in it.
    const double rate = now - began_ > 4 * policy_.window || acked < acked_
                            ? 0
                            : static_cast<double>(acked - acked_) / seconds;
    EndWindow(rate);
  }
  began_ = now;
  acked_ = acked;
  waited_ = false;
}

uint64_t CapacityPacer::Paced(double share) const {
  return std::max<uint64_t>(policy_.floor, static_cast<uint64_t>(share * capacity_));
}

void CapacityPacer::EndWindow(double rate) {
  if (probing_) {
    const bool more = rate >= policy_.more * static_cast<double>(capacity_);
    // A probe that found more is confirmed by a second window: acknowledgements
    // of what waited in the queue before it, or a shaper's burst, can lift one
    // window's rate above the uplink's.
    if (more && ++probe_windows_ < 2) return;
    probing_ = false;
    probe_windows_ = 0;
    since_probe_ = 0;
    // A probe the senders did not fill (none waited for its pace) measured
    // what was asked, not the path: fetchers ask less of a relay held slow
    // (they take chunks where they come fastest), so a plateau of low demand
    // would hold the relay there for good. Unpaced too, until demand and the
    // path set the next plateau.
    if (more || !waited_) {
      // The path carried more than the capacity measured: unpaced until the
      // next plateau measures it (a probe's own windows are not a measure:
      // acknowledgements of what queued during it lift them).
      rate_ = 0;
      recent_.assign(1, rate);
      cycle_ = policy_.cycle;
      return;
    }
    // Each probe that finds nothing more waits twice as long for the next
    // (it queued at the uplink while it lasted).
    cycle_ = std::min(2 * cycle_, policy_.max_cycle);
    rate_ = Paced(policy_.gain);
    return;
  }
  if (rate_ != 0) {
    ++since_probe_;
    if (waited_ && since_probe_ >= cycle_) {
      probing_ = true;
      rate_ = Paced(policy_.probe);
    }
    return;
  }
  if (rate <= 0) {
    recent_.clear();  // nothing acknowledged: no plateau across an idle window
    return;
  }
  // Unpaced: a plateau is `plateau` windows none of which grew a tenth over
  // the one before it.
  if (!recent_.empty() && rate >= 1.1 * recent_.back()) recent_.clear();
  recent_.push_back(rate);
  if (recent_.size() < static_cast<size_t>(policy_.plateau)) return;
  // The lower median: one window lifted by a shaper's burst does not count.
  std::vector<double> last(recent_.end() - policy_.plateau, recent_.end());
  const size_t mid = (last.size() - 1) / 2;
  std::nth_element(last.begin(), last.begin() + static_cast<ptrdiff_t>(mid), last.end());
  // A plateau below the capacity measured before is demand or the receivers'
  // downlinks, not the uplink, which does not shrink.
  capacity_ = std::max(capacity_, static_cast<uint64_t>(last[mid]));
  rate_ = Paced(policy_.gain);
  since_probe_ = 0;
  recent_.clear();
}

}  // namespace seedd
