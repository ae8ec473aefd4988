// How fast a daemon that is still pulling a model sends that model on to
// others, decided by the delay its uploads meet, as LEDBAT (RFC 6817) lets
// BitTorrent's uTP yield to a host's own traffic. A full uplink queues this
// host's own chunk requests and TCP acknowledgements behind its uploads, and its
// own pull slows to a fraction of its downlink; no operator needs to know the
// uplink's rate. A connection's round trip above the least it had is queueing,
// somewhere on its path: at this host's uplink, which every upload connection
// crosses, or at its receiver's downlink (full while that receiver pulls at full
// speed, which is no reason to slow down). So the uplink's queueing is the
// least over the connections: while it stays under `target` the rate grows;
// above it, the rate is cut. Before any queueing is seen, uploads are not paced.
//
// Thread safety: none; a driver holds it under its own lock. Time and the round
// trips come in as arguments (the driver reads TCP_INFO), so tests use a fake
// clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>

namespace seedd {

struct PacerPolicy {
  // Queueing above the least round trip that is tolerated: a few ms of an uplink's
  // buffer, well under the 25-100 ms a loaded home or rack uplink queues.
  std::chrono::microseconds target{5000};
  // The rate is changed at most once per interval, from the least round trip
  // sampled in it (one late sample is not queueing).
  std::chrono::microseconds interval{100000};
  // Queueing above target: the rate in force (or what was sent, when none
  // was) is cut to this share, down to twice the cut for a queue 5 targets deep;
  // then not again for `cooldown` intervals (the smoothed round trips lag).
  double cut = 0.85;
  int cooldown = 3;
  // Under target: the rate grows by up to this share per interval, in
  // proportion to how far under target the queueing is.
  double growth = 0.10;
  // Never paced below this (relays keep moving), in bytes per second.
  uint64_t floor = 1u << 20;
  // Connections whose least round trip is remembered; the oldest go first.
  size_t max_connections = 1024;
};

class UploadPacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit UploadPacer(PacerPolicy policy = {}) : policy_(policy) {}

  // `bytes` sent on upload connection `conn` whose smoothed round trip is now
  // `rtt` (zero: unknown, the bytes still count).
  void OnSent(uint64_t conn, uint64_t bytes, std::chrono::microseconds rtt, Clock::time_point now);
  // Connection `conn` ended (its least round trip is forgotten).
  void OnClosed(uint64_t conn) { bases_.erase(conn); }

  // Bytes per second uploads are held to; 0: not paced.
  uint64_t rate() const { return rate_; }
  // The least round trip any connection had, and the queueing of the last full
  // interval (the least over its samples of a round trip above its connection's least).
  std::chrono::microseconds base() const { return base_; }
  std::chrono::microseconds queueing() const { return queueing_; }
  const PacerPolicy& policy() const { return policy_; }

 private:
  void EndInterval(Clock::time_point now);

  const PacerPolicy policy_;
  uint64_t rate_ = 0;
  std::chrono::microseconds base_{0};
  std::map<uint64_t, std::chrono::microseconds> bases_;  // each connection's least round trip
  std::chrono::microseconds queueing_{0};
  // The interval being sampled.
  Clock::time_point began_{};
  uint64_t bytes_ = 0;
  std::optional<std::chrono::microseconds> least_;  // the least queueing sampled in it
  int cooling_ = 0;                                 // intervals left before another cut
};

}  // namespace seedd
