// swarm_sim: a discrete-event simulation of a fleet pulling one model at once,
// every fetcher running the real SwarmScheduler (src/kinds/weights/swarm_scheduler.h).
//
// Model: one origin (a seed) and N fetchers. Each host has an uplink and a
// downlink (bits per second) and a one-way latency with jitter. A host sends up
// to --up-slots chunks at once (one per connection, its queue first come first
// served); a transfer's rate is min(the sender's uplink / its transfers, the
// receiver's downlink / its transfers), recomputed whenever a transfer starts or
// ends at either end: flows sharing links fairly, without TCP's slow start. Neighbours are
// handed out by the origin (a tracker): a random set of relays up to
// --degree, symmetric, replaced when one fails. A host tells its neighbours
// each chunk it verifies (a HAVE message); it asks a neighbour for chunks as
// its scheduler decides, --pipeline at a time. The origin defers a chunk it sent
// within the last --claim-chunks chunk times ("ask the relays"), as the real
// data plane's claims do. Failed hosts vanish; their neighbours notice after
// --detect-ms and get a replacement.
//
// Output, last line:
//   swarm_sim: hosts=N p50=X p99=Y max=Z bound=B origin=O
// X, Y, Z: completion times (from each host's start) divided by the bound, B
// seconds (model size / link rate); O: the origin's bytes sent / model size.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "kinds/weights/swarm_scheduler.h"

namespace {

using seedd::Cancel;
using seedd::PeerId;
using seedd::SchedulerOptions;
using seedd::SwarmScheduler;

struct Flags {
  int hosts = 100;
  double model_gib = 1;
  double chunk_mib = 2;
  double link_gbit = 10;
  // Defaults are the real daemon's: 16 neighbours (the origin and 15 relays), 4
  // upload slots, "busy" beyond them, a busy answer retried after 50 ms, one
  // request at a time to a relay and to the origin (a relaying fetcher's).
  int degree = 15;
  int origin_degree = -1;  // fetchers the origin serves directly (-1: all); the others use relays
  int pipeline = 1;        // requests in flight per relay neighbour (FetchOptions::peer_pipeline)
  int seed_pipeline = 1;   // requests in flight to the origin per fetcher
  int up_slots = 4;
  int origin_slots = 0;  // the origin's upload slots; 0: --up-slots
  int backlog = 0;       // requests a relay queues beyond its slots; more are "busy"; -1: no limit
  bool origin_busy = true;  // the origin answers "busy" beyond its slots instead of queueing
  double busy_retry_ms = 50;
  double latency_ms = 0.5;
  double jitter = 0.2;
  double origin_link_factor = 1;  // the origin's link relative to a host's
  double fail_fraction = 0;       // of hosts, failing at a random time within the bound
  double late_fraction = 0;       // of hosts, joining at a random time within the bound
  double slow_fraction = 0;       // of hosts, whose links are --slow-factor times slower
  double slow_factor = 4;
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
  kFail,
  kGone
};

struct Event {
  double t;
  uint64_t seq;
  Ev type;
  PeerId a, b;  // meaning by type
  uint32_t chunk;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Host {
  std::unique_ptr<SwarmScheduler> sched;
  std::vector<PeerId> neighbours;  // relays (the origin is neighbour 0 of every fetcher)
  std::deque<std::pair<PeerId, uint32_t>> queue;  // requests to serve: (requester, chunk)
  std::vector<uint32_t> ups, downs;               // transfers in progress
  double up = 0, down = 0;                        // bytes per second
  double join = 0, done = -1;
  bool joined = false, failed = false, late = false;
  double failed_at = 0;
  bool wake_pending = false;
};

class Sim {
 public:
  explicit Sim(const Flags& f) : f_(f), rng_(f.seed) {
    chunk_bytes_ = f.chunk_mib * 1048576.0;
    chunks_ = static_cast<uint32_t>(std::ceil(f.model_gib * 1024 / f.chunk_mib));
    const double link = f.link_gbit * 1e9 / 8;
    bound_ = chunks_ * chunk_bytes_ / link;
    sent_at_.assign(chunks_, -1);
    holder_.assign(chunks_, 0);
    hosts_.resize(static_cast<size_t>(f.hosts) + 1);
    hosts_[0].up = hosts_[0].down = link * f.origin_link_factor;
    hosts_[0].joined = true;
    std::uniform_real_distribution<double> within(0, bound_);
    for (PeerId h = 1; h <= static_cast<PeerId>(f.hosts); ++h) {
      Host& host = hosts_[h];
      const bool slow = Chance(f.slow_fraction);
      host.up = host.down = slow ? link / f.slow_factor : link;
      host.late = Chance(f.late_fraction);
      host.join = host.late ? within(rng_) : 0;
      Push(host.join, Ev::kJoin, h, 0, 0);
      if (Chance(f.fail_fraction)) Push(host.join + within(rng_), Ev::kFail, h, 0, 0);
    }
  }

