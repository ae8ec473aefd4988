// The fleet simulator behind swarm_sim: a discrete-event simulation of a fleet
// pulling one model at once, every fetcher running the real SwarmScheduler
// (src/kinds/weights/proto/swarm_scheduler.h).
//
// Model: one origin (a seed) and N fetchers. Each host has an uplink and a
// downlink (bits per second) and a one-way latency with jitter. A host sends up
// to --up-slots chunks at once (one per connection, its queue first come first
// served; a request from a host it is sending to waits for that send to end, as
// the real server's own-slot wait, and beyond the slots a host is answered
// "busy", except a host that had nothing arriving when it asked and was turned
// away moments ago: it waits in line for the next free slot, ahead of the next
// request of the host whose send ended (--fair-slots, the real server's rule);
// a transfer's rate is min(the sender's uplink / its transfers, the receiver's
// downlink / its transfers), recomputed whenever a transfer starts or ends at
// either end: flows sharing links fairly, without TCP's slow start. Neighbours
// are handed out by the origin (a tracker): random relays that have joined, up
// to --degree, that the host fetches from (as the real fetcher: a server serves
// whoever asks, within its upload slots), asked for while the set has room
// (first after --first-ask-ms, the wait doubling to --state-ms, as the real
// fetcher's state requests), and replaced when one fails, with --symmetric
// false (a host told "claimed" for a chunk no neighbour has takes the holder as
// a neighbour, in place of the one offering least); by default neighbours link
// both ways and only hosts with room, asking again after 1 s, a full host
// taking in a host with fewer than half its neighbours in place of its least
// useful one (--make-room). A host tells those fetching from it each chunk it
// verifies (a HAVE message, the real watch answer); it asks a neighbour for
// chunks as its scheduler decides, --pipeline at a time and --max-requests in
// all. The origin defers a chunk it sent within the last --claim-chunks chunk
// times ("ask the relays"), as the real data plane's claims do. Failed hosts
// vanish; their neighbours notice after --detect-ms and get a replacement.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kinds/weights/manifest.h"
#include "kinds/weights/proto/swarm_scheduler.h"

