// swarm_sim: a fleet pulling one model at once, simulated with the shipped
// swarm cores (sim.h describes the model).
//
// Output, last line:
//   swarm_sim: hosts=N p50=X p99=Y max=Z bound=B origin=O
// X, Y, Z: completion times (from each host's start) divided by the bound, B
// seconds (model size / link rate); O: the origin's bytes sent / model size.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "sim.h"

using swarm_sim::Flags;
using swarm_sim::Sim;

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "swarm_sim: a fleet pulling one model at once; every host runs the shipped FetcherCore, "
      "the origin the shipped ServerCore, over a modelled network"};
  app.add_option("--hosts", f.hosts, "fetchers (besides the origin)")->capture_default_str();
  app.add_option("--model-gib", f.model_gib, "model size in GiB")->capture_default_str();
  app.add_option("--chunk-mib", f.chunk_mib,
                 "chunk size in MiB (0: the daemon's default for the model's size)")
      ->capture_default_str();
  app.add_option("--link-gbit", f.link_gbit, "every host's uplink and downlink, Gbit/s")
      ->capture_default_str();
  // Overrides of the shipped policies (defaults: FetchPolicy, SwarmPolicy).
  app.add_option("--max-neighbours", f.fetch.max_neighbours,
                 "FetchPolicy::max_neighbours: neighbours per fetcher, the origin included")
      ->capture_default_str();
  app.add_option("--rotate-after", f.fetch.rotate_after,
                 "FetchPolicy::rotate_after: chunks verified between retirements of a relay "
                 "neighbour that sent none of them (0: never)")
      ->capture_default_str();
  app.add_option("--neighbour-share", f.fetch.neighbour_share, "FetchPolicy::neighbour_share")
      ->capture_default_str();
  app.add_option("--min-relay-neighbours", f.fetch.min_relay_neighbours,
                 "FetchPolicy::min_relay_neighbours")
      ->capture_default_str();
  app.add_option("--peer-pipeline", f.fetch.peer_pipeline,
                 "FetchPolicy::peer_pipeline: requests in flight per relay neighbour")
      ->capture_default_str();
  app.add_option("--swarm-requests", f.fetch.swarm_requests,
                 "FetchPolicy::swarm_requests: requests in flight to relays in all")
      ->capture_default_str();
  app.add_option("--catch-up", f.fetch.swarm_catch_up,
                 "FetchPolicy::swarm_catch_up: requests beyond those for a host behind")
      ->capture_default_str();
  app.add_option("--connections-per-source", f.fetch.connections_per_source,
                 "FetchPolicy::connections_per_source: connections to the origin")
      ->capture_default_str();
  app.add_option("--claim-floor-rate", f.fetch.claim_floor_rate,
                 "FetchPolicy::claim_floor_rate: bytes/s below which a claim is passed over")
      ->capture_default_str();
  app.add_option("--max-peers-listed", f.swarm.max_peers_listed,
                 "SwarmPolicy::max_peers_listed: relays in the origin's answer to a state request")
      ->capture_default_str();
  app.add_option("--max-relays", f.swarm.max_relays,
                 "SwarmPolicy::max_relays: relays the origin remembers")
      ->capture_default_str();
  app.add_option("--up-slots", f.swarm.upload_slots,
                 "SwarmPolicy::upload_slots: chunks a host sends to relays at once")
      ->capture_default_str();
  app.add_option("--origin-slots", f.origin_slots, "the origin's upload slots (0: --up-slots)")
      ->capture_default_str();
  // The network (modelled).
  app.add_option("--ahead", f.ahead,
                 "the next request to a sender leaves once half a chunk has arrived")
      ->capture_default_str();
  app.add_option("--latency-ms", f.latency_ms, "one-way latency")->capture_default_str();
  app.add_option("--jitter", f.jitter, "latency varies by +- this fraction")->capture_default_str();
  app.add_option("--uplink-queue-ms", f.uplink_queue_ms,
                 "what a host sends while its uplink is full waits this long in the uplink's "
                 "queue (its requests and answers too; 0: no queue)")
      ->capture_default_str();
  app.add_option("--origin-link-factor", f.origin_link_factor, "the origin's link / a host's")
      ->capture_default_str();
  app.add_option("--fail-fraction", f.fail_fraction, "hosts that fail mid-transfer")
      ->capture_default_str();
  app.add_option("--late-fraction", f.late_fraction, "hosts that join later, within the bound")
      ->capture_default_str();
  app.add_option("--start-spread-ms", f.start_spread_ms,
                 "the other hosts start one after another over this time (ratios from the first "
                 "start)")
      ->capture_default_str();
  app.add_option("--slow-fraction", f.slow_fraction, "hosts with slower links")
      ->capture_default_str();
  app.add_option("--slow-factor", f.slow_factor, "how much slower")->capture_default_str();
  app.add_option("--detect-ms", f.detect_ms, "time to notice a failed neighbour")
      ->capture_default_str();
  app.add_option("--follow-holders", f.follow_holders,
                 "a claimed answer names its holder, which the fetcher follows (false: as "
                 "before claim_holder)")
      ->capture_default_str();
  app.add_option("--slowest", f.slowest,
                 "print the pull of this many of the slowest hosts (and the median one) in detail")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "random seed")->capture_default_str();
  app.add_option("--give-up", f.give_up_bounds,
                 "end the simulation, failing, after this many bounds of simulated time")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const auto start = std::chrono::steady_clock::now();
  Sim sim(f);
  sim.Run();
  std::printf("simulated in %.1f s wall time%s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              sim.AllDone() ? "" : " (some survivors did not finish)");
  sim.Report();
  return sim.AllDone() ? 0 : 1;
}
