#include "sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace swarm_sim {

using seedd::Cancel;
using seedd::SchedulerOptions;

Sim::Sim(const Flags& f) : f_(f), rng_(f.seed) {
  chunk_bytes_ = f.chunk_mib > 0 ? f.chunk_mib * 1048576.0
                                 : static_cast<double>(seedd::AutoChunkBytes(
                                       static_cast<uint64_t>(f.model_gib * 1073741824.0)));
  chunks_ = static_cast<uint32_t>(std::ceil(f.model_gib * 1073741824.0 / chunk_bytes_));
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

void Sim::Run() {
  while (!events_.empty()) {
    Event e = events_.top();
    events_.pop();
    now_ = e.t;
    if (now_ > f_.give_up_bounds * bound_) return;  // a swarm that stopped progressing
    Handle(e);
  }
}

void Sim::Report() const {
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
              chunk_bytes_ / 1048576, f_.degree, failed, unfinished,
              static_cast<unsigned long long>(seq_));
  {
    double idle = 0, total = 0;
    for (PeerId h = 1; h < hosts_.size(); ++h) {
      if (hosts_[h].done < 0) continue;
      idle += hosts_[h].idle;
      total += hosts_[h].done - hosts_[h].join;
    }
    std::printf("downlinks idle (nothing arriving) %.3f of the time\n", idle / total);
  }
  std::printf("the origin's last chunk ended at %.3f x the bound\n", origin_last_ / bound_);
  if (!late.empty()) {
    std::printf("late joiners: %zu p50=%.3f p99=%.3f max=%.3f\n", late.size(), pct(late, 0.5),
                pct(late, 0.99), pct(late, 1));
  }
  std::printf("swarm_sim: hosts=%d p50=%.3f p99=%.3f max=%.3f bound=%.3f origin=%.3f\n", f_.hosts,
              pct(all, 0.5), pct(all, 0.99), pct(all, 1), bound_,
              origin_chunks_ * chunk_bytes_ / (chunks_ * chunk_bytes_));
}

bool Sim::AllDone() const {
  for (PeerId h = 1; h < hosts_.size(); ++h) {
    if (!hosts_[h].failed && hosts_[h].done < 0) return false;
  }
  return true;
}

bool Sim::Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

double Sim::Latency() {
  return f_.latency_ms / 1000 *
         std::uniform_real_distribution<double>(1 - f_.jitter, 1 + f_.jitter)(rng_);
}

void Sim::Push(double t, Ev type, PeerId a, PeerId b, uint32_t chunk, bool waiting) {
  events_.push({t, seq_++, type, a, b, chunk, waiting});
}

seedd::SchedulerClock::time_point Sim::Now() const {
  return seedd::SchedulerClock::time_point(
      std::chrono::duration_cast<seedd::SchedulerClock::duration>(
          std::chrono::duration<double>(now_)));
}

void Sim::FindNeighbours(PeerId h) {
  Host& host = hosts_[h];
  for (int tries = 0; tries < 4 * f_.degree && host.sched->NeighboursWanted() > 0; ++tries) {
    const PeerId p = 1 + static_cast<PeerId>(rng_() % (hosts_.size() - 1));
    Host& other = hosts_[p];
    if (p == h || !other.joined || other.failed) continue;
    if (f_.symmetric && other.sched->NeighboursWanted() == 0) {
      // A full host takes in a host with fewer than half its neighbours in
      // place of its least useful neighbour, when that one has more than half.
      if (!f_.make_room || host.neighbours.size() * 2 >= static_cast<size_t>(f_.degree)) continue;
      auto least = other.sched->LeastUseful();
      if (!least || hosts_[*least].neighbours.size() * 2 <= static_cast<size_t>(f_.degree))
        continue;
      if (host.sched->IsNeighbour(p)) continue;
      DropLink(p, *least);
    }
    if (f_.max_watchers > 0 && static_cast<int>(other.watchers.size()) >= f_.max_watchers) {
      continue;
    }
    if (!host.sched->AddNeighbour(p, false)) continue;
    Link(h, p);
    if (f_.symmetric && other.sched->AddNeighbour(h, false)) {
      other.neighbours.push_back(h);
      host.watchers.push_back(p);
      std::vector<bool> mine(chunks_);
      for (uint32_t c = 0; c < chunks_; ++c) mine[c] = host.sched->Has(c);
      other.sched->NeighbourState(h, mine);
      Pump(p, h);
    }
  }
}

