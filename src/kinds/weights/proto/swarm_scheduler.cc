#include "kinds/weights/proto/swarm_scheduler.h"

#include <algorithm>
#include <limits>

namespace seedd {

SwarmScheduler::SwarmScheduler(size_t chunks, SchedulerOptions options)
    : options_(options),
      rng_(options.random_seed),
      state_(chunks, kMissing),
      relays_having_(chunks, 0),
      copies_(chunks, 0),
      seed_not_before_(chunks),
      buckets_(options.max_neighbours + 1),
      position_(chunks, 0),
      in_flight_at_(chunks, 0) {
  buckets_[0].reserve(chunks);
  for (uint32_t c = 0; c < chunks; ++c) Insert(c);
}

void SwarmScheduler::Insert(uint32_t chunk) {
  auto& bucket = buckets_[relays_having_[chunk]];
  position_[chunk] = static_cast<uint32_t>(bucket.size());
  bucket.push_back(chunk);
  ++unrequested_;
}

void SwarmScheduler::Erase(uint32_t chunk) {
  auto& bucket = buckets_[relays_having_[chunk]];
  const uint32_t last = bucket.back();
  bucket[position_[chunk]] = last;
  position_[last] = position_[chunk];
  bucket.pop_back();
  --unrequested_;
}

void SwarmScheduler::AddInFlight(uint32_t chunk) {
  in_flight_at_[chunk] = static_cast<uint32_t>(in_flight_.size());
  in_flight_.push_back(chunk);
}

void SwarmScheduler::RemoveInFlight(uint32_t chunk) {
  const uint32_t last = in_flight_.back();
  in_flight_[in_flight_at_[chunk]] = last;
  in_flight_at_[last] = in_flight_at_[chunk];
  in_flight_.pop_back();
}

void SwarmScheduler::Recount(uint32_t chunk, int delta) {
  const bool bucketed = state_[chunk] == kMissing;
  if (bucketed) Erase(chunk);
  relays_having_[chunk] = static_cast<uint16_t>(relays_having_[chunk] + delta);
  if (bucketed) Insert(chunk);
}

void SwarmScheduler::LocalCount(const Neighbour& n, uint32_t c, int delta) {
  if (zoned_ && !n.seed && !n.remote) {
    local_having_[c] = static_cast<uint16_t>(local_having_[c] + delta);
  }
}

uint64_t ZoneKey(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

// The score of host `key` for chunk `c` (splitmix64 of the pair).
uint64_t Score(uint64_t key, uint32_t c) {
  uint64_t z = key ^ (static_cast<uint64_t>(c) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void SwarmScheduler::SetZoned(uint64_t self_key) {
  if (!zoned_) {  // every neighbour so far is of this zone
    zoned_ = true;
    local_having_.assign(state_.size(), 0);
    taken_across_.assign(state_.size(), false);
    for (const Neighbour& n : neighbours_) {
      for (uint32_t c : n.owned) LocalCount(n, c, +1);
    }
  }
  self_key_ = self_key;
}

void SwarmScheduler::SetRemote(PeerId peer, bool remote, uint64_t key) {
  Neighbour* n = Find(peer);
  if (n == nullptr || !zoned_) return;
  n->key = key;
  if (n->remote == remote) return;
  for (uint32_t c : n->owned) LocalCount(*n, c, -1);
  n->remote = remote;
  for (uint32_t c : n->owned) LocalCount(*n, c, +1);
}

bool SwarmScheduler::ZoneHas(uint32_t chunk) const {
  if (!zoned_) return false;
  if (local_having_[chunk] > 0) return true;
  for (const Neighbour& n : neighbours_) {
    if (n.seed && !n.remote && n.have[chunk]) return true;
  }
  return false;
}

bool SwarmScheduler::Owns(uint32_t chunk) const {
  if (!zoned_) return true;
  const uint64_t mine = Score(self_key_, chunk);
  for (const auto& [id, key] : members_) {
    if (Score(key, chunk) <= mine) continue;
    // A member that holds every chunk fetches nothing more.
    const Neighbour* n = Find(id);
    if (n == nullptr || n->owned.size() < state_.size()) return false;
  }
  return true;
}

bool SwarmScheduler::CrossingWanted(const Neighbour& n, uint32_t c,
                                    SchedulerClock::time_point now) const {
  if (state_[c] != kMissing || !n.have[c] || ZoneHas(c)) return false;
  return !n.seed || (relays_having_[c] == 0 && seed_not_before_[c] <= now);
}

std::optional<uint32_t> SwarmScheduler::AcrossZones(const Neighbour& n,
                                                    SchedulerClock::time_point now) {
  // A seed offers every chunk: its candidates are the missing ones no relay
  // neighbour has (bucket 0); a relay's, those it owns.
  const std::vector<uint32_t>& pool = n.seed ? buckets_[0] : n.owned;
  if (pool.empty()) return std::nullopt;
  const bool starved = Starved(now);
  if (!members_known_ && !starved) return std::nullopt;
  std::optional<uint32_t> other;
  const size_t start = rng_() % pool.size();
  for (size_t k = 0; k < pool.size(); ++k) {
    const uint32_t c = pool[(start + k) % pool.size()];
    if (!CrossingWanted(n, c, now)) continue;
    if (Owns(c)) return c;
    if (starved && !other) other = c;
  }
  return other;
}

void SwarmScheduler::AlreadyHave(uint32_t chunk) {
  if (state_[chunk] != kMissing) return;
  Erase(chunk);
  state_[chunk] = kDone;
  ++done_;
}

bool SwarmScheduler::AddNeighbour(PeerId peer, bool seed, int slots) {
  if (ids_.size() >= options_.max_neighbours || Find(peer) != nullptr) return false;
  ids_.push_back(peer);
  Neighbour& n = neighbours_.emplace_back();
  n.seed = seed;
  n.slots = slots > 0 ? slots : options_.pipeline;
  n.have.assign(state_.size(), seed);
  seeds_ += seed;
  return true;
}

void SwarmScheduler::RemoveNeighbour(PeerId peer) {
  Neighbour* found = Find(peer);
  if (found == nullptr) return;
  Neighbour& n = *found;
  for (uint32_t c : std::vector<uint32_t>(n.requested)) Release(n, c);
  if (!n.seed && n.proven) {
    for (uint32_t c : n.owned) Recount(c, -1);
    --proven_relays_;
  }
  for (uint32_t c : n.owned) LocalCount(n, c, -1);
  seeds_ -= n.seed;
  const size_t at = static_cast<size_t>(found - neighbours_.data());
  ids_[at] = ids_.back();
  ids_.pop_back();
  if (at + 1 != neighbours_.size()) neighbours_[at] = std::move(neighbours_.back());
  neighbours_.pop_back();
}

void SwarmScheduler::NeighbourHas(PeerId peer, uint32_t chunk) {
  Neighbour* found = Find(peer);
  if (found == nullptr || chunk >= state_.size() || found->have[chunk]) return;
  Neighbour& n = *found;
  n.have[chunk] = true;
  if (n.seed) return;  // seeds are not counted: they are asked only for the rarest
  n.owned.push_back(chunk);
  if (n.proven) Recount(chunk, +1);
  LocalCount(n, chunk, +1);
}

void SwarmScheduler::NeighbourState(PeerId peer, const std::vector<bool>& have) {
  Neighbour* found = Find(peer);
  if (found == nullptr || have.size() != state_.size()) return;
  Neighbour& n = *found;
  if (n.seed) {
    n.have = have;
    return;
  }
  for (uint32_t c = 0; c < have.size(); ++c) {
    if (have[c] == n.have[c]) continue;
    n.have[c] = have[c];
    if (n.proven) Recount(c, have[c] ? +1 : -1);
    LocalCount(n, c, have[c] ? +1 : -1);
  }
  n.owned.clear();
  for (uint32_t c = 0; c < have.size(); ++c) {
    if (have[c]) n.owned.push_back(c);
  }
}

uint32_t SwarmScheduler::Take(Neighbour& n, uint32_t chunk) {
  if (state_[chunk] == kMissing) {
    Erase(chunk);
    state_[chunk] = kInFlight;
    AddInFlight(chunk);
  }
  ++copies_[chunk];
  if (std::find(n.requested.begin(), n.requested.end(), chunk) == n.requested.end()) {
    n.requested.push_back(chunk);
    if (!n.seed) ++relay_requests_;
  }
  return chunk;
}

bool SwarmScheduler::Unrequest(Neighbour& n, uint32_t chunk) {
  auto it = std::find(n.requested.begin(), n.requested.end(), chunk);
  if (it == n.requested.end()) return false;
  *it = n.requested.back();
  n.requested.pop_back();
  if (!n.seed) --relay_requests_;
  return true;
}

void SwarmScheduler::Release(Neighbour& n, uint32_t chunk) {
  if (!Unrequest(n, chunk)) return;
  if (copies_[chunk] > 0) --copies_[chunk];
  if (state_[chunk] == kInFlight && copies_[chunk] == 0) {
    state_[chunk] = kMissing;
    first_missing_ = std::min<size_t>(first_missing_, chunk);
    RemoveInFlight(chunk);
    Insert(chunk);
  }
}

std::optional<uint32_t> SwarmScheduler::FirstInOrder(const Neighbour& n,
                                                     SchedulerClock::time_point now) {
  while (first_missing_ < state_.size() && state_[first_missing_] != kMissing) ++first_missing_;
  for (size_t c = first_missing_; c < state_.size(); ++c) {
    if (state_[c] != kMissing || !n.have[c]) continue;
    if (n.seed && (relays_having_[c] > 0 || seed_not_before_[c] > now)) continue;
    return static_cast<uint32_t>(c);
  }
  return std::nullopt;
}

std::optional<uint32_t> SwarmScheduler::Rarest(const Neighbour& n, SchedulerClock::time_point now) {
  if (options_.in_order && (proven_relays_ == 0 || unrequested_ * 4 <= state_.size())) {
    if (std::optional<uint32_t> c = FirstInOrder(n, now)) return c;
    if (n.seed) return std::nullopt;
  }
  if (n.seed && zoned_) {
    // A seed of this host's zone: what no relay neighbour of the zone has (those
    // of other zones are not asked for it), and not what this seed deferred.
    if (unrequested_ == 0) return std::nullopt;
    const size_t start = rng_() % state_.size();
    for (size_t k = 0; k < state_.size(); ++k) {
      const auto c = static_cast<uint32_t>((start + k) % state_.size());
      if (state_[c] == kMissing && n.have[c] && local_having_[c] == 0 &&
          seed_not_before_[c] <= now) {
        return c;
      }
    }
    return std::nullopt;
  }
  if (n.seed) {
    // Only what no relay neighbour has, and not what this seed deferred.
    const auto& bucket = buckets_[0];
    if (bucket.empty()) return std::nullopt;
    const size_t start = rng_() % bucket.size();
    for (size_t k = 0; k < bucket.size(); ++k) {
      const uint32_t c = bucket[(start + k) % bucket.size()];
      if (n.have[c] && seed_not_before_[c] <= now) return c;
    }
    return std::nullopt;
  }
  if (n.owned.size() < unrequested_) {
    // Fewer chunks owned than waiting: the rarest of those it owns, a random one
    // of the rarest.
    std::optional<uint32_t> best;
    uint16_t best_count = 0;
    size_t ties = 0;
    for (uint32_t c : n.owned) {
      if (state_[c] != kMissing) continue;
      if (!best.has_value() || relays_having_[c] < best_count) {
        best = c;
        best_count = relays_having_[c];
        ties = 1;
      } else if (relays_having_[c] == best_count && rng_() % ++ties == 0) {
        best = c;
      }
    }
    return best;
  }
  // An unproven relay's chunks are not counted: they lie in bucket 0 too.
  for (size_t b = n.proven ? 1 : 0; b < buckets_.size(); ++b) {
    const auto& bucket = buckets_[b];
    if (bucket.empty()) continue;
    const size_t start = rng_() % bucket.size();
    for (size_t k = 0; k < bucket.size(); ++k) {
      const uint32_t c = bucket[(start + k) % bucket.size()];
      if (n.have[c]) return c;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> SwarmScheduler::EndgameCopy(const Neighbour& n,
                                                    SchedulerClock::time_point now) {
  for (uint32_t c : in_flight_) {
    if (copies_[c] >= kEndgameCopies || !n.have[c] ||
        std::find(n.requested.begin(), n.requested.end(), c) != n.requested.end()) {
      continue;
    }
    if (n.seed && seed_not_before_[c] > now) continue;  // deferred: the relays have it
    return c;
  }
  return std::nullopt;
}

int SwarmScheduler::SlotsOf(const Neighbour& n) const {
  if (n.seed && options_.seed_requests > 0 && proven_relays_ > 0) {
    return std::min(n.slots, options_.seed_requests);
  }
  return n.slots;
}

std::optional<uint32_t> SwarmScheduler::Next(PeerId peer, SchedulerClock::time_point now,
                                             bool ahead) {
  Neighbour* found = Find(peer);
  if (found == nullptr) return std::nullopt;
  Neighbour& n = *found;
  if (!HasRoom(n, now, ahead)) return std::nullopt;
  if (zoned_ && quiet_since_ == SchedulerClock::time_point{}) quiet_since_ = now;
  if (n.remote && options_.zone_requests > 0) {
    // Requests across zones in flight: few, so that when this host learns of a
    // member that owns chunks it was fetching, little is fetched twice.
    int across = 0;
    for (const Neighbour& m : neighbours_) {
      if (m.remote) across += static_cast<int>(m.requested.size());
    }
    if (across >= options_.zone_requests) return std::nullopt;
  }
  std::optional<uint32_t> c = n.remote ? AcrossZones(n, now) : Rarest(n, now);
  if (!c.has_value() && unrequested_ == 0 && (!n.remote || Starved(now))) c = EndgameCopy(n, now);
  if (!c.has_value()) return std::nullopt;
  if (n.remote) {
    const bool owned = Owns(*c);
    ++(owned ? crossed_owned_ : crossed_other_);
    if (!owned) taken_across_[*c] = true;
  }
  return Take(n, *c);
}

int SwarmScheduler::Room(PeerId peer) const {
  const Neighbour* n = Find(peer);
  return n == nullptr ? 0 : std::max(0, SlotsOf(*n) - static_cast<int>(n->requested.size()));
}

int SwarmScheduler::FreeRelayRequests() const {
  if (options_.max_requests <= 0) return std::numeric_limits<int>::max();
  return options_.max_requests + (Behind() ? options_.catch_up_requests : 0) - relay_requests_;
}

bool SwarmScheduler::HasUnrequested(const Neighbour& n) const {
  for (uint32_t c : n.owned) {
    if (state_[c] == kMissing) return true;
  }
  return false;
}

bool SwarmScheduler::HasRoom(const Neighbour& n, SchedulerClock::time_point now, bool ahead) const {
  if (static_cast<int>(n.requested.size()) >= SlotsOf(n) + (ahead ? 1 : 0) || now < n.not_before) {
    return false;
  }
  return ahead || n.seed || FreeRelayRequests() > 0;
}

bool SwarmScheduler::MayAsk(PeerId peer, SchedulerClock::time_point now) const {
  const Neighbour* n = Find(peer);
  if (n == nullptr || !HasRoom(*n, now, false)) return false;
  if (n->seed || n->remote || unrequested_ == 0) return true;  // not predicted: Next decides
  return HasUnrequested(*n);
}

SchedulerClock::time_point SwarmScheduler::NextChance(PeerId peer,
                                                      SchedulerClock::time_point now) const {
  const Neighbour* n = Find(peer);
  auto chance = SchedulerClock::time_point::max();
  if (n == nullptr) return chance;
  if (n->not_before > now) chance = n->not_before;
  if (n->seed) {
    auto look = [&](uint32_t c) {
      if (n->have[c] && seed_not_before_[c] > now) chance = std::min(chance, seed_not_before_[c]);
    };
    if (zoned_ && !n->remote) {  // it is asked for what the zone's relays lack
      for (uint32_t c = 0; c < state_.size(); ++c) {
        if (state_[c] == kMissing) look(c);
      }
    } else {
      for (uint32_t c : buckets_[0]) look(c);
    }
  }
  // A remote neighbour may take chunks this host does not own once it starves.
  if (n->remote && quiet_since_ != SchedulerClock::time_point{} && !Starved(now)) {
    chance = std::min(chance, quiet_since_ + options_.zone_patience * (arrived_any_ ? 1 : 4));
  }
  return chance;
}

std::vector<Cancel> SwarmScheduler::Arrived(PeerId peer, uint32_t chunk,
                                            SchedulerClock::time_point now) {
  std::vector<Cancel> cancels;
  if (chunk >= state_.size() || state_[chunk] == kDone) {
    if (Neighbour* n = Find(peer)) Unrequest(*n, chunk);
    return cancels;
  }
  if (state_[chunk] == kMissing) Erase(chunk);
  if (state_[chunk] == kInFlight) RemoveInFlight(chunk);
  state_[chunk] = kDone;
  copies_[chunk] = 0;
  ++done_;
  // A chunk taken across for another member does not end the starving: the
  // rest of what the members this host waits for own follows at once.
  if (zoned_ && now != SchedulerClock::time_point{} && !taken_across_[chunk]) {
    quiet_since_ = now;
    arrived_any_ = true;
  }
  Prove(peer);
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (Unrequest(neighbours_[i], chunk) && ids_[i] != peer) cancels.push_back({ids_[i], chunk});
  }
  return cancels;
}

void SwarmScheduler::Prove(PeerId peer) {
  Neighbour* n = Find(peer);
  if (n == nullptr || n->seed || n->proven) return;
  n->proven = true;
  ++proven_relays_;
  for (uint32_t c : n->owned) Recount(c, +1);
}

bool SwarmScheduler::Failed(PeerId peer, uint32_t chunk) {
  Returned(peer, chunk);
  return Failed(peer);
}

bool SwarmScheduler::Failed(PeerId peer) {
  Neighbour* n = Find(peer);
  if (n == nullptr) return false;
  ++n->failures;
  if (n->seed && n->failures < options_.max_seed_failures) return false;
  RemoveNeighbour(peer);
  return true;
}

void SwarmScheduler::Returned(PeerId peer, uint32_t chunk) {
  Neighbour* n = Find(peer);
  if (n != nullptr && chunk < state_.size()) Release(*n, chunk);
}

void SwarmScheduler::Lacks(PeerId seed, uint32_t chunk) {
  Neighbour* n = Find(seed);
  if (n == nullptr || !n->seed || chunk >= state_.size()) return;
  n->have[chunk] = false;
  Release(*n, chunk);
}

bool SwarmScheduler::Offers(PeerId peer, uint32_t chunk) const {
  const Neighbour* n = Find(peer);
  return n != nullptr && chunk < state_.size() && n->have[chunk];
}

bool SwarmScheduler::OffersAnyMissing(PeerId peer) const {
  const Neighbour* n = Find(peer);
  if (n == nullptr) return false;
  for (uint32_t c : n->owned) {
    if (state_[c] != kDone) return true;
  }
  return false;
}

void SwarmScheduler::Deferred(PeerId seed, uint32_t chunk, SchedulerClock::time_point until) {
  Neighbour* n = Find(seed);
  if (n == nullptr || chunk >= state_.size()) return;
  seed_not_before_[chunk] = std::max(seed_not_before_[chunk], until);
  Release(*n, chunk);
}

void SwarmScheduler::Busy(PeerId peer, uint32_t chunk, SchedulerClock::time_point until) {
  Neighbour* n = Find(peer);
  if (n == nullptr || chunk >= state_.size()) return;
  n->not_before = std::max(n->not_before, until);
  Release(*n, chunk);
}

SwarmScheduler::Neighbour* SwarmScheduler::Find(PeerId peer) {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] == peer) return &neighbours_[i];
  }
  return nullptr;
}

const SwarmScheduler::Neighbour* SwarmScheduler::Find(PeerId peer) const {
  return const_cast<SwarmScheduler*>(this)->Find(peer);
}

bool SwarmScheduler::Behind() const {
  const size_t relays = proven_relays_;
  if (relays == 0) return false;
  uint64_t held = 0;  // by the proven relay neighbours, summed
  for (const Neighbour& n : neighbours_) {
    if (!n.seed && n.proven) held += std::max<uint64_t>(n.owned.size(), n.count);
  }
  return (done_ + state_.size() / 32) * relays < held;
}

void SwarmScheduler::NeighbourCount(PeerId peer, uint64_t count) {
  if (Neighbour* n = Find(peer)) n->count = std::min<uint64_t>(count, state_.size());
}

std::optional<PeerId> SwarmScheduler::LeastUseful() const {
  std::optional<PeerId> least;
  size_t fewest = SIZE_MAX;
  for (size_t i = 0; i < ids_.size(); ++i) {
    const Neighbour& n = neighbours_[i];
    if (n.seed) continue;
    size_t offers = 0;
    for (uint32_t c = 0; c < state_.size() && offers < fewest; ++c) {
      offers += state_[c] != kDone && n.have[c];
    }
    if (offers < fewest) {
      fewest = offers;
      least = ids_[i];
    }
  }
  return least;
}

size_t SwarmScheduler::NeighboursWanted() const {
  return options_.max_neighbours - std::min(options_.max_neighbours, ids_.size());
}

bool SwarmScheduler::Stuck() const {
  if (Complete() || !in_flight_.empty()) return false;
  for (size_t b = 1; b < buckets_.size(); ++b) {
    if (!buckets_[b].empty()) return false;
  }
  // A relay not proven yet, whose chunks are not counted in the buckets.
  for (const Neighbour& n : neighbours_) {
    if (n.seed || n.proven) continue;
    for (uint32_t c : n.owned) {
      if (state_[c] == kMissing) return false;
    }
  }
  // Only seeds can help, if one has a missing chunk (O(chunks) per seed).
  for (const Neighbour& n : neighbours_) {
    if (!n.seed) continue;
    for (uint32_t c : buckets_[0]) {
      if (n.have[c]) return false;
    }
  }
  return true;
}

int SwarmScheduler::InFlight(PeerId peer) const {
  const Neighbour* n = Find(peer);
  return n == nullptr ? 0 : static_cast<int>(n->requested.size());
}

}  // namespace seedd