  void Run() {
    while (!events_.empty()) {
      Event e = events_.top();
      events_.pop();
      now_ = e.t;
      if (now_ > f_.give_up_bounds * bound_) return;  // a swarm that stopped progressing
      Handle(e);
    }
  }

  void Report() const {
    std::vector<double> all, late;
    size_t unfinished = 0, failed = 0;
    for (PeerId h = 1; h < hosts_.size(); ++h) {
      const Host& host = hosts_[h];
      if (host.failed) {
        ++failed;
        continue;
      }
      if (host.done < 0) {
        ++unfinished;
        continue;
      }
      const double own_bound = chunks_ * chunk_bytes_ / host.down;
      const double ratio = (host.done - host.join) / own_bound;
      all.push_back(ratio);
      if (host.late) late.push_back(ratio);
    }
    auto pct = [](std::vector<double> v, double p) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
    };
    std::printf("chunks=%u chunk_mib=%g degree=%d failed=%zu unfinished=%zu events=%llu\n", chunks_,
                f_.chunk_mib, f_.degree, failed, unfinished, static_cast<unsigned long long>(seq_));
    std::printf("the origin's last chunk ended at %.3f x the bound\n", origin_last_ / bound_);
    if (!late.empty()) {
      std::printf("late joiners: %zu p50=%.3f p99=%.3f max=%.3f\n", late.size(), pct(late, 0.5),
                  pct(late, 0.99), pct(late, 1));
    }
    std::printf("swarm_sim: hosts=%d p50=%.3f p99=%.3f max=%.3f bound=%.3f origin=%.3f\n", f_.hosts,
                pct(all, 0.5), pct(all, 0.99), pct(all, 1), bound_,
                origin_chunks_ * chunk_bytes_ / (chunks_ * chunk_bytes_));
  }

  bool AllDone() const {
    for (PeerId h = 1; h < hosts_.size(); ++h) {
      if (!hosts_[h].failed && hosts_[h].done < 0) return false;
    }
    return true;
  }

 private:
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  double Latency() {
    return f_.latency_ms / 1000 *
           std::uniform_real_distribution<double>(1 - f_.jitter, 1 + f_.jitter)(rng_);
  }
  void Push(double t, Ev type, PeerId a, PeerId b, uint32_t chunk) {
    events_.push({t, seq_++, type, a, b, chunk});
  }
  seedd::SchedulerClock::time_point Now() const {
    return seedd::SchedulerClock::time_point(
        std::chrono::duration_cast<seedd::SchedulerClock::duration>(
            std::chrono::duration<double>(now_)));
  }

