// The fetcher's swarm policy as numbers: every default of FetcherCore and the
// scheduler in one place, read by the data-plane fetcher (FetchOptions
// extends it) and by the simulator (bench/swarm), which default-constructs it.
//
// Thread safety: plain data.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace seedd {

// The first wait before a seed is asked for relays again; the wait then
// doubles up to FetchPolicy::state_interval.
inline constexpr std::chrono::milliseconds kFirstRelayAsk{50};
// A chunk a seed answered "claimed" for is asked of it again after this,
// unless it is asked plainly (see FetcherCore::OnClaimed).
inline constexpr std::chrono::milliseconds kClaimRetry{300};
// A claim older than the chunk's length at claim_floor_rate, bounded to
// [kForceAfter, kForceAfterAtMost], is passed over: the seed is asked plainly.
inline constexpr std::chrono::seconds kForceAfter{5};
inline constexpr std::chrono::seconds kForceAfterAtMost{120};
// Seeds and relays one fetch knows and has not dropped; dropped ones do not
// count (relays named by a liar must not crowd out those found later), but all
// it ever knew are bounded too.
inline constexpr size_t kMaxSources = 256;
inline constexpr size_t kMaxSourcesEver = 4 * kMaxSources;

struct FetchPolicy {
  int connections_per_source = 4;  // to each seed (a source given by the caller)
  int pipeline = 4;                // chunk requests in flight per seed connection
  // More while the requests in flight on a seed connection ask for less than
  // pipeline_bytes, up to small_chunk_pipeline: a model of small files (chunks
  // of a few KiB) would otherwise wait a round trip for every few files
  // (5,000 files of 3.4 KiB: 1.45 s with 4 in flight, 0.5-0.7 s with 32).
  int small_chunk_pipeline = 32;
  uint64_t pipeline_bytes = 1 << 20;
  // The same to a relay. One: a relay sends a few chunks at once (its upload
  // slots), and a request queued behind another at one relay is a chunk that
  // another relay with a free slot could be sending (simulated with swarm_sim:
  // 100 hosts p99 5.18x the bound with 4, 2.01x with 1).
  int peer_pipeline = 1;
  int connections_per_peer = 1;  // to each relay learnt from the manifest or a state
  // Chunk requests in flight to relays in all (0: no bound; a seed's are not
  // counted). Matches the servers' upload slots: a downlink split among many
  // senders makes each transfer slow and holds their few slots for longer
  // (simulated, 1,000 hosts: p99 1.57x the bound unbounded, 1.33x with 4).
  int swarm_requests = 4;
  // Requests beyond swarm_requests while this host holds fewer chunks than its
  // relay neighbours on average: a host that fell behind takes a larger share of
  // their uplinks, and the last host of a fleet comes in sooner (simulated, 16
  // hosts on 50 Mbit/s links with 20 ms latency: the last at 1.27-1.38x the
  // bound without, 1.19-1.23x with 2).
  int swarm_catch_up = 2;
  // Neighbours (seeds and relays) fetched from at once; the other relays learnt
  // wait as candidates and replace those dropped. Each neighbour costs one watch
  // connection (what it newly has) and its data connections.
  size_t max_neighbours = 16;
  // Of the relays this host knows, at most this share are its neighbours at
  // once (at least min_relay_neighbours); the set fills as more are learnt.
  // A fleet's daemons start a few hundred ms apart, and a fetcher that took
  // every relay it knew took the first to start, as every other did: those
  // few served the whole fleet while the last to start served almost no one
  // (simulated, 32 hosts starting over 700 ms, p99 for seeds 1-3: 1.25-1.26x
  // the bound taking all, 1.22-1.23x with half; 16 hosts 1.19-1.23x, 1.17x).
  double neighbour_share = 0.5;
  size_t min_relay_neighbours = 4;
  // Every this many chunks verified, a relay neighbour that sent none of them
  // and answered "busy" or offers nothing wanted is retired for a candidate not
  // tried yet, when there is one (0: never). Simulated, 1,000 hosts x 1 GiB,
  // p99 for seeds 1-3: 1.56-1.60x the bound never, 1.24-1.25x with this rule.
  // Retiring any neighbour that sent nothing (one merely not asked, too) did as
  // well there (1.23-1.25x every 16 chunks, 1.25-1.33x every 32) and cost the
  // 32-target fan-out 3-8% in reconnections.
  uint32_t rotate_after = 16;
  // A copy of a chunk that arrives while another copy of it is being written
  // (an endgame copy) is held in memory, up to this many bytes at once, and the
  // copy verified first is the one written; a copy beyond it is read past. Read
  // past, a whole endgame copy from an idle neighbour waited for a copy
  // trickling from a congested one, and was asked again meanwhile.
  uint64_t held_copy_bytes = 64 << 20;
  // Chunks in the manifest's order (files complete one after another, in
  // their paths' order) while no relay has sent a chunk (pulling from seeds
  // alone) and once a quarter of the chunks or fewer are left to ask for;
  // rarest first in between, which a swarm needs. For loaders that read files
  // as they complete (PullOptions::order).
  bool in_order = false;
  // Zones (FetcherCore::SetZone): relay neighbours of other zones at most (the
  // rest of the set is the own zone's), and how long a fetcher with nothing
  // arriving waits before it takes across zones a chunk another member of its
  // zone owns (SwarmScheduler's policy).
  size_t remote_neighbours = 4;
  std::chrono::milliseconds zone_patience{1000};
  // Requests across zones in flight at once: a member that joins owns chunks
  // others were fetching, and those in flight come across twice
  // (bench/zones.sh, 2 x 8 hosts, 64 MiB: 1.12x the model crossed into the
  // zone with 2, 1.04-1.07x with 1, the fleet's time the same).
  int zone_requests = 1;
  // How often a seed is asked for more relays while the neighbour set has room.
  std::chrono::milliseconds state_interval{500};
  // A chunk a seed says another fetcher claimed (it is being sent there) is
  // asked of the seed plainly once the claim is older than the chunk's length at
  // this rate (5 s to 120 s): on a congested seed an honest claim takes that
  // long, and a claim holder that stalls is not waited for beyond it.
  uint64_t claim_floor_rate = 64 * 1024;  // bytes per second
  // A fetcher that has every chunk its sources offer, while one of them lacks
  // some (it is still fetching them itself), waits this long for any source to
  // gain a chunk before it gives up on the swarm (FetcherCore::CheckHope).
  std::chrono::milliseconds growth_patience{60000};
};

}  // namespace seedd
