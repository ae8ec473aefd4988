#include "kinds/weights/proto/fetcher_core.h"

#include <algorithm>
#include <cmath>

namespace seedd {
namespace {

SchedulerOptions SchedulerOptionsOf(const FetchPolicy& p, bool relaying, uint64_t seed) {
  SchedulerOptions s;
  s.max_neighbours = std::max<size_t>(1, p.max_neighbours);
  s.pipeline = std::max(1, p.pipeline);
  s.max_requests = std::max(0, p.swarm_requests);
  s.catch_up_requests = std::max(0, p.swarm_catch_up);
  // A relay among relays keeps one chunk in flight per seed: what a seed sends
  // reaches the swarm sooner when its uplink is not split many ways.
  if (relaying) s.seed_requests = 1;
  s.in_order = p.in_order;
  s.zone_patience = p.zone_patience;
  s.zone_requests = p.zone_requests;
  s.random_seed = seed;
  return s;
}

}  // namespace

FetcherCore::FetcherCore(std::vector<uint64_t> chunk_lengths, const FetchPolicy& policy,
                         bool relaying, uint64_t random_seed)
    : lengths_(std::move(chunk_lengths)),
      policy_(policy),
      relaying_(relaying),
      rng_(random_seed),
      sched_(lengths_.size(), SchedulerOptionsOf(policy, relaying, random_seed + 1)),
      claimed_since_(lengths_.size()),
      force_(lengths_.size(), false),
      writing_(lengths_.size(), false),
      missing_((lengths_.size() + 7) / 8, '\xff'),
      relay_asks_(kFirstRelayAsk, policy.state_interval) {
  if (lengths_.size() % 8 != 0)
    missing_.back() = static_cast<char>(0xff00 >> (lengths_.size() % 8));
}

void FetcherCore::Have(uint32_t chunk) {
  missing_[chunk / 8] = static_cast<char>(missing_[chunk / 8] & ~(0x80 >> (chunk % 8)));
}

void FetcherCore::Resumed(uint32_t chunk) {
  sched_.AlreadyHave(chunk);
  Have(chunk);
}

std::optional<PeerId> FetcherCore::AddSource(const std::string& name, bool seed,
                                             const std::optional<std::string>& zone) {
  if (name == self_) return std::nullopt;
  if (auto known = ids_.find(name); known != ids_.end()) {
    if (zone && !sources_[known->second].zone_known) SetSourceZone(known->second, *zone);
    return std::nullopt;
  }
  if (sources_.size() >= kMaxSourcesEver || live_ >= kMaxSources) return std::nullopt;
  const auto id = static_cast<PeerId>(sources_.size());
  ids_.emplace(name, id);
  sources_.emplace_back();
  sources_.back().name = name;
  sources_.back().seed = seed;
  if (zone) {
    sources_.back().zone = *zone;
    sources_.back().zone_known = true;
  }
  ++live_;
  relays_named_ += !seed;
  if (!seed) short_of_candidates_ = false;
  if (zone && !seed && *zone == zone_ && !zone_.empty()) UpdateMembers();
  return id;
}

void FetcherCore::UpdateMembers() {
  std::vector<std::pair<PeerId, uint64_t>> members;
  for (PeerId id = 0; id < sources_.size(); ++id) {
    const SourceState& s = sources_[id];
    if (!s.seed && !s.dropped && !Remote(s)) members.emplace_back(id, ZoneKey(s.name));
  }
  sched_.SetZoneMembers(std::move(members));
}

void FetcherCore::SetZone(const std::string& zone) {
  zone_ = zone;
  if (!zone.empty()) sched_.SetZoned(ZoneKey(self_));
}

void FetcherCore::SetSourceZone(PeerId peer, const std::string& zone) {
  SourceState& s = sources_[peer];
  const bool was_remote = Remote(s);
  s.zone = zone;
  s.zone_known = true;
  if (s.neighbour) sched_.SetRemote(peer, Remote(s), ZoneKey(s.name));
  if (!s.seed && was_remote != Remote(s)) UpdateMembers();
}

int FetcherCore::Depth(const SourceState& s) const {
  // A relay fetching from a seed asks one chunk at a time per connection: the
  // seed's claim on it is then taken just before the bytes leave.
  if (s.seed) {
    return relaying_ ? 1 : std::max({1, policy_.pipeline, policy_.small_chunk_pipeline});
  }
  return std::max(1, policy_.peer_pipeline);
}

std::optional<NewNeighbour> FetcherCore::Start(PeerId id) {
  SourceState& s = sources_[id];
  const int depth = Depth(s);
  int connections =
      std::max(1, s.seed ? policy_.connections_per_source : policy_.connections_per_peer);
  // A seed sends a relaying fetcher one chunk at a time (one upload slot per
  // relay): a second connection keeps the next request waiting there, more
  // only add to the seed's connections, which every fetcher of a fleet holds.
  if (s.seed && relaying_) connections = std::min(connections, 2);
  if (!sched_.AddNeighbour(id, s.seed, connections * depth)) return std::nullopt;
  s.neighbour = true;
  if (!zone_.empty()) sched_.SetRemote(id, Remote(s), ZoneKey(s.name));
  return NewNeighbour{id, connections, depth};
}

std::vector<NewNeighbour> FetcherCore::FillNeighbours() {
  std::vector<NewNeighbour> started;
  // Called on every claimed answer: nothing to scan while the set is full.
  if (Finished() || sched_.NeighboursWanted() == 0) return started;
  for (PeerId id : follow_) {
    if (sched_.NeighboursWanted() == 0) break;
    const SourceState& s = sources_[id];
    if (s.neighbour || s.dropped) continue;
    if (std::optional<NewNeighbour> n = Start(id)) started.push_back(*n);
  }
  follow_.clear();
  // A zoned fetcher's relays: those of its zone first, then those whose zone
  // is not known yet, then at most remote_neighbours of other zones.
  auto rank = [this](const SourceState& s) {
    if (zone_.empty() || s.seed) return 0;
    return !s.zone_known ? 1 : s.zone == zone_ ? 0 : 2;
  };
  size_t remote = 0, relays = 0, known = 0;
  for (const SourceState& s : sources_) {
    remote += s.neighbour && !s.dropped && !s.seed && rank(s) == 2;
    relays += s.neighbour && !s.dropped && !s.seed;
    known += !s.dropped && !s.seed;
  }
  const size_t most = std::max(policy_.min_relay_neighbours,
                               static_cast<size_t>(std::ceil(known * policy_.neighbour_share)));
  for (bool seeds : {true, false}) {
    std::vector<PeerId> candidates;
    for (PeerId id = 0; id < sources_.size(); ++id) {
      const SourceState& s = sources_[id];
      if (s.seed == seeds && !s.neighbour && !s.dropped && !s.retired) candidates.push_back(id);
    }
    std::shuffle(candidates.begin(), candidates.end(), rng_);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](PeerId a, PeerId b) { return rank(sources_[a]) < rank(sources_[b]); });
    for (PeerId id : candidates) {
      if (sched_.NeighboursWanted() == 0) return started;
      const bool across = rank(sources_[id]) == 2;
      if (across && remote >= policy_.remote_neighbours) break;
      if (!seeds && relays >= most) break;
      if (std::optional<NewNeighbour> n = Start(id)) {
        started.push_back(*n);
        remote += across;
        relays += !seeds;
      }
    }
  }
  return started;
}

