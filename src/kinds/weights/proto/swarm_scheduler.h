// The chunk policy of one fetcher in a swarm, as a sans-I/O core: no sockets, no
// threads, no clock of its own. A driver (the data-plane fetcher, or the
// simulator in bench/) reports what happens: a neighbour joined or left, says it
// has chunks, a chunk arrived, failed or was deferred by a seed. It asks which
// chunk to request next from a neighbour with a free slot. Time comes in as
// arguments, so tests drive it event by event with a fake clock.
//
// Policy:
//  - rarest first: among the chunks this host lacks and has not asked for, the
//    one the fewest relay neighbours have; ties broken at random, so fetchers
//    that start together ask for different chunks;
//  - a seed (the origin) is asked only for chunks no proven relay neighbour has,
//    and not before the time it deferred a chunk to (it sent that chunk to
//    another fetcher already): each chunk leaves the seed about once, then the
//    seed serves what nobody else has;
//  - a relay is proven once a chunk from it arrived (verified): until then what
//    it offers is asked of it but not counted, so relays that offer everything
//    and send nothing (anyone with the token can announce any number) cannot
//    keep the seed idle, and the seed's requests are not cut back for them;
//  - endgame: once every missing chunk is in flight, a neighbour with a free slot
//    is asked for an in-flight chunk it has (at most kEndgameCopies requests per
//    chunk); the first copy to arrive cancels the others;
//  - at most max_requests requests to relays are in flight at once (a seed's
//    are not counted: what only it has must not wait behind relays): a host's
//    downlink split among many relays makes every transfer slow, each holds
//    one of its sender's few upload slots for longer, and the uplinks of the
//    swarm idle (simulated: 1,000 hosts p99 1.57x the bound without a bound,
//    1.33x with 4 against 4 upload slots);
//  - a neighbour that says it is busy is asked for nothing until the time it
//    was given, and its chunk is asked elsewhere;
//  - a relay that fails is dropped at once, a seed after max_seed_failures
//    (anyone with the token can announce a relay; the seed was given by the user);
//  - zones (SetZoned): a neighbour of another zone (SetRemote) is asked
//    only for chunks no neighbour of this host's zone has (a seed of the zone
//    has what it offers) and that this host owns: of the zone's members it
//    knows (itself and the relays of its zone, but neighbours that hold every
//    chunk), the one
//    whose key scores highest for the chunk (rendezvous hashing), so each
//    chunk crosses into a zone about once and its members pass it on. Others
//    are taken from a remote neighbour only once nothing arrived for
//    zone_patience (an owner that stalls or left unseen is not waited for),
//    and then one after another: those arriving do not end the wait.
//
// Cost: O(chunks) bits per neighbour; a call is O(1) typically (chunks are kept
// in buckets by how many relay neighbours have them), O(chunks) at worst.
//
// Thread safety: none; the driver serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace seedd {

using PeerId = uint32_t;
using SchedulerClock = std::chrono::steady_clock;

inline constexpr int kEndgameCopies = 2;

struct SchedulerOptions {
  size_t max_neighbours = 12;  // seeds included
  int pipeline = 4;            // requests in flight per neighbour
  int max_seed_failures = 3;
  // Requests in flight to relays in all (0: no bound beyond each relay's
  // slots), and to one seed while relays are neighbours (0: its slots).
  int max_requests = 0;
  int seed_requests = 0;
  // Requests to relays beyond max_requests while this host holds fewer chunks
  // than its relay neighbours do on average (by more than 1/32 of the model):
  // a host that fell behind takes a larger share of its neighbours' uplinks.
  int catch_up_requests = 0;
  uint64_t random_seed = 0;  // ties are broken with it (a driver passes a random one)
  // The lowest-numbered chunk first while no relay is proven and once a quarter
  // of the chunks or fewer are unrequested (FetchPolicy::in_order).
  bool in_order = false;
  // Zones (SetZoned): see the policy above; requests to neighbours of other
  // zones in flight at once (0: no bound beyond the others).
  std::chrono::milliseconds zone_patience{1000};
  int zone_requests = 0;
};

// The rendezvous key of a host's name (HOST:PORT as announced): the same on
// every host (FNV-1a, 64 bits).
uint64_t ZoneKey(std::string_view name);

// A request that a copy arriving elsewhere made useless: the driver cancels it.
struct Cancel {
  PeerId peer;
  uint32_t chunk;
};

class SwarmScheduler {
 public:
  SwarmScheduler(size_t chunks, SchedulerOptions options);

