// One pull's swarm protocol as a sans-I/O core: which sources are neighbours,
// which chunk to ask of whom, what each answer means (not here, claimed, busy,
// a bad chunk), when a claim is old enough to ask the seed plainly, when a
// seed is asked for more relays, and when the swarm is hopeless. No sockets,
// threads or clock: a driver reports events with `now` and carries out what
// the calls return. The data-plane fetcher (fetch.h) drives it over sockets;
// the simulator (bench/swarm) drives the same class over a modelled network.
//
// Sources get ids in the order they are first named (PeerId, dense from 0); a
// name is known once. A source becomes a neighbour when FillNeighbours picks
// it (seeds first, then relays at random) while the scheduler wants more, and
// leaves when dropped (it failed) or retired (for a claim holder to follow, or
// in a rotation: it sent nothing for a while).
//
// Thread safety: none; the driver serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kinds/weights/proto/fetch_policy.h"
#include "kinds/weights/proto/swarm_scheduler.h"

namespace seedd {

// A request to send: chunk `index`, asked with a claim ("SDRN": a seed takes
// a claim on it for this fetcher) or plainly.
struct Taken {
  uint32_t index;
  bool claim;
};

// A neighbour to start: its connections and requests in flight on each.
struct NewNeighbour {
  PeerId id;
  int connections;
  int depth;
};

// What an answer of "not here" or "claimed" led to.
enum class NotThereVerdict {
  kDeferred,       // asked again later (a claim, or a seed still fetching)
  kForcedOld,      // claimed for long: the seed is asked plainly now
  kForcedNoRelay,  // relays were named and none is a neighbour, or the claim's
                   // holder was dropped here: asked plainly
  kRelayLied,      // a relay answered for a chunk it offered: dropped
  kSeedBroken,     // a seed that offered the chunk does not serve it: dropped
};

class FetcherCore {
 public:
  // `chunk_lengths`: the manifest's, by index. `relaying`: this fetcher serves
  // what it fetches (a seed is then asked one chunk at a time per connection).
  // `random_seed` breaks ties (the driver passes a random one; tests a fixed one).
  FetcherCore(std::vector<uint64_t> chunk_lengths, const FetchPolicy& policy, bool relaying,
              uint64_t random_seed);

  // A chunk verified by an earlier run: never requested.
  void Resumed(uint32_t chunk);

  // This fetcher's own address as a relay: never a source of its own.
  void SetSelf(const std::string& name) { self_ = name; }
  // This host's zone (after SetSelf; empty: none). A zoned fetcher prefers
  // relay neighbours of its zone (at most FetchPolicy::remote_neighbours of
  // others) and asks sources of other zones, or of a zone not known yet, only
  // for what its zone lacks (SwarmScheduler's policy).
  void SetZone(const std::string& zone);
  // A source's zone, as it said (its data connection's answer, a state's
  // relay list).
  void SetSourceZone(PeerId peer, const std::string& zone);
  // Whether bytes from `peer` cross zones: this host has a zone and `peer` is
  // not known to be of it.
  bool Remote(PeerId peer) const { return Remote(sources_[peer]); }
  // A seed or relay named (given, resolved, from the registry, a state, the
  // announcements). Its id when new; nullopt when known, this fetcher itself,
  // or over the bounds (kMaxSources live, kMaxSourcesEver in all).
  // `zone`: its zone, when the naming said.
  std::optional<PeerId> AddSource(const std::string& name, bool seed,
                                  const std::optional<std::string>& zone = std::nullopt);
  // Every seed and the manifest's relays are known: from now on a swarm with
  // nothing left to offer is hopeless (before, a seed down at once is not).
  void SourcesKnown() { sources_known_ = true; }
  // Candidates made neighbours while the scheduler wants more (a claim holder
  // to follow first, then seeds, then relays at random); the driver starts
  // their connections.
  std::vector<NewNeighbour> FillNeighbours();