void Sim::Link(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  Host& other = hosts_[p];
  host.neighbours.push_back(p);
  other.watchers.push_back(h);
  // It learns the other's state on connecting.
  std::vector<bool> theirs(chunks_);
  for (uint32_t c = 0; c < chunks_; ++c) theirs[c] = other.sched->Has(c);
  host.sched->NeighbourState(p, theirs);
}

void Sim::Unlink(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  auto& w = hosts_[p].watchers;
  w.erase(std::remove(w.begin(), w.end(), h), w.end());
  host.neighbours.erase(std::remove(host.neighbours.begin(), host.neighbours.end(), p),
                        host.neighbours.end());
  // Its requests still queued there are dropped with the connection.
  auto& q = hosts_[p].queue;
  q.erase(std::remove_if(q.begin(), q.end(), [h](const auto& r) { return r.first == h; }), q.end());
  auto& held = hosts_[p].held;
  held.erase(std::remove_if(held.begin(), held.end(), [h](const auto& r) { return r.first == h; }),
             held.end());
  host.sched->RemoveNeighbour(p);
}

void Sim::DropLink(PeerId h, PeerId p) {
  for (PeerId from : {h, p}) {
    const PeerId to = from == h ? p : h;
    Host& host = hosts_[from];
    if (!host.sched || !host.sched->IsNeighbour(to)) continue;
    for (uint32_t id : std::vector<uint32_t>(host.downs)) {
      if (transfers_[id].u == to) {
        host.sched->Returned(to, transfers_[id].chunk);
        EndTransfer(id);
        StartUpload(to);
      }
    }
    Unlink(from, to);
  }
}

void Sim::Follow(PeerId h, uint32_t c) {
  Host& host = hosts_[h];
  const PeerId holder = holder_[c];
  if (holder == h || host.sched->Holders(c) > 0 || host.sched->IsNeighbour(holder) ||
      hosts_[holder].failed) {
    return;
  }
  if (host.sched->NeighboursWanted() == 0) {
    auto least = host.sched->LeastUseful();
    if (!least) return;
    DropLink(h, *least);
  }
  if (!host.sched->AddNeighbour(holder, false)) return;
  Link(h, holder);
  Pump(h, holder);
}

void Sim::RetryIfAlone(PeerId h) {
  Host& host = hosts_[h];
  if (f_.symmetric) {
    if (host.neighbours.size() * 2 < static_cast<size_t>(f_.degree) && !host.retry_pending) {
      host.retry_pending = true;
      Push(now_ + 1.0, Ev::kRetry, h, 0, 0);
    }
    return;
  }
  // The real fetcher asks a seed's state for relays while its neighbour set has
  // room: first after --first-ask-ms, the wait doubling to --state-ms.
  if (host.sched->NeighboursWanted() == 0 || host.retry_pending) return;
  host.retry_pending = true;
  Push(now_ + std::chrono::duration<double>(host.asks->wait()).count(), Ev::kRetry, h, 0, 0);
}

void Sim::Connect(PeerId h) {
  if (f_.symmetric || hosts_[h].asks->Due(Now())) FindNeighbours(h);
  PumpAll(h);
  RetryIfAlone(h);
}

void Sim::PumpAll(PeerId h) {
  Pump(h, 0);
  for (PeerId p : hosts_[h].neighbours) Pump(h, p);
}

void Sim::Pump(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  if (host.failed || host.done >= 0) return;
  while (auto c = host.sched->Next(p, Now())) {
    Push(now_ + Latency(), Ev::kRequest, p, h, *c, host.downs.empty());
  }
}