FetcherCore::Following FetcherCore::Follow(const std::string& holder, uint32_t chunk) {
  if (holder.empty() || holder == self_ || sched_.Holders(chunk) > 0) return Following::kNo;
  std::optional<PeerId> id;
  if (auto it = ids_.find(holder); it != ids_.end()) {
    id = it->second;
  } else {
    id = AddSource(holder, false);
  }
  if (!id) return Following::kNo;
  if (sources_[*id].dropped) return Following::kHolderDropped;
  // A neighbour already, or to be one: its HAVEs or its state will say.
  if (sources_[*id].neighbour) return Following::kYes;
  if (std::find(follow_.begin(), follow_.end(), *id) != follow_.end()) return Following::kYes;
  if (sched_.NeighboursWanted() == 0) {
    std::optional<PeerId> least = sched_.LeastUseful();
    if (!least) return Following::kNo;
    Retire(*least);
  }
  sources_[*id].retired = false;
  follow_.push_back(*id);
  ++follows_;
  return Following::kYes;
}

std::optional<Taken> FetcherCore::Next(PeerId peer, SchedulerClock::time_point now, bool ahead) {
  if (Finished() || sources_[peer].dropped) return std::nullopt;
  std::optional<uint32_t> c = sched_.Next(peer, now, ahead);
  if (!c) return std::nullopt;
  const bool every_relay_failed = relays_named_ > 0 && relays_dropped_ == relays_named_;
  return Taken{*c, sources_[peer].seed && !force_[*c] && !every_relay_failed};
}

