// One version's swarm on the serving side, as a sans-I/O core: the relays that
// announced themselves for a root digest (each until it is not heard from for
// relay_ttl, at most max_relays), the claims on chunks sent to them ("ask the
// relays": each chunk leaves this server about once per zone), and the
// tracker's sample of relays handed to a fetcher.
//
// Zones: a relay may say its zone when it announces itself. A claim holds only
// relays of the holder's zone (one of another zone is sent the chunk: it
// fetches from its own zone, not across), and a fetcher of a zone is handed
// the relays of its zone first. Time comes in as arguments. The data-plane
// server (weight_server.h) keeps one per root digest under its lock; the
// simulator (bench/swarm) runs one at its origin.
//
// Thread safety: none; the driver serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace seedd {

using ServeClock = std::chrono::steady_clock;

// The server's swarm policy as numbers, the upload slots' included (WeightServerOptions extends it;
// the simulator default-constructs it).
struct SwarmPolicy {
  // The relays a swarm (one root digest) remembers: each until it has not been
  // heard from for relay_ttl, at most max_relays at once (more are not listed
  // and take no claims, so what they are sent leaves the origin again:
  // simulated, 10,000 hosts x 1 GiB sent 9.5x the model from the origin with
  // 1,024, 1.0x with 16,384). About 0.4 KiB each at most.
  std::chrono::milliseconds relay_ttl{10000};
  size_t max_relays = 16384;
  // Relays listed in one state response (a sample of those remembered): a
  // fetcher keeps a bounded set of neighbours, so it needs only a few names.
  size_t max_peers_listed = 32;

  // The upload slots (upload_slots.h): chunks sent at once to fetchers that relay (a swarm); more
  // are answered "busy", and so is a relay that is being sent a chunk already (one that stops
  // reading holds one slot, not all). A chunk sent at a quarter of the uplink
  // reaches its fetcher, which passes it on, four times sooner than one sent at a
  // sixteenth (8 targets x 1 GiB at 500 Mbit/s: 1.07x one target's time with 4
  // slots, 1.15x with 2). 0: no limit. Fetchers that do not relay are not
  // limited.
  int upload_slots = 4;
  std::chrono::milliseconds busy_retry{50};
  // How long a relay's request waits for the relay's own send to end before it
  // is answered "busy".
  std::chrono::milliseconds own_slot_wait{2000};
  // Requests that wait in line for a slot (upload_slots.h), per slot: each
  // holds a connection's thread here. Simulated, 1,000 hosts x 1 GiB, seeds
  // 1-3: p99 1.61-1.68x the bound with 1 per slot, 1.56-1.60x with 4, 1.52-1.58x
  // with no limit.
  int line_per_slot = 4;
  // A relay holding an upload slot must take its chunk at least this fast once
  // it has held the slot for preempt_after: a slower one (one that stops
  // reading, or a name announced only to hold a slot) loses the slot, its
  // connection closed, to a relay turned away meanwhile.
  uint64_t relay_min_rate = 256 * 1024;
  std::chrono::milliseconds preempt_after{2000};
  // Relay names are claimed by peers; their addresses are not. When every slot
  // is taken and a relay from an address holding none asks, the address holding
  // the most (two or more) loses its newest slot held for preempt_after: one
  // address cannot keep the slots from the others under invented names, however
  // fast it reads. A fleet behind one address (NAT, one test host) keeps
  // them all while no other address asks.
  bool fair_addresses = true;
};

// The answer to a chunk request that takes a claim ("SDRN").
struct ClaimAnswer {
  bool send;  // false: "claimed", ask the relays
  // With !send: 0xffffffff while the chunk is being sent, else milliseconds
  // since it was.
  uint32_t aux = 0;
  std::string holder;  // with !send: the relay holding the claim
};

// A relay in the tracker's sample, with its zone (empty: none said).
struct ListedRelay {
  std::string name;
  std::string zone;
};