bool Sim::Claimed(uint32_t c, double claim) const {
  if (sent_at_[c] < 0) return false;
  if (f_.origin_claim == "window") return now_ - sent_at_[c] < claim;
  const Host& holder = hosts_[holder_[c]];
  return !holder.failed || now_ < holder.failed_at + f_.detect_ms / 1000;
}

int Sim::SlotsOf(PeerId h) const {
  return h == 0 && f_.origin_slots > 0 ? f_.origin_slots : f_.up_slots;
}

void Sim::StartUpload(PeerId u) {
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
    t = Transfer{u, d, c, chunk_bytes_, 0, now_, t.version + 1, true, t.serial + 1};
    up.ups.push_back(id);
    if (down.downs.empty()) down.idle += now_ - down.idle_since;
    down.downs.push_back(id);
    Reflow(u);
    Reflow(d);
    if (f_.ahead) Push(now_ + Latency() + chunk_bytes_ / 2 / t.rate, Ev::kHalf, id, 0, t.serial);
  }
}

void Sim::Reflow(PeerId h) {
  for (const auto* list : {&hosts_[h].ups, &hosts_[h].downs}) {
    for (uint32_t id : *list) {
      Transfer& t = transfers_[id];
      const double rate =
          std::min(hosts_[t.u].up / static_cast<double>(hosts_[t.u].ups.size()),
                   hosts_[t.d].down / static_cast<double>(hosts_[t.d].downs.size()));
      if (rate == t.rate) continue;  // its end stays as scheduled
      t.remaining = std::max(0.0, t.remaining - t.rate * (now_ - t.last));
      t.last = now_;
      t.rate = rate;
      ++t.version;
      Push(now_ + t.remaining / t.rate, Ev::kUploadDone, id, 0, t.version);
    }
  }
}

void Sim::EndTransfer(uint32_t id) {
  Transfer& t = transfers_[id];
  t.live = false;
  auto off = [id](std::vector<uint32_t>& v) { v.erase(std::find(v.begin(), v.end(), id)); };
  off(hosts_[t.u].ups);
  off(hosts_[t.d].downs);
  if (hosts_[t.d].downs.empty()) hosts_[t.d].idle_since = now_;
  free_.push_back(id);
  Reflow(t.u);
  Reflow(t.d);
}

