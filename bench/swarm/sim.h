// The fleet simulator behind swarm_sim: a discrete-event model of a network in
// which every fetcher runs the shipped FetcherCore (its neighbours, requests,
// claims and their ages, the tracker cadence, failures; proto/fetcher_core.h)
// and the origin runs the shipped ServerCore (the relays it remembers, its
// claims on chunks sent, the tracker's sample; proto/server_core.h), with the
// defaults of FetchPolicy and SwarmPolicy unless a flag overrides one.
//
// Every host's upload slots run the shipped UploadSlots (proto/upload_slots.h):
// which request is sent now, waits for the relay's own send or in line, or is
// answered "busy", and which slow holder is cut off.
//
// What is modelled here, not run from the daemon's code: the network. One
// origin (a seed) and N fetchers, each relaying what it verified. Each host has
// an uplink and a downlink (bits per second) and a one-way latency with jitter.
// A transfer's rate is min(the sender's uplink / its transfers, the receiver's
// downlink / its transfers), recomputed whenever a transfer starts or ends at
// either end: flows sharing links fairly, without TCP's slow start. With
// --uplink-queue-ms, what a host sends while its uplink is full waits that long
// in the uplink's queue. A host that connects to a neighbour learns its state,
// then each chunk it verifies (the watch answers). The origin's claims are taken when a send starts
// and dated when it ends; a host announces itself to the origin when it joins and whenever it asks
// it for relays (a state request), and each request it sends there keeps it alive. A request
// granted a slot for a chunk its fetcher has verified meanwhile (an endgame copy) is not sent: the
// real server sends it and the fetcher drains it. Failed hosts vanish; those fetching from them
// notice after --detect-ms.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kinds/weights/files/manifest.h"
#include "kinds/weights/proto/fetcher_core.h"
#include "kinds/weights/proto/server_core.h"
#include "kinds/weights/proto/upload_slots.h"

namespace swarm_sim {

using seedd::PeerId;

struct Flags {
  int hosts = 100;
  double model_gib = 1;
  double chunk_mib = 0;  // 0: as the daemon's default (seedd::AutoChunkBytes)
  double link_gbit = 10;
  // The shipped policies; flags override single fields.
  seedd::FetchPolicy fetch;
  seedd::SwarmPolicy swarm;
  int origin_slots = 0;  // the origin's upload slots; 0: SwarmPolicy::upload_slots
  // The network model (see above).
  double latency_ms = 0.5;
  double jitter = 0.2;
  // A host whose uplink is full holds what it sends this long in its uplink's
  // queue (0: no queue): its chunk requests, its "have" and "busy" answers and
  // the chunks it sends arrive that much later. Shaped links queue (tc's tbf
  // in bench/fanout.sh holds up to 50 ms), and a host busy relaying sends its
  // own requests behind its uploads.
  double uplink_queue_ms = 0;
  double origin_link_factor = 1;  // the origin's link relative to a host's
  double fail_fraction = 0;       // of hosts, failing at a random time within the bound
  double late_fraction = 0;       // of hosts, joining at a random time within the bound
  // The other hosts join one after another, evenly over this time (a script
  // starting a fleet's daemons one by one: bench/fanout.sh's 32 come up
  // 0.3-1.45 s apart); ratios are then from the first host's start.
  double start_spread_ms = 0;
  double slow_fraction = 0;  // of hosts, whose links are --slow-factor times slower
  double slow_factor = 4;
  // Once half a chunk has arrived, the next request to its sender goes out (the
  // real fetcher's requests sent ahead).
  bool ahead = true;
  double detect_ms = 1000;
  // The origin names a claim's holder and fetchers follow it (a data request's
  // "claim_holder"); false: as a server or fetcher before that.
  bool follow_holders = true;
  uint64_t seed = 1;
  int slowest = 0;  // hosts whose pull is printed in detail, the slowest, and the median one
  double give_up_bounds = 50;  // the simulation ends (failing) after this many bounds
};

enum class Ev : uint8_t {
  kJoin,
  kRequest,
  kUploadDone,
  kArrive,
  kClaimed,
  kWake,
  kBusy,
  kAskRelays,
  kHave,
  kFail,
  kGone,
  kHalf,
  kSlotWaitEnds,  // a request's own_slot_wait passed
};

struct Event {
  double t;
  uint64_t seq;
  Ev type;
  PeerId a, b;  // hosts; meaning by type
  uint32_t chunk;
  bool waiting;  // kRequest: sent by a host with nothing arriving
  bool claim;    // kRequest: asked with a claim ("SDRN")
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// A request queued at a sender: who asked, which chunk, with a claim or not.
struct Queued {
  PeerId from;
  uint32_t chunk;
  bool claim;
};

struct Host {
  std::unique_ptr<seedd::FetcherCore> core;
  std::string name;                  // as the origin and the cores know it
  std::vector<PeerId> host_of;       // by core id
  std::map<PeerId, PeerId> core_of;  // by host
  std::vector<PeerId> neighbours;    // hosts it fetches from (the origin, 0, too)
  std::vector<PeerId> watchers;      // hosts fetching from it: told what it newly has
  bool ask_pending = false;
  std::unique_ptr<seedd::UploadSlots> slots;
  std::map<seedd::UploadSlots::Id, Queued> waiting;    // requests waiting for a slot
  std::map<seedd::UploadSlots::Id, uint32_t> sending;  // slot -> transfer
  std::vector<uint32_t> ups, downs;                    // transfers in progress
  double up = 0, down = 0;                             // bytes per second
  double join = 0, done = -1;
  bool joined = false, failed = false, late = false;
  bool wake_pending = false;
  double idle = 0, idle_since = 0;   // the downlink's time with nothing arriving
  double up_busy = 0, up_since = 0;  // the uplink's time with something leaving
  // For --slowest: chunks verified per twentieth of the bound, chunks by
  // sender, the integral of transfers arriving over time, "busy" answers.
  std::vector<int> arrivals;
  std::map<PeerId, int> senders;
  double downs_time = 0, downs_since = 0;
  int busy = 0;
};

class Sim {
 public:
  explicit Sim(const Flags& f);
  // Runs every event, or until --give-up bounds of simulated time.
  void Run();
  // Prints the figures; the last line is the summary.
  void Report() const;
  // Whether every host that did not fail finished.
  bool AllDone() const;