  // A chunk verified before (a resumed pull): never requested.
  void AlreadyHave(uint32_t chunk);

  // False when the neighbour set is full or `peer` is known. A seed has every chunk
  // until it says otherwise (a seed that is itself still fetching). `slots`:
  // requests in flight to it at once (0: options.pipeline).
  bool AddNeighbour(PeerId peer, bool seed, int slots = 0);
  // Its requests go back to the missing chunks.
  void RemoveNeighbour(PeerId peer);
  // This host has a zone; `self_key` is its rendezvous key (ZoneKey of its
  // name). Neighbours are of its zone until SetRemote says otherwise.
  void SetZoned(uint64_t self_key);
  bool zoned() const { return zoned_; }
  // Requests to neighbours of other zones so far: for chunks this host owns,
  // and for others (taken once it starved, endgame copies included).
  uint64_t crossed_owned() const { return crossed_owned_; }
  uint64_t crossed_other() const { return crossed_other_; }
  // `peer` is of another zone than this host (remote) or of its own, with its
  // rendezvous key (ZoneKey of its name). Neighbours are local until said.
  void SetRemote(PeerId peer, bool remote, uint64_t key);
  bool IsRemote(PeerId peer) const {
    const Neighbour* n = Find(peer);
    return n != nullptr && n->remote;
  }
  // The relays of this host's zone it knows (neighbours or not), with their
  // rendezvous keys: the members that own chunks (Owns). Neighbours among them
  // that hold every chunk fetch nothing more and own none.
  void SetZoneMembers(std::vector<std::pair<PeerId, uint64_t>> members) {
    members_ = std::move(members);
  }
  // The members are known as far as the seeds tell (a seed's state listed the
  // relays of this zone): until then, or until it starves, this host takes
  // nothing across zones (it would own every chunk, knowing no member).
  void MembersKnown() { members_known_ = true; }
  // Whether a neighbour of this host's zone has `chunk` (a relay, or a
  // seed that offers it).
  bool ZoneHas(uint32_t chunk) const;
  // Whether this host is the one of its zone to fetch `chunk` across (see the
  // policy above); true when not zoned.
  bool Owns(uint32_t chunk) const;
  void NeighbourHas(PeerId peer, uint32_t chunk);
  // How many chunks `peer` says it has in all, those this host has included
  // (a watch for wanted chunks tells it only of the others): Behind counts it.
  void NeighbourCount(PeerId peer, uint64_t count);
  // Its whole state (true: has the chunk).
  void NeighbourState(PeerId peer, const std::vector<bool>& have);
  // A seed answered that it does not have `chunk` (yet): its request ends, and
  // the seed is not asked for it again until it says it has it.
  void Lacks(PeerId seed, uint32_t chunk);

  // The chunk to request from `peer` now, marked in flight; nullopt when its slots
  // are full or it has nothing this host should ask it for. `ahead`: a request
  // sent while a chunk from `peer` is still arriving, to wait at `peer` and
  // follow it without a round trip: one more than its slots, beyond
  // max_requests (it replaces the one arriving).
  std::optional<uint32_t> Next(PeerId peer, SchedulerClock::time_point now, bool ahead = false);
  // Whether Next(peer, now) may give a request: false when it certainly would
  // not (its slots are full, it said busy, the bound on requests to relays is
  // reached, or it is a relay of this zone with nothing missing and unasked
  // outside the endgame). A driver wakes only the connections that can use a
  // freed request. O(chunks it has) at worst.
  bool MayAsk(PeerId peer, SchedulerClock::time_point now) const;
  // Requests to relays that may go out now beyond those in flight (INT_MAX
  // without a bound).
  int FreeRelayRequests() const;
  // When a deferral that keeps `peer` from work now ends (its "busy", or for a
  // seed a chunk only it offers that it said was claimed): Next may answer
  // then without any other event. time_point::max() when none.
  SchedulerClock::time_point NextChance(PeerId peer, SchedulerClock::time_point now) const;
  // `chunk` arrived from `peer` and was verified (which proves a relay). Returns
  // the other requests of it to cancel (endgame copies). `now`: when (zones
  // count the time since the last arrival).
  std::vector<Cancel> Arrived(PeerId peer, uint32_t chunk, SchedulerClock::time_point now = {});
  // `peer` (a relay) has proven itself (Arrived does this at its first chunk):
  // from now on what it offers is counted, and keeps the seed from those chunks.
  void Prove(PeerId peer);
  // The request failed (an error, a bad digest, a deadline). True when `peer` is
  // dropped for it (then removed).
  bool Failed(PeerId peer, uint32_t chunk);
  // A failure not tied to one chunk (a connection that broke); the same rule.
  bool Failed(PeerId peer);
  // The request ended without the chunk and without blame (a connection closed
  // with requests still queued): the chunk goes back to the missing ones.
  void Returned(PeerId peer, uint32_t chunk);
  // A seed answered that it sent `chunk` to another fetcher: ask relays for it,
  // and this seed not before `until`.
  void Deferred(PeerId seed, uint32_t chunk, SchedulerClock::time_point until);
  // `peer` answered that it is busy (its upload slots are taken): the chunk is
  // asked elsewhere, and `peer` for nothing before `until`.
  void Busy(PeerId peer, uint32_t chunk, SchedulerClock::time_point until);