  // The next request for neighbour `peer` (nullopt: nothing now). `ahead`:
  // see SwarmScheduler::Next. A seed is asked with a claim ("SDRN": its
  // answer may send this host to the relay holding the chunk's claim), but
  // plainly once every relay named to this fetch has failed here (the claims
  // the seed holds are then those of relays this host cannot reach: relays
  // that stopped within the seed's relay_ttl), and for a chunk forced so.
  std::optional<Taken> Next(PeerId peer, SchedulerClock::time_point now, bool ahead = false);
  // Whether Next(peer, now) may give a request (SwarmScheduler::MayAsk), and
  // how many requests to relays may go out now beyond those in flight.
  bool MayAsk(PeerId peer, SchedulerClock::time_point now) const {
    return !Finished() && !sources_[peer].dropped && sched_.MayAsk(peer, now);
  }
  int FreeRelayRequests() const { return sched_.FreeRelayRequests(); }
  // Requests `peer` may take beyond those in flight to it (its slots).
  int Room(PeerId peer) const { return sched_.Room(peer); }
  // When `peer` may have a request without any other event (a deferral ends):
  // the driver's idle connection to it looks again then.
  SchedulerClock::time_point NextChance(PeerId peer, SchedulerClock::time_point now) const {
    return sched_.NextChance(peer, now);
  }
  // Answers.
  NotThereVerdict OnNotThere(PeerId peer, uint32_t chunk, SchedulerClock::time_point now);
  // `holder`: the relay the seed sent the chunk to, when it says (may be
  // empty). A holder of a chunk no neighbour offers is followed: it becomes a
  // neighbour at the next FillNeighbours, in place of the relay neighbour that
  // offers least when the set is full (that one is retired, not blamed: it may
  // be followed again). Without this, a relay nobody fetches from (one that
  // joined last, when every neighbour set was full) holds what the seed sent it
  // alone, and the whole fleet waits for its claims to age.
  NotThereVerdict OnClaimed(PeerId peer, uint32_t chunk, SchedulerClock::time_point now,
                            const std::string& holder = "");
  void OnBusy(PeerId peer, uint32_t chunk, SchedulerClock::time_point until);
  // A request that ended without an answer, without blame.
  void OnReturned(PeerId peer, uint32_t chunk);
  // `peer` failed (a bad chunk, a missed deadline, a broken connection): true
  // when it is dropped now or was before. The driver then fills neighbours.
  bool OnFailed(PeerId peer, std::optional<uint32_t> chunk = std::nullopt);
  // Whether a copy of `chunk` that is arriving may be written: kWrite when none
  // is being written and it is not verified (pair with EndWrite); kWriting when
  // another copy is being written (an endgame copy: the driver may hold this one
  // aside and write whichever copy is verified first); kHave when verified.
  enum class WriteTurn { kWrite, kWriting, kHave };
  WriteTurn BeginWrite(uint32_t chunk);
  void EndWrite(uint32_t chunk) { writing_[chunk] = false; }
  // `chunk` from `peer` verified and committed: the requests for it still out
  // elsewhere (endgame copies), which the driver may cancel or drain.
  // Every FetchPolicy::rotate_after chunks, one relay neighbour that sent none
  // of them, and answered "busy" or offers nothing this host lacks, is retired
  // for a candidate not tried yet (one merely not asked is kept), as BitTorrent
  // clients replace peers that never unchoke them: a fetcher whose neighbours
  // are the fleet's busiest relays would otherwise be told "busy" by most of
  // them for the whole pull (simulated, 300 hosts: the slowest got every chunk
  // from 6 of its 16 neighbours, at half its downlink). The driver fills
  // neighbours when rotations() grew.
  std::vector<Cancel> OnArrived(PeerId peer, uint32_t chunk, SchedulerClock::time_point now = {});
  // A seed's state listed its relays (after AddSource of each): a zoned fetcher
  // knows the members of its zone from now on, and may take chunks across.
  void OnRelaysListed(PeerId peer) {
    if (sources_[peer].seed) sched_.MembersKnown();
  }
  // What a neighbour has: its whole state, or chunks it verified since.
  void OnState(PeerId peer, const std::vector<bool>& have);
  void OnHave(PeerId peer, uint32_t chunk);
  // How many chunks a neighbour has verified, as its watch answer's cursor
  // says: a watch for wanted chunks (MissingBitmap) names only those, and a
  // neighbour gaining chunks this host has is still a source that grows (see
  // CheckHope). True when more requests to relays may go out now (this host
  // fell behind its neighbours: SwarmScheduler::Behind): the driver offers
  // them to its idle connections, as it does a freed request.
  bool OnVerifiedCount(PeerId peer, uint64_t count);
  // The chunks not verified here, as a bitmap (chunk i is bit 0x80 >> (i % 8) of
  // byte i / 8): what a watch asks neighbours about ("SDWW").
  const std::string& MissingBitmap() const { return missing_; }

  // Whether relays are wanted: the neighbour set has room, or the last
  // rotation found a neighbour to retire and no candidate to take its place
  // (a full set would otherwise never hear of relays that joined after it
  // filled: at 32 targets, the last 8 daemons' uplinks idled for 4-6 s).
  bool WantsRelays() const { return sched_.NeighboursWanted() > 0 || short_of_candidates_; }
  // Whether a seed should be asked for more relays now (WantsRelays, at the
  // tracker's cadence), and how long its watch waits before asking this again.
  bool WantRelays(SchedulerClock::time_point now);
  std::chrono::milliseconds RelayWait() const { return relay_asks_.wait(); }