  // Links h with up to `want` random relays that have joined, both ways.
  void FindNeighbours(PeerId h) {
    Host& host = hosts_[h];
    for (int tries = 0; tries < 4 * f_.degree && host.sched->NeighboursWanted() > 0; ++tries) {
      const PeerId p = 1 + static_cast<PeerId>(rng_() % (hosts_.size() - 1));
      Host& other = hosts_[p];
      if (p == h || !other.joined || other.failed) continue;
      if (other.sched->NeighboursWanted() == 0) continue;
      if (!host.sched->AddNeighbour(p, false)) continue;
      other.sched->AddNeighbour(h, false);
      host.neighbours.push_back(p);
      other.neighbours.push_back(h);
      // Each learns the other's state on connecting.
      std::vector<bool> theirs(chunks_), mine(chunks_);
      for (uint32_t c = 0; c < chunks_; ++c) {
        theirs[c] = other.sched->Has(c);
        mine[c] = host.sched->Has(c);
      }
      host.sched->NeighbourState(p, theirs);
      other.sched->NeighbourState(h, mine);
      Pump(p, h);
    }
  }

  // A host with fewer than half its neighbours asks the tracker again in a second.
  void RetryIfAlone(PeerId h) {
    if (hosts_[h].neighbours.size() * 2 < static_cast<size_t>(f_.degree)) {
      Push(now_ + 1.0, Ev::kRetry, h, 0, 0);
    }
  }

  void PumpAll(PeerId h) {
    Pump(h, 0);
    for (PeerId p : hosts_[h].neighbours) Pump(h, p);
  }
  // h asks p for what its scheduler picks.
  void Pump(PeerId h, PeerId p) {
    Host& host = hosts_[h];
    if (host.failed || host.done >= 0) return;
    while (auto c = host.sched->Next(p, Now())) Push(now_ + Latency(), Ev::kRequest, p, h, *c);
  }

  // Whether the origin answers "ask the relays" for chunk c: while it is being
  // sent, then for `claim` seconds ("window"), or as long as the fetcher it went
  // to is not known to have failed ("holder").
  bool Claimed(uint32_t c, double claim) const {
    if (sent_at_[c] < 0) return false;
    if (f_.origin_claim == "window") return now_ - sent_at_[c] < claim;
    const Host& holder = hosts_[holder_[c]];
    return !holder.failed || now_ < holder.failed_at + f_.detect_ms / 1000;
  }

  int SlotsOf(PeerId h) const {
    return h == 0 && f_.origin_slots > 0 ? f_.origin_slots : f_.up_slots;
  }

  void StartUpload(PeerId u) {
    Host& up = hosts_[u];
    while (static_cast<int>(up.ups.size()) < SlotsOf(u) && !up.queue.empty()) {
      auto [d, c] = up.queue.front();
      up.queue.pop_front();
      Host& down = hosts_[d];
      if (down.failed || down.sched->Has(c)) continue;
      if (u == 0) {
        const double claim = f_.claim_chunks * chunk_bytes_ / up.up;
        if (Claimed(c, claim)) {
          Push(now_ + Latency(), Ev::kDeferred, d, 0, c);
          continue;
        }
        sent_at_[c] = 1e300;  // claimed while it is sent, then as --origin-claim says
        holder_[c] = d;
        ++origin_chunks_;
      }
      uint32_t id;
      if (free_.empty()) {
        id = static_cast<uint32_t>(transfers_.size());
        transfers_.emplace_back();
      } else {
        id = free_.back();
        free_.pop_back();
      }
      Transfer& t = transfers_[id];
      t = Transfer{u, d, c, chunk_bytes_, 0, now_, t.version + 1, true};
      up.ups.push_back(id);
      down.downs.push_back(id);
      Reflow(u);
      Reflow(d);
    }
  }

  // Recomputes the rates of the transfers at host h and when each will end.
  void Reflow(PeerId h) {
    for (const auto* list : {&hosts_[h].ups, &hosts_[h].downs}) {
      for (uint32_t id : *list) {
        Transfer& t = transfers_[id];
        t.remaining = std::max(0.0, t.remaining - t.rate * (now_ - t.last));
        t.last = now_;
        t.rate = std::min(hosts_[t.u].up / static_cast<double>(hosts_[t.u].ups.size()),
                          hosts_[t.d].down / static_cast<double>(hosts_[t.d].downs.size()));
        ++t.version;
        Push(now_ + t.remaining / t.rate, Ev::kUploadDone, id, 0, t.version);
      }
    }
  }

