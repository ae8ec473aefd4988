// swarm_sim: a fleet pulling one model at once, simulated with the real
// scheduler (sim.h describes the model).
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
  CLI::App app{"swarm_sim: a fleet pulling one model at once, simulated with the real scheduler"};
  app.add_option("--hosts", f.hosts, "fetchers (besides the origin)")->capture_default_str();
  app.add_option("--model-gib", f.model_gib, "model size in GiB")->capture_default_str();
  app.add_option("--chunk-mib", f.chunk_mib,
                 "chunk size in MiB (0: the daemon's default for the model's size)")
      ->capture_default_str();
  app.add_option("--link-gbit", f.link_gbit, "every host's uplink and downlink, Gbit/s")
      ->capture_default_str();
  app.add_option("--degree", f.degree, "relay neighbours per host")->capture_default_str();
  app.add_option("--symmetric", f.symmetric,
                 "neighbours link both ways and only hosts with room (else a host picks the "
                 "relays it fetches from, as the real fetcher)")
      ->capture_default_str();
  app.add_option("--max-watchers", f.max_watchers,
                 "hosts one host serves as their neighbour; beyond, it is not handed out (0: "
                 "no bound)")
      ->capture_default_str();
  app.add_option("--first-ask-ms", f.first_ask_ms,
                 "a host with room for neighbours asks the tracker again after this, the wait "
                 "doubling up to --state-ms")
      ->capture_default_str();
  app.add_option("--state-ms", f.state_ms, "the longest wait between asks of the tracker")
      ->capture_default_str();
  app.add_option("--origin-degree", f.origin_degree,
                 "fetchers the origin serves directly (the first to join; -1: all)")
      ->capture_default_str();
  app.add_option("--pipeline", f.pipeline, "requests in flight per neighbour")
      ->capture_default_str();
  app.add_option("--seed-pipeline", f.seed_pipeline, "requests in flight to the origin per fetcher")
      ->capture_default_str();
  app.add_option("--max-requests", f.max_requests,
                 "requests in flight per fetcher in all (0: no bound)")
      ->capture_default_str();
  app.add_option("--catch-up", f.catch_up,
                 "requests beyond --max-requests while a host has fewer chunks than its "
                 "neighbours on average")
      ->capture_default_str();
  app.add_option("--up-slots", f.up_slots, "chunks a host sends at once")->capture_default_str();
  app.add_option("--origin-slots", f.origin_slots, "the origin's upload slots (0: --up-slots)")
      ->capture_default_str();
  app.add_option("--origin-busy", f.origin_busy,
                 "the origin answers busy beyond its slots (else it queues requests)")
      ->capture_default_str();
  app.add_option("--ahead", f.ahead,
                 "once half a chunk has arrived, the next request to its sender goes out")
      ->capture_default_str();
  app.add_option("--busy-retry-ms", f.busy_retry_ms, "when a busy neighbour is asked again")
      ->capture_default_str();
  app.add_option("--backlog", f.backlog,
                 "requests a relay queues beyond its slots before answering busy (-1: no limit)")
      ->capture_default_str();
  app.add_option("--latency-ms", f.latency_ms, "one-way latency")->capture_default_str();
  app.add_option("--jitter", f.jitter, "latency varies by +- this fraction")->capture_default_str();
  app.add_option("--origin-link-factor", f.origin_link_factor, "the origin's link / a host's")
      ->capture_default_str();
  app.add_option("--fail-fraction", f.fail_fraction, "hosts that fail mid-transfer")
      ->capture_default_str();
  app.add_option("--make-room", f.make_room,
                 "symmetric links: a full host takes in a host with few neighbours in place of "
                 "its least useful one")
      ->capture_default_str();
  app.add_option("--fair-slots", f.fair_slots,
                 "a host turned away busy that asks again waits in line for the next slot")
      ->capture_default_str();
  app.add_option("--late-fraction", f.late_fraction, "hosts that join later, within the bound")
      ->capture_default_str();
  app.add_option("--slow-fraction", f.slow_fraction, "hosts with slower links")
      ->capture_default_str();
  app.add_option("--slow-factor", f.slow_factor, "how much slower")->capture_default_str();
  app.add_option("--origin-claim", f.origin_claim,
                 "holder: the origin sends a chunk again only once the fetcher it went to "
                 "has failed; window: once --claim-chunks chunk times have passed")
      ->capture_default_str()
      ->check(CLI::IsMember({"holder", "window"}));
  app.add_option("--claim-chunks", f.claim_chunks,
                 "the origin defers a chunk it sent within this many chunk times")
      ->capture_default_str();
  app.add_option("--detect-ms", f.detect_ms, "time to notice a failed neighbour")
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