  // Ends the pull (a local error, a stop): Finished from now on.
  void Stop() { stopped_ = true; }
  // Gives up (true, once) when no neighbour or candidate can supply a missing
  // chunk: at once when every live source said it has every chunk (so the ones
  // it does not send, it never will), else once no source gained a chunk for
  // FetchPolicy::growth_patience. A source that is itself still
  // fetching (a daemon relaying what it pulls) grows: a fetcher that caught up
  // with it waits for it rather than failing.
  bool CheckHope(SchedulerClock::time_point now);
  bool Complete() const { return sched_.Complete(); }
  bool Finished() const { return sched_.Complete() || stopped_; }
  bool Dropped(PeerId peer) const { return sources_[peer].dropped; }
  // A neighbour now: neither dropped nor retired. A driver's connections to a
  // source end once it is not.
  bool Active(PeerId peer) const { return sources_[peer].neighbour && !sources_[peer].dropped; }
  // Neighbours retired to follow a claim holder, so far.
  uint64_t follows() const { return follows_; }
  // Neighbours retired by rotation (see OnArrived), so far.
  uint64_t rotations() const { return rotations_; }
  PeerId last_rotated() const { return last_rotated_; }
  bool IsSeed(PeerId peer) const { return sources_[peer].seed; }
  bool StateKnown(PeerId peer) const { return sources_[peer].state_known; }
  const std::string& Name(PeerId peer) const { return sources_[peer].name; }
  std::optional<PeerId> IdOf(const std::string& name) const {
    auto it = ids_.find(name);
    return it == ids_.end() ? std::nullopt : std::optional<PeerId>(it->second);
  }
  size_t sources() const { return sources_.size(); }
  size_t NeighboursWanted() const { return sched_.NeighboursWanted(); }
  const SwarmScheduler& scheduler() const { return sched_; }
  // How long chunk `chunk` may stay claimed before the seed is asked plainly.
  SchedulerClock::duration ClaimLimit(uint32_t chunk) const;

 private:
  struct SourceState {
    std::string name;
    bool seed = false;
    bool neighbour = false;
    bool dropped = false;
    bool state_known = false;  // what it has is from its state, not assumed
    size_t offers = 0;         // chunks it said it has
    // Left the neighbours for a claim holder or in a rotation; picked again
    // only if followed.
    bool retired = false;
    // Since the last rotation: chunks verified from it, "busy" answers, and
    // whether it was a neighbour all along.
    uint32_t sent = 0;
    uint32_t busy = 0;
    bool whole = false;
    std::string zone;  // as it said, once zone_known
    bool zone_known = false;
    uint64_t verified_count = 0;  // as its last watch answer said (OnVerifiedCount)
  };
  bool Remote(const SourceState& s) const {
    return !zone_.empty() && (!s.zone_known || s.zone != zone_);
  }
  // Requests in flight on one data connection to `s`.
  int Depth(const SourceState& s) const;
  std::optional<NewNeighbour> Start(PeerId id);
  // Whether `holder` is a neighbour or is to be one, or was dropped here.
  enum class Following { kNo, kYes, kHolderDropped };
  Following Follow(const std::string& holder, uint32_t chunk);
  // Clears `chunk` from missing_.
  void Have(uint32_t chunk);
  // Tells the scheduler the relays of this host's zone (SetZoneMembers).
  void UpdateMembers();
  // Retires `id`, a relay neighbour (see Follow, Rotate).
  void Retire(PeerId id);
  // Every FetchPolicy::rotate_after chunks: see OnArrived.
  void Rotate();

  const std::vector<uint64_t> lengths_;
  const FetchPolicy policy_;
  const bool relaying_;
  std::mt19937_64 rng_;
  SwarmScheduler sched_;
  std::vector<SourceState> sources_;  // by PeerId
  std::map<std::string, PeerId> ids_;
  size_t live_ = 0;                                        // sources not dropped
  size_t relays_named_ = 0;                                // relays ever named
  size_t relays_dropped_ = 0;                              // of those, dropped since
  std::vector<SchedulerClock::time_point> claimed_since_;  // by chunk; zero: not claimed
  std::vector<bool> force_;                                // ask the seed plainly ("SDRQ")
  std::vector<bool> writing_;                              // a copy is being written
  std::string missing_;                                    // see MissingBitmap
  std::string self_;
  std::string zone_;
  std::vector<PeerId> follow_;  // claim holders to make neighbours first
  uint64_t follows_ = 0;
  uint64_t rotations_ = 0;
  bool short_of_candidates_ = false;  // see WantsRelays
  PeerId last_rotated_ = 0;
  uint32_t arrived_since_rotation_ = 0;
  bool sources_known_ = false;
  bool stopped_ = false;
  bool hopeless_ = false;
  // Chunks sources said they have, ever (see CheckHope), and when the swarm
  // was first seen stuck with that count (none: not stuck).
  uint64_t growth_ = 0;
  uint64_t growth_when_stuck_ = 0;
  std::optional<SchedulerClock::time_point> stuck_since_;
  TrackerCadence relay_asks_;
};

}  // namespace seedd