NotThereVerdict FetcherCore::OnNotThere(PeerId peer, uint32_t chunk,
                                        SchedulerClock::time_point /*now*/) {
  SourceState& s = sources_[peer];
  if (!s.seed) {
    // A relay is asked only for chunks it offered, and its verified chunks only
    // ever grow: "not here" is a lie (or a restart). It fails, and is dropped.
    OnFailed(peer, chunk);
    return NotThereVerdict::kRelayLied;
  }
  // A seed that is itself still fetching says what it has; one that offered the
  // chunk there and does not serve it is broken (a file changed under it, say).
  const bool offered = s.state_known && sched_.Offers(peer, chunk);
  sched_.Lacks(peer, chunk);
  if (!offered) return NotThereVerdict::kDeferred;
  OnFailed(peer);
  return NotThereVerdict::kSeedBroken;
}

SchedulerClock::duration FetcherCore::ClaimLimit(uint32_t chunk) const {
  return std::clamp<SchedulerClock::duration>(
      std::chrono::milliseconds(lengths_[chunk] * 1000 /
                                std::max<uint64_t>(1, policy_.claim_floor_rate)),
      kForceAfter, kForceAfterAtMost);
}

NotThereVerdict FetcherCore::OnClaimed(PeerId peer, uint32_t chunk, SchedulerClock::time_point now,
                                       const std::string& holder) {
  if (!sources_[peer].seed) {
    // A relay has no claims to report.
    OnFailed(peer, chunk);
    return NotThereVerdict::kRelayLied;
  }
  if (claimed_since_[chunk] == SchedulerClock::time_point{}) claimed_since_[chunk] = now;
  const Following following = Follow(holder, chunk);
  // Claimed for longer than the seed could have sent the chunk at the floor rate
  // (a seed whose link many fetchers share is that slow, a holder that stalls
  // slower), yet no neighbour offers it: ask the seed for it anyway. A holder
  // the seed stopped hearing from loses its claim there; one that was sent the
  // chunk and is alive passes it on through the swarm, which takes a few hops
  // when the neighbour sets are bounded, so the time since the send decides
  // nothing here.
  // So is one whose holder cannot be reached: relays were named, and none is a
  // neighbour now. (Before any relay is known, a claim may be a relay that has
  // only just started: it is waited for.)
  // So is one whose holder this fetcher dropped (it failed here): the claim
  // waits for nobody this fetcher can reach.
  const bool no_relay_left =
      following == Following::kHolderDropped ||
      (following == Following::kNo && relays_named_ > 0 && sched_.relay_neighbours() == 0);
  const bool claimed_long = now - claimed_since_[chunk] >= ClaimLimit(chunk);
  if ((no_relay_left || claimed_long) && sched_.Holders(chunk) == 0) {
    force_[chunk] = true;
    sched_.Deferred(peer, chunk, now);
    return no_relay_left ? NotThereVerdict::kForcedNoRelay : NotThereVerdict::kForcedOld;
  }
  sched_.Deferred(peer, chunk, now + kClaimRetry);
  return NotThereVerdict::kDeferred;
}

void FetcherCore::OnBusy(PeerId peer, uint32_t chunk, SchedulerClock::time_point until) {
  ++sources_[peer].busy;
  sched_.Busy(peer, chunk, until);
}

void FetcherCore::OnReturned(PeerId peer, uint32_t chunk) { sched_.Returned(peer, chunk); }