  bool Complete() const { return done_ == state_.size(); }
  size_t missing() const { return state_.size() - done_; }
  bool Has(uint32_t chunk) const { return state_[chunk] == kDone; }
  size_t neighbours() const { return ids_.size(); }
  // How many more neighbours the driver may add.
  size_t NeighboursWanted() const;
  // True when no neighbour has a chunk this host misses and nothing is in flight:
  // only new neighbours can help.
  bool Stuck() const;
  // Requests in flight to `peer`, and to all relays.
  int InFlight(PeerId peer) const;
  // Requests `peer`'s slots take beyond those in flight (0 when not a neighbour).
  int Room(PeerId peer) const;
  int RelayRequests() const { return relay_requests_; }
  // How many proven relay neighbours have `chunk`.
  int Holders(uint32_t chunk) const { return relays_having_[chunk]; }
  // Whether `peer` is a neighbour that has `chunk`, as far as this host knows.
  bool Offers(PeerId peer, uint32_t chunk) const;
  // Whether relay neighbour `peer` has a chunk this host lacks.
  bool OffersAnyMissing(PeerId peer) const;
  bool IsNeighbour(PeerId peer) const { return Find(peer) != nullptr; }
  size_t relay_neighbours() const { return ids_.size() - seeds_; }
  // Whether this host holds fewer chunks than its proven relay neighbours on
  // average (by more than 1/32 of the model).
  bool Behind() const;
  // The relay neighbour offering the fewest chunks this host lacks (the one to
  // replace when a better one is found), nullopt without relays. O(neighbours x
  // chunks).
  std::optional<PeerId> LeastUseful() const;

 private:
  enum State : uint8_t { kMissing, kInFlight, kDone };
  struct Neighbour {
    bool seed = false;
    int slots = 0;
    std::vector<bool> have;
    std::vector<uint32_t> owned;      // the chunks it has (a relay), in announcement order
    std::vector<uint32_t> requested;  // a few: its slots
    uint64_t count = 0;               // chunks it says it has in all (NeighbourCount)
    int failures = 0;
    bool proven = false;                      // a relay that delivered a verified chunk
    SchedulerClock::time_point not_before{};  // busy until then
    bool remote = false;                      // of another zone
    uint64_t key = 0;                         // its rendezvous key
  };

  // Bucket bookkeeping of the chunks that are missing and not requested.
  void Insert(uint32_t chunk);
  void Erase(uint32_t chunk);
  void Recount(uint32_t chunk, int delta);
  // Marks `chunk` requested from `n`.
  uint32_t Take(Neighbour& n, uint32_t chunk);
  // Takes `chunk` off `n`'s requests; false when it was not requested there.
  bool Unrequest(Neighbour& n, uint32_t chunk);
  // `peer`'s request of `chunk` is over (arrived elsewhere, failed, deferred).
  void Release(Neighbour& n, uint32_t chunk);
  std::optional<uint32_t> Rarest(const Neighbour& n, SchedulerClock::time_point now);
  // The first missing chunk `n` has (a seed: one no relay has, not deferred).
  std::optional<uint32_t> FirstInOrder(const Neighbour& n, SchedulerClock::time_point now);
  std::optional<uint32_t> EndgameCopy(const Neighbour& n, SchedulerClock::time_point now);
  // For a remote neighbour: a missing chunk it has that this host's zone lacks,
  // one this host owns, else (once starved) any.
  std::optional<uint32_t> AcrossZones(const Neighbour& n, SchedulerClock::time_point now);
  // Whether a remote neighbour may be asked for `c` (the zone lacks it; a seed:
  // no relay neighbour has it and it is not deferred).
  bool CrossingWanted(const Neighbour& n, uint32_t c, SchedulerClock::time_point now) const;
  // Nothing arrived for zone_patience, or for four times that from the first
  // request on (the first chunks of a fleet starting together wait for the
  // seeds' upload slots).
  bool Starved(SchedulerClock::time_point now) const {
    return quiet_since_ != SchedulerClock::time_point{} &&
           now - quiet_since_ >= options_.zone_patience * (arrived_any_ ? 1 : 4);
  }
  // Counts `n`'s holding of `c` in local_having_ when it is a relay of this
  // zone (proven or not: one that lies holds the zone back for zone_patience).
  void LocalCount(const Neighbour& n, uint32_t c, int delta);
  // Requests `n` may have in flight now.
  int SlotsOf(const Neighbour& n) const;
  // Whether `n` has a chunk that is missing and not requested.
  bool HasUnrequested(const Neighbour& n) const;
  // Whether `n` may have one more request now: a free slot (one more for a
  // request `ahead`), not busy, and for a relay the bound on requests to
  // relays not reached (a request ahead replaces the one arriving).
  bool HasRoom(const Neighbour& n, SchedulerClock::time_point now, bool ahead) const;