 private:
  bool Chance(double p);
  double Latency();
  // Latency() for what host x sends, its uplink's queue included.
  double From(PeerId x);
  // How long what host x sends now waits in its uplink's queue: uplink_queue_ms
  // while its uploads fill the uplink, else 0.
  double QueueDelay(PeerId x) const;
  void Push(double t, Ev type, PeerId a, PeerId b, uint32_t chunk, bool waiting = false,
            bool claim = false);
  seedd::SchedulerClock::time_point Now() const;
  static double Seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  // Host h learns of host p (the origin is a seed); the neighbours its core
  // picks are connected.
  void Learn(PeerId h, PeerId p);
  void FillNeighbours(PeerId h);
  // Host h's connections to neighbours its core retired end.
  void Prune(PeerId h);
  static PeerId HostOf(const std::string& name);
  // h asks the origin for relays (a state request) when its core wants them,
  // and again when the core's cadence says.
  void AskRelays(PeerId h);
  // h's neighbour p failed or was dropped: h's core is told, transfers end.
  void Failed(PeerId h, PeerId p);
  void PumpAll(PeerId h);
  // h asks p for what its core picks.
  void Pump(PeerId h, PeerId p);
  // Host u's upload slots are asked for q (a request that arrived).
  void Ask(PeerId u, const Queued& q, bool waiting);
  // Host u holds slot `slot` for q: the send starts (or is answered "claimed").
  void Send(PeerId u, seedd::UploadSlots::Id slot, const Queued& q);
  // Requests at u granted a slot by a release.
  void Granted(PeerId u, const std::vector<seedd::UploadSlots::Id>& ids);
  // Recomputes the rates of the transfers at host h and when each will end.
  void Reflow(PeerId h);
  // Adds or removes transfer `id` at h's downlink or uplink, keeping the counts
  // of time it was busy.
  void AddDown(PeerId h, uint32_t id);
  void RemoveDown(PeerId h, uint32_t id);
  void AddUp(PeerId h, uint32_t id);
  void RemoveUp(PeerId h, uint32_t id);
  // Ends transfer `id` (done or cut): off both hosts, the others sped up.
  void EndTransfer(uint32_t id, bool complete);
  void Handle(const Event& e);

  const Flags f_;
  std::mt19937_64 rng_;
  double chunk_bytes_ = 0;
  uint32_t chunks_ = 0;
  double bound_ = 0;
  std::vector<Host> hosts_;
  std::unique_ptr<seedd::ServerCore> origin_;
  struct Transfer {
    PeerId u, d;
    uint32_t chunk;
    bool claim;
    double size, remaining, rate, last;
    uint32_t version;
    bool live;
    uint32_t serial;
    seedd::UploadSlots::Id slot;
  };
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  double origin_last_ = 0;  // when the origin finished its last chunk
  double now_ = 0;
  uint64_t origin_chunks_ = 0;
  uint64_t forced_ = 0;  // chunks asked of the origin plainly after a claim
};

}  // namespace swarm_sim
