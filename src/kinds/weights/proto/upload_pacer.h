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
#include <vector>

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

// How fast a daemon that is still pulling a model sends that model on to
// others, from the uplink's capacity as its uploads measure it, as BBR paces a
// flow from the bottleneck bandwidth it measured: uploads are held a little
// below what the uplink delivers, so its queue stays empty and this host's own
// chunk requests and TCP acknowledgements pass at once (a full uplink delays
// them behind 15-60 ms of uploads, and the host's own pull slows). No
// operator needs to know the uplink's rate.
//
// The measure is what the upload connections' receivers acknowledged
// (TCP_INFO's bytes acked, summed over them by the driver at each window's
// end): bytes acknowledged cannot outrun the path, where bytes written can
// (into socket buffers). While the acknowledged rate still grows by a tenth or
// more per window, uploads are not paced (as BBR's startup); once it stops
// growing for `plateau` windows in a row, with bytes acknowledged in each, the
// uplink (or the receivers' downlinks) is full: uploads are held to `gain` of
// the lower median of those windows (a shaper's burst lifts one). A demand
// that outgrows the pace is noticed by the senders waiting for it: then, after
// `cycle` windows, a window is paced at `probe` of the capacity; a probe the
// path carries for two windows (`more` of the capacity acknowledged in each)
// means more was there, and uploads go unpaced again until the next plateau;
// so does a probe the senders did not fill (none waited for its pace: it
// measured demand, which fetchers lower for a relay held slow); a probe that
// finds nothing more makes the next wait twice as long. The capacity never
// falls: a lower plateau is demand, not the uplink.
//
// Thread safety: none; a driver holds it under its own lock.
struct CapacityPolicy {
  // Short enough to follow a pull of a few seconds: a relay's uploads ramp up
  // within its first second. A shaper's burst (256 KB on a 50 Mbit/s tbf, a
  // sixth of a window) lifts one window: the lower median passes over it.
  std::chrono::microseconds window{250000};
  int plateau = 2;
  double gain = 0.95;  // the share of the uplink relay uploads may use
  // A probe paces at `probe` of the capacity; it found more when `more` of
  // the capacity was acknowledged.
  double probe = 1.25;
  double more = 1.1;
  // Windows between probes: `cycle` at first and after a probe that found
  // more, doubling after each that did not, up to `max_cycle`.
  int cycle = 2;
  int max_cycle = 32;
  uint64_t floor = 1u << 20;  // bytes per second, never paced below
};

class CapacityPacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CapacityPacer(CapacityPolicy policy = {}) : policy_(policy) {}

  // Whether a window has ended by `now`: the driver then reads what every
  // upload connection's receiver acknowledged and calls OnAcked.
  bool Due(Clock::time_point now) const {
    return began_ == Clock::time_point{} || now - began_ >= policy_.window;
  }
  // The upload connections' receivers have acknowledged `acked` bytes in all
  // (each connection's TCP_INFO bytes acked since it was first paced, summed,
  // those of closed ones included).
  void OnAcked(uint64_t acked, Clock::time_point now);
  // A sender waited for the pace (demand above it).
  void OnWaited() { waited_ = true; }

  // Bytes per second uploads are held to; 0: not paced.
  uint64_t rate() const { return rate_; }
  // The capacity measured (0: none yet), and whether the current window probes.
  uint64_t capacity() const { return capacity_; }
  bool probing() const { return probing_; }
  const CapacityPolicy& policy() const { return policy_; }

 private:
  void EndWindow(double rate);
  uint64_t Paced(double share) const;

  const CapacityPolicy policy_;
  uint64_t rate_ = 0;
  uint64_t capacity_ = 0;
  Clock::time_point began_{};  // the window's start, and the bytes acknowledged then
  uint64_t acked_ = 0;
  bool waited_ = false;
  bool probing_ = false;
  std::vector<double> recent_;  // the last windows' rates while unpaced
  int since_probe_ = 0;         // windows
  int probe_windows_ = 0;       // of the probe, ended
  int cycle_ = policy_.cycle;   // windows between probes now
};

}  // namespace seedd