  const SchedulerOptions options_;
  std::mt19937_64 rng_;
  std::vector<State> state_;
  std::vector<uint16_t> relays_having_;  // per chunk: relay neighbours that have it
  bool zoned_ = false;
  uint64_t self_key_ = 0;
  std::vector<std::pair<PeerId, uint64_t>> members_;
  uint64_t crossed_owned_ = 0;
  uint64_t crossed_other_ = 0;
  bool arrived_any_ = false;
  bool members_known_ = false;
  std::vector<bool> taken_across_;      // per chunk: asked across for another member
  std::vector<uint16_t> local_having_;  // per chunk: relays of this zone, proven or not
  // The last arrival, or the first request (zoned; see Starved).
  SchedulerClock::time_point quiet_since_{};
  std::vector<uint8_t> copies_;  // per chunk: requests in flight
  std::vector<SchedulerClock::time_point> seed_not_before_;
  std::vector<std::vector<uint32_t>> buckets_;  // by relays_having_: missing, not requested
  std::vector<uint32_t> position_;              // of a chunk in its bucket
  // Chunks in flight (kInFlight), and each one's place there.
  std::vector<uint32_t> in_flight_;
  std::vector<uint32_t> in_flight_at_;
  void AddInFlight(uint32_t chunk);
  void RemoveInFlight(uint32_t chunk);
  // The neighbours (a few: max_neighbours), found by a scan of their ids: the
  // scheduler runs once per message, and a simulated fleet holds thousands.
  std::vector<PeerId> ids_;
  std::vector<Neighbour> neighbours_;  // by the index of its id
  Neighbour* Find(PeerId peer);
  const Neighbour* Find(PeerId peer) const;
  size_t done_ = 0;
  size_t seeds_ = 0;          // neighbours that are seeds
  size_t unrequested_ = 0;    // chunks in the buckets
  size_t first_missing_ = 0;  // no chunk before it is missing (for in_order)
  int relay_requests_ = 0;    // in flight, to relays
  size_t proven_relays_ = 0;
};

// When a fetcher whose neighbour set has room asks a seed's state for more
// relays: at once, then after `first`, the wait doubling up to `most`. Fetchers
// that start together announce themselves within moments of each other, and
// until a fetcher knows relays it has the seeds alone (simulated, 1,000 hosts
// at 10 Gbit/s: every one at 1.80x the bound asking every 500 ms from the
// start, p50 1.14x asking after 50 ms, doubling). Time comes in as arguments.
class TrackerCadence {
 public:
  TrackerCadence(std::chrono::milliseconds first, std::chrono::milliseconds most)
      : first_(std::min(first, most)), most_(most) {}
  // Whether to ask at `now`; when it is, the next ask waits longer.
  bool Due(SchedulerClock::time_point now) {
    if (asked_ && now - last_ < wait_) return false;
    wait_ = asked_ ? std::min(wait_ * 2, most_) : first_;
    asked_ = true;
    last_ = now;
    return true;
  }
  // How long until the next ask is due, at most (a waiting loop's timeout).
  std::chrono::milliseconds wait() const { return asked_ ? wait_ : most_; }

 private:
  const std::chrono::milliseconds first_, most_;
  bool asked_ = false;
  SchedulerClock::time_point last_{};
  std::chrono::milliseconds wait_{0};
};

}  // namespace seedd