bool FetcherCore::OnFailed(PeerId peer, std::optional<uint32_t> chunk) {
  SourceState& s = sources_[peer];
  if (s.dropped) return true;
  const bool dropped = chunk ? sched_.Failed(peer, *chunk) : sched_.Failed(peer);
  if (!dropped) return false;
  s.dropped = true;
  --live_;
  relays_dropped_ += !s.seed;
  if (!s.seed && !Remote(s)) UpdateMembers();
  return true;
}

FetcherCore::WriteTurn FetcherCore::BeginWrite(uint32_t chunk) {
  if (sched_.Has(chunk)) return WriteTurn::kHave;
  if (writing_[chunk]) return WriteTurn::kWriting;
  writing_[chunk] = true;
  return WriteTurn::kWrite;
}

void FetcherCore::Retire(PeerId id) {
  sched_.RemoveNeighbour(id);
  sources_[id].neighbour = false;
  sources_[id].retired = true;
}

std::vector<Cancel> FetcherCore::OnArrived(PeerId peer, uint32_t chunk,
                                           SchedulerClock::time_point now) {
  std::vector<Cancel> cancels = sched_.Arrived(peer, chunk, now);
  Have(chunk);
  ++sources_[peer].sent;
  if (policy_.rotate_after > 0 && ++arrived_since_rotation_ >= policy_.rotate_after) {
    arrived_since_rotation_ = 0;
    if (!Finished()) Rotate();
  }
  return cancels;
}

void FetcherCore::Rotate() {
  bool candidate = false;
  std::optional<PeerId> idle;
  for (PeerId id = 0; id < sources_.size(); ++id) {
    const SourceState& s = sources_[id];
    if (s.seed || s.dropped) continue;
    if (!s.neighbour) {
      candidate = candidate || !s.retired;
    } else if (s.whole && s.sent == 0 && !idle && (s.busy > 0 || !sched_.OffersAnyMissing(id))) {
      idle = id;
    }
  }
  if (candidate && idle) {
    Retire(*idle);
    ++rotations_;
    last_rotated_ = *idle;
  }
  short_of_candidates_ = idle && !candidate;
  for (SourceState& s : sources_) {
    s.sent = 0;
    s.busy = 0;
    s.whole = s.neighbour;
  }
}

void FetcherCore::OnState(PeerId peer, const std::vector<bool>& have) {
  sched_.NeighbourState(peer, have);
  SourceState& s = sources_[peer];
  s.state_known = true;
  const size_t offers = static_cast<size_t>(std::count(have.begin(), have.end(), true));
  if (offers > s.offers) growth_ += offers - s.offers;
  s.offers = offers;
}

void FetcherCore::OnHave(PeerId peer, uint32_t chunk) {
  if (!sched_.Offers(peer, chunk)) {
    ++growth_;
    ++sources_[peer].offers;
  }
  sched_.NeighbourHas(peer, chunk);
}

bool FetcherCore::OnVerifiedCount(PeerId peer, uint64_t count) {
  SourceState& s = sources_[peer];
  if (count > s.verified_count) {
    growth_ += count - s.verified_count;
    s.verified_count = count;
  }
  const int free = sched_.FreeRelayRequests();
  sched_.NeighbourCount(peer, count);
  return sched_.FreeRelayRequests() > free;
}

bool FetcherCore::WantRelays(SchedulerClock::time_point now) {
  return WantsRelays() && relay_asks_.Due(now);
}

bool FetcherCore::CheckHope(SchedulerClock::time_point now) {
  if (hopeless_ || !sources_known_ || Finished() || !sched_.Stuck()) {
    stuck_since_.reset();
    return false;
  }
  bool growing = false;
  for (const SourceState& s : sources_) {
    if (s.dropped) continue;
    // A neighbour whose state is not known yet, or a candidate, may still help.
    if (!s.neighbour || !s.state_known) return false;
    growing = growing || s.offers < lengths_.size();
  }
  if (growing) {
    if (!stuck_since_ || growth_ != growth_when_stuck_) {
      stuck_since_ = now;
      growth_when_stuck_ = growth_;
    }
    if (now - *stuck_since_ < policy_.growth_patience) return false;
  }
  hopeless_ = true;
  stopped_ = true;
  return true;
}

}  // namespace seedd