  // Ends transfer `id` (done or cut): off both hosts, the others sped up.
  void EndTransfer(uint32_t id) {
    Transfer& t = transfers_[id];
    t.live = false;
    auto off = [id](std::vector<uint32_t>& v) { v.erase(std::find(v.begin(), v.end(), id)); };
    off(hosts_[t.u].ups);
    off(hosts_[t.d].downs);
    free_.push_back(id);
    Reflow(t.u);
    Reflow(t.d);
  }

  void Handle(const Event& e) {
    switch (e.type) {
      case Ev::kJoin: {
        Host& host = hosts_[e.a];
        if (host.failed) return;
        SchedulerOptions o;
        o.max_neighbours = static_cast<size_t>(f_.degree) + 1;
        o.pipeline = f_.pipeline;
        o.random_seed = f_.seed * 1000003 + e.a;
        host.sched = std::make_unique<SwarmScheduler>(chunks_, o);
        if (f_.origin_degree < 0 || origin_fetchers_ < f_.origin_degree) {
          host.sched->AddNeighbour(0, true, f_.seed_pipeline);
          ++origin_fetchers_;
        }
        host.joined = true;
        FindNeighbours(e.a);
        PumpAll(e.a);
        RetryIfAlone(e.a);
        return;
      }
      case Ev::kRequest: {
        Host& up = hosts_[e.a];
        if (up.failed) return;  // noticed by kGone
        const int backlog = e.a == 0 ? (f_.origin_busy ? 0 : -1) : f_.backlog;
        if (backlog >= 0 && static_cast<int>(up.ups.size()) >= SlotsOf(e.a) &&
            static_cast<int>(up.queue.size()) >= backlog) {
          Push(now_ + Latency(), Ev::kBusy, e.b, e.a, e.chunk);
          return;
        }
        up.queue.push_back({e.b, e.chunk});
        StartUpload(e.a);
        return;
      }
      case Ev::kUploadDone: {
        Transfer& t = transfers_[e.a];
        if (!t.live || t.version != e.chunk) return;  // rescheduled, or cut
        const PeerId u = t.u, d = t.d;
        const uint32_t c = t.chunk;
        EndTransfer(e.a);
        if (u == 0) {
          sent_at_[c] = now_;
          origin_last_ = now_;
        }
        Push(now_ + Latency(), Ev::kArrive, d, u, c);
        StartUpload(u);
        return;
      }
      case Ev::kArrive: {
        Host& host = hosts_[e.a];
        if (host.failed || host.done >= 0) return;
        for (const Cancel& c : host.sched->Arrived(e.b, e.chunk)) {
          auto& q = hosts_[c.peer].queue;
          q.erase(std::remove(q.begin(), q.end(), std::make_pair(e.a, c.chunk)), q.end());
          Pump(e.a, c.peer);
        }
        for (PeerId w : host.neighbours) Push(now_ + Latency(), Ev::kHave, w, e.a, e.chunk);
        if (host.sched->Complete()) {
          host.done = now_;
          return;
        }
        Pump(e.a, e.b);
        return;
      }
      case Ev::kDeferred: {
        Host& host = hosts_[e.a];
        if (host.failed || host.done >= 0) return;
        const double claim = f_.claim_chunks * chunk_bytes_ / hosts_[0].up;
        host.sched->Deferred(0, e.chunk,
                             Now() + std::chrono::duration_cast<seedd::SchedulerClock::duration>(
                                         std::chrono::duration<double>(claim)));
        PumpAll(e.a);
        if (!host.wake_pending) {  // the origin may be asked again then
          host.wake_pending = true;
          Push(now_ + claim * 1.001, Ev::kWake, e.a, 0, 0);
        }
        return;
      }
      case Ev::kWake: {
        if (e.b == 0) hosts_[e.a].wake_pending = false;
        Pump(e.a, e.b);
        return;
      }
      case Ev::kBusy: {  // e.b's slots and backlog were full: ask the others
        Host& host = hosts_[e.a];
        if (host.failed || host.done >= 0) return;
        const double retry = f_.busy_retry_ms / 1000;
        host.sched->Busy(e.b, e.chunk,
                         Now() + std::chrono::duration_cast<seedd::SchedulerClock::duration>(
                                     std::chrono::duration<double>(retry)));
        PumpAll(e.a);
        Push(now_ + retry * 1.001, Ev::kWake, e.a, e.b, 0);
        return;
      }
      case Ev::kRetry: {  // ask the tracker again: others may have room now
        Host& host = hosts_[e.a];
        if (host.failed || host.done >= 0) return;
        FindNeighbours(e.a);
        PumpAll(e.a);
        RetryIfAlone(e.a);
        return;
      }
      case Ev::kHave: {
        Host& host = hosts_[e.a];
        if (host.failed || host.done >= 0) return;
        host.sched->NeighbourHas(e.b, e.chunk);
        Pump(e.a, e.b);  // a HAVE only ever takes work from the origin, never adds some
        return;
      }
      case Ev::kFail: {
        Host& host = hosts_[e.a];
        host.failed = true;
        host.failed_at = now_;
        host.queue.clear();
        std::vector<uint32_t> cut = host.ups;
        cut.insert(cut.end(), host.downs.begin(), host.downs.end());
        for (uint32_t id : cut) {
          const PeerId sender = transfers_[id].u;
          EndTransfer(id);
          if (sender != e.a) StartUpload(sender);
        }
        for (PeerId w : host.neighbours) Push(now_ + f_.detect_ms / 1000, Ev::kGone, w, e.a, 0);
        return;
      }
      case Ev::kGone: {
        Host& host = hosts_[e.a];
        if (host.failed || !host.joined) return;
        host.sched->RemoveNeighbour(e.b);
        host.neighbours.erase(std::remove(host.neighbours.begin(), host.neighbours.end(), e.b),
                              host.neighbours.end());
        if (host.done >= 0) return;
        FindNeighbours(e.a);
        PumpAll(e.a);
        RetryIfAlone(e.a);
        return;
      }
    }
  }

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

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"swarm_sim: a fleet pulling one model at once, simulated with the real scheduler"};
  app.add_option("--hosts", f.hosts, "fetchers (besides the origin)")->capture_default_str();
  app.add_option("--model-gib", f.model_gib, "model size in GiB")->capture_default_str();
  app.add_option("--chunk-mib", f.chunk_mib, "chunk size in MiB")->capture_default_str();
  app.add_option("--link-gbit", f.link_gbit, "every host's uplink and downlink, Gbit/s")
      ->capture_default_str();
  app.add_option("--degree", f.degree, "relay neighbours per host")->capture_default_str();
  app.add_option("--origin-degree", f.origin_degree,
                 "fetchers the origin serves directly (the first to join; -1: all)")
      ->capture_default_str();
  app.add_option("--pipeline", f.pipeline, "requests in flight per neighbour")
      ->capture_default_str();
  app.add_option("--seed-pipeline", f.seed_pipeline, "requests in flight to the origin per fetcher")
      ->capture_default_str();
  app.add_option("--up-slots", f.up_slots, "chunks a host sends at once")->capture_default_str();
  app.add_option("--origin-slots", f.origin_slots, "the origin's upload slots (0: --up-slots)")
      ->capture_default_str();
  app.add_option("--origin-busy", f.origin_busy,
                 "the origin answers busy beyond its slots (else it queues requests)")
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