// Zones with claims of their own in one swarm (each costs a claim per chunk);
// relays of further zones share the claims of relays that said none.
inline constexpr size_t kMaxZonesPerSwarm = 8;

class ServerCore {
 public:
  ServerCore(size_t chunks, const SwarmPolicy& policy)
      : policy_(policy), chunks_(chunks), claims_(1, std::vector<ClaimState>(chunks)), zones_(1) {}

  // `relay` (HOST:PORT, this fetch `session`) is fetching: false when it is
  // not remembered (max_relays live ones are known). A new session of a known
  // relay (a restart with an empty cache) loses the claims it held. `zone`: the
  // zone it said (empty: none); a relay that changes zones loses its claims.
  bool Announce(const std::string& relay, const std::string& session, ServeClock::time_point now,
                const std::string& zone = "");
  // Whether chunk `index` is sent to `relay` (empty, or not remembered: a
  // fetcher that takes no claims): a live relay other than `relay` holds its
  // claim => "claimed". Otherwise a remembered `relay` takes the claim. A
  // request is a sign of life: the relay counts as heard from now.
  ClaimAnswer Claim(const std::string& relay, uint32_t index, ServeClock::time_point now);
  // The send of `index` to `relay` ended: complete (the claim stays, dated now)
  // or not (anyone may ask for it again).
  void EndSend(const std::string& relay, uint32_t index, bool complete, ServeClock::time_point now);
  // Live relays but `except`, at most `limit`: half of them (rounded up) those
  // holding the most chunks this server sent (they complement any asker, counted
  // at most once a second), the rest those handed out least so far. For an
  // asker of `zone` (not empty), the relays of that zone come first, chosen
  // among themselves by the same rule.
  std::vector<ListedRelay> ListPeers(const std::string& except, size_t limit, std::mt19937_64& rng,
                                     ServeClock::time_point now, const std::string& zone);
  // Their names, for an asker of no zone.
  std::vector<std::string> Peers(const std::string& except, size_t limit, std::mt19937_64& rng,
                                 ServeClock::time_point now);
  size_t chunks() const { return chunks_; }
  size_t relays() const { return addrs_.size(); }

 private:
  struct ClaimState {
    int holder = -1;  // peer id; -1: not claimed
    bool sending = false;
    ServeClock::time_point sent_at{};
  };
  // Forgets the relays not heard from for relay_ttl (ids are renumbered).
  void Expire(ServeClock::time_point now);
  // The claims of `id`'s zone (0: relays of no zone, and unknown askers).
  std::vector<ClaimState>& ClaimsOf(int id) { return claims_[id >= 0 ? zone_of_[id] : 0]; }
  // The index of `zone`'s claims, made on first use.
  size_t ZoneIndex(const std::string& zone);
  // `ids` ordered for the sample (see Peers), cut to `limit`.
  void Pick(std::vector<int>* ids, size_t limit, std::mt19937_64& rng, ServeClock::time_point now);
  int IdOf(const std::string& relay) const {
    auto it = ids_.find(relay);
    return it == ids_.end() ? -1 : it->second;
  }
  bool Live(int id, ServeClock::time_point now) const {
    return now - seen_[id] < policy_.relay_ttl;
  }

  SwarmPolicy policy_;
  std::map<std::string, int> ids_;            // relay address -> id
  std::vector<std::string> addrs_;            // by id
  std::vector<ServeClock::time_point> seen_;  // by id
  std::vector<std::string> sessions_;         // by id
  std::vector<size_t> zone_of_;               // by id: its index in claims_
  size_t chunks_;
  std::vector<std::vector<ClaimState>> claims_;  // by zone index, by chunk
  std::vector<std::string> zones_;               // by zone index (0: "")
  std::vector<uint32_t> held_;                   // by id: claims held, as of held_at_
  ServeClock::time_point held_at_{};
  std::vector<uint64_t> listed_;  // by id: times handed out by Peers
};

}  // namespace seedd