namespace swarm_sim {

using seedd::PeerId;
using seedd::SwarmScheduler;

struct Flags {
  int hosts = 100;
  double model_gib = 1;
  double chunk_mib = 0;  // 0: as the daemon's default (seedd::AutoChunkBytes)
  double link_gbit = 10;
  // Defaults are the real daemon's: 16 neighbours (the origin and 15 relays), 4
  // upload slots, "busy" beyond them, a busy answer retried after 50 ms, one
  // request at a time to a relay and to the origin (a relaying fetcher's).
  int degree = 15;
  // Neighbours link both ways, and only hosts with room (the default: the
  // figures of docs/benchmarks.md); false: a host picks the relays it fetches
  // from, as the real fetcher does, asking the tracker on the real cadence.
  bool symmetric = true;
  // With symmetric links, a host with fewer than half its neighbours (a late
  // joiner, when every other set is full) is taken in by a full host in place of
  // that host's least useful neighbour, if that one has more than half.
  bool make_room = true;
  int max_watchers = 0;      // hosts a host serves as their neighbour (0: no bound)
  double first_ask_ms = 50;  // the tracker asked again first after this (FetchOptions)
  double state_ms = 500;     // then the wait doubles up to this (FetchOptions::state_interval)
  int origin_degree = -1;    // fetchers the origin serves directly (-1: all); the others use relays
  int pipeline = 1;          // requests in flight per relay neighbour (FetchOptions::peer_pipeline)
  int seed_pipeline = 1;     // requests in flight to the origin per fetcher
  int max_requests = 4;      // requests in flight per fetcher in all (FetchOptions::swarm_requests)
  int catch_up = 2;          // requests beyond --max-requests for a host behind its neighbours
  int up_slots = 4;
  int origin_slots = 0;  // the origin's upload slots; 0: --up-slots
  int backlog = 0;       // requests a relay queues beyond its slots; more are "busy"; -1: no limit
  bool origin_busy = true;  // the origin answers "busy" beyond its slots instead of queueing
  double busy_retry_ms = 50;
  // A request from a host with nothing arriving, turned away "busy" within two
  // retry times, waits in line for the next free slot, ahead of the next request
  // of the host whose send just ended.
  bool fair_slots = true;
  double latency_ms = 0.5;
  double jitter = 0.2;
  double origin_link_factor = 1;  // the origin's link relative to a host's
  double fail_fraction = 0;       // of hosts, failing at a random time within the bound
  double late_fraction = 0;       // of hosts, joining at a random time within the bound
  double slow_fraction = 0;       // of hosts, whose links are --slow-factor times slower
  double slow_factor = 4;
  // Once half a chunk has arrived, the next request to its sender goes out (the
  // real fetcher's requests sent ahead).
  bool ahead = true;
  std::string origin_claim = "holder";  // or "window"
  double claim_chunks = 8;              // the origin's claim on a chunk it sent, in its chunk times
  double detect_ms = 1000;
  uint64_t seed = 1;
  double give_up_bounds = 50;  // the simulation ends (failing) after this many bounds
};

enum class Ev : uint8_t {
  kJoin,
  kRequest,
  kUploadDone,
  kArrive,
  kDeferred,
  kWake,
  kBusy,
  kRetry,
  kHave,
  kHalf,
  kFail,
  kGone
};

struct Event {
  double t;
  uint64_t seq;
  Ev type;
  PeerId a, b;  // meaning by type
  uint32_t chunk;
  bool waiting;  // kRequest: sent by a host with nothing arriving
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Host {
  std::unique_ptr<SwarmScheduler> sched;
  std::vector<PeerId> neighbours;               // relays it fetches from (and the origin, 0)
  std::vector<PeerId> watchers;                 // hosts fetching from it: told what it newly has
  std::unique_ptr<seedd::TrackerCadence> asks;  // the real fetcher's (--symmetric false)
  bool retry_pending = false;
  std::deque<std::pair<PeerId, uint32_t>> queue;  // requests to serve: (requester, chunk)
  // Requests from a requester this host is sending to: each waits for that send
  // to end, then takes its slot (the real server's own-slot wait).
  std::vector<std::pair<PeerId, uint32_t>> held;
  std::vector<std::pair<PeerId, double>> turned_away;  // answered "busy", and when
  std::vector<uint32_t> ups, downs;                    // transfers in progress
  double up = 0, down = 0;                             // bytes per second
  double join = 0, done = -1;
  bool joined = false, failed = false, late = false;
  double failed_at = 0;
  bool wake_pending = false;
  double idle = 0, idle_since = 0;  // the downlink's time with nothing arriving
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
  void Push(double t, Ev type, PeerId a, PeerId b, uint32_t chunk, bool waiting = false);
  seedd::SchedulerClock::time_point Now() const;

  // Links h with up to `want` random relays that have joined, both ways.
  void FindNeighbours(PeerId h);

  // h fetches from p / no longer does.
  void Link(PeerId h, PeerId p);
  void Unlink(PeerId h, PeerId p);
  // h and p no longer fetch from each other; transfers between them end.
  void DropLink(PeerId h, PeerId p);
  // The origin deferred chunk c to h, and no neighbour of h has it: h takes the
  // fetcher the origin sent it to as a neighbour (the tracker lists the relays
  // holding what the seed sent first), in place of the neighbour offering least.
  void Follow(PeerId h, uint32_t c);

  // A host with fewer than half its neighbours asks the tracker again in a second.
  void RetryIfAlone(PeerId h);

  // Neighbours for h from the tracker, then its requests.
  void Connect(PeerId h);
  void PumpAll(PeerId h);
  // h asks p for what its scheduler picks.
  void Pump(PeerId h, PeerId p);

  // Whether the origin answers "ask the relays" for chunk c: while it is being
  // sent, then for `claim` seconds ("window"), or as long as the fetcher it went
  // to is not known to have failed ("holder").
  bool Claimed(uint32_t c, double claim) const;

  int SlotsOf(PeerId h) const;

  void StartUpload(PeerId u);

  // Recomputes the rates of the transfers at host h and when each will end.
  void Reflow(PeerId h);

  // Ends transfer `id` (done or cut): off both hosts, the others sped up.
  void EndTransfer(uint32_t id);

  void Handle(const Event& e);

  const Flags f_;
  std::mt19937_64 rng_;
  double chunk_bytes_ = 0;
  uint32_t chunks_ = 0;
  double bound_ = 0;
  std::vector<Host> hosts_;
  struct Transfer {
    PeerId u, d;
    uint32_t chunk;
    double remaining, rate, last;
    uint32_t version;
    bool live;
    uint32_t serial;
  };
  std::vector<Transfer> transfers_;
  std::vector<uint32_t> free_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  double origin_last_ = 0;  // when the origin finished its last chunk
  double now_ = 0;
  std::vector<double> sent_at_;  // per chunk: when the origin last sent it; -1 never
  std::vector<PeerId> holder_;   // per chunk: the fetcher the origin sent it to

  uint64_t origin_chunks_ = 0;

  int origin_fetchers_ = 0;
};

}  // namespace swarm_sim