void Sim::Handle(const Event& e) {
  switch (e.type) {
    case Ev::kJoin: {
      Host& host = hosts_[e.a];
      if (host.failed) return;
      SchedulerOptions o;
      o.max_neighbours = static_cast<size_t>(f_.degree) + 1;
      o.pipeline = f_.pipeline;
      o.max_requests = f_.max_requests;
      o.catch_up_requests = f_.catch_up;
      o.random_seed = f_.seed * 1000003 + e.a;
      host.sched = std::make_unique<SwarmScheduler>(chunks_, o);
      auto ms = [](double v) { return std::chrono::milliseconds(static_cast<int64_t>(v)); };
      host.asks = std::make_unique<seedd::TrackerCadence>(ms(f_.first_ask_ms), ms(f_.state_ms));
      if (f_.origin_degree < 0 || origin_fetchers_ < f_.origin_degree) {
        host.sched->AddNeighbour(0, true, f_.seed_pipeline);
        ++origin_fetchers_;
      }
      host.joined = true;
      host.idle_since = now_;
      Connect(e.a);
      return;
    }
    case Ev::kRequest: {
      Host& up = hosts_[e.a];
      if (up.failed) return;  // noticed by kGone
      for (uint32_t id : up.ups) {
        if (transfers_[id].d == e.b) {
          up.held.push_back({e.b, e.chunk});
          return;
        }
      }
      const int backlog = e.a == 0 ? (f_.origin_busy ? 0 : -1) : f_.backlog;
      if (backlog >= 0 && static_cast<int>(up.ups.size()) >= SlotsOf(e.a) &&
          static_cast<int>(up.queue.size()) >= backlog) {
        // A host with nothing arriving waits in line for the next free slot
        // (as many as there are slots).
        const double window = 2 * f_.busy_retry_ms / 1000;
        auto& away = up.turned_away;
        away.erase(std::remove_if(away.begin(), away.end(),
                                  [&](const auto& a) { return now_ - a.second > window; }),
                   away.end());
        auto was =
            std::find_if(away.begin(), away.end(), [&](const auto& a) { return a.first == e.b; });
        if (!f_.fair_slots || !e.waiting || was == away.end()) {
          if (f_.fair_slots) away.push_back({e.b, now_});
          Push(now_ + Latency(), Ev::kBusy, e.b, e.a, e.chunk);
          return;
        }
        away.erase(was);
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
      {
        Host& sender = hosts_[u];
        auto own = std::find_if(sender.held.begin(), sender.held.end(),
                                [d](const auto& r) { return r.first == d; });
        if (own != sender.held.end()) {
          // Behind those waiting in line (--fair-slots), else first.
          if (f_.fair_slots) {
            sender.queue.push_back(*own);
          } else {
            sender.queue.push_front(*own);
          }
          sender.held.erase(own);
        }
      }
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
      Push(now_ + Latency(), Ev::kHave, e.a, 0, e.chunk);  // to every neighbour
      if (host.sched->Complete()) {
        host.done = now_;
        return;
      }
      if (f_.max_requests > 0) {
        PumpAll(e.a);
      } else {
        Pump(e.a, e.b);
      }
      return;
    }
    case Ev::kDeferred: {
      Host& host = hosts_[e.a];
      if (host.failed || host.done >= 0) return;
      const double claim = f_.claim_chunks * chunk_bytes_ / hosts_[0].up;
      if (!f_.symmetric && f_.origin_claim == "holder") Follow(e.a, e.chunk);
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
    case Ev::kHalf: {  // half the chunk is at the receiver: its next request goes out
      const Transfer& t = transfers_[e.a];
      if (!t.live || t.serial != e.chunk) return;
      Host& host = hosts_[t.d];
      if (host.failed || host.done >= 0 || host.sched->InFlight(t.u) != 1) return;
      if (auto c = host.sched->Next(t.u, Now(), true)) {
        Push(now_ + Latency(), Ev::kRequest, t.u, t.d, *c);
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
      host.retry_pending = false;
      if (host.failed || host.done >= 0) return;
      Connect(e.a);
      return;
    }
    case Ev::kHave: {  // e.a tells those fetching from it that it has e.chunk (one event)
      for (PeerId w : hosts_[e.a].watchers) {
        Host& host = hosts_[w];
        if (host.failed || host.done >= 0) continue;
        host.sched->NeighbourHas(e.a, e.chunk);
        Pump(w, e.a);  // a HAVE only ever takes work from the origin, never adds some
      }
      return;
    }
    case Ev::kFail: {
      Host& host = hosts_[e.a];
      host.failed = true;
      host.failed_at = now_;
      host.queue.clear();
      host.held.clear();
      std::vector<uint32_t> cut = host.ups;
      cut.insert(cut.end(), host.downs.begin(), host.downs.end());
      for (uint32_t id : cut) {
        const PeerId sender = transfers_[id].u;
        EndTransfer(id);
        if (sender != e.a) StartUpload(sender);
      }
      for (PeerId w : host.watchers) Push(now_ + f_.detect_ms / 1000, Ev::kGone, w, e.a, 0);
      return;
    }
    case Ev::kGone: {
      Host& host = hosts_[e.a];
      if (host.failed || !host.joined) return;
      host.sched->RemoveNeighbour(e.b);
      host.neighbours.erase(std::remove(host.neighbours.begin(), host.neighbours.end(), e.b),
                            host.neighbours.end());
      if (host.done >= 0) return;
      Connect(e.a);
      return;
    }
  }
}

}  // namespace swarm_sim
