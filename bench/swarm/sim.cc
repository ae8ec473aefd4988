#include "sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace swarm_sim {

using seedd::NewNeighbour;
using seedd::NotThereVerdict;
using seedd::Taken;

namespace {

// The real fetcher takes the relays that announced themselves to its own
// server as candidates this often while its neighbour set has room
// (FetchOptions::announced, polled by Fetch::Run).
constexpr double kAnnouncedPoll = 0.05;

}  // namespace

Sim::Sim(const Flags& f) : f_(f), rng_(f.seed) {
  chunk_bytes_ = f.chunk_mib > 0 ? f.chunk_mib * 1048576.0
                                 : static_cast<double>(seedd::AutoChunkBytes(
                                       static_cast<uint64_t>(f.model_gib * 1073741824.0)));
  chunks_ = static_cast<uint32_t>(std::ceil(f.model_gib * 1073741824.0 / chunk_bytes_));
  const double link = f.link_gbit * 1e9 / 8;
  bound_ = chunks_ * chunk_bytes_ / link;
  origin_ = std::make_unique<seedd::ServerCore>(chunks_, f.swarm);
  hosts_.resize(static_cast<size_t>(f.hosts) + 1);
  for (PeerId h = 0; h < hosts_.size(); ++h) {
    seedd::SwarmPolicy slots = f.swarm;
    if (h == 0 && f.origin_slots > 0) slots.upload_slots = f.origin_slots;
    hosts_[h].slots = std::make_unique<seedd::UploadSlots>(slots);
  }
  hosts_[0].up = hosts_[0].down = link * f.origin_link_factor;
  hosts_[0].joined = true;
  hosts_[0].name = "origin:1";
  std::uniform_real_distribution<double> within(0, bound_);
  for (PeerId h = 1; h <= static_cast<PeerId>(f.hosts); ++h) {
    Host& host = hosts_[h];
    host.name = "10.0.0." + std::to_string(h) + ":1";
    const bool slow = Chance(f.slow_fraction);
    host.up = host.down = slow ? link / f.slow_factor : link;
    host.late = Chance(f.late_fraction);
    host.join = host.late ? within(rng_) : f.start_spread_ms / 1000 * (h - 1) / f.hosts;
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
    // Late joiners from their own start; the others from the fleet's first.
    const double ratio = (host.done - (host.late ? host.join : 0)) / own_bound;
    all.push_back(ratio);
    if (host.late) late.push_back(ratio);
  }
  auto pct = [](std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
  };
  std::printf(
      "chunks=%u chunk_mib=%g max_neighbours=%zu failed=%zu unfinished=%zu events=%llu "
      "forced=%llu\n",
      chunks_, chunk_bytes_ / 1048576, f_.fetch.max_neighbours, failed, unfinished,
      static_cast<unsigned long long>(seq_), static_cast<unsigned long long>(forced_));
  {
    double idle = 0, total = 0;
    for (PeerId h = 1; h < hosts_.size(); ++h) {
      if (hosts_[h].done < 0) continue;
      idle += hosts_[h].idle;
      total += hosts_[h].done - hosts_[h].join;
    }
    std::printf("downlinks idle (nothing arriving) %.3f of the time\n", idle / total);
  }
  std::printf("the origin's last chunk ended at %.3f x the bound; its uplink busy %.3f of that\n",
              origin_last_ / bound_, hosts_[0].up_busy / origin_last_);
  if (!late.empty()) {
    std::printf("late joiners: %zu p50=%.3f p99=%.3f max=%.3f\n", late.size(), pct(late, 0.5),
                pct(late, 0.99), pct(late, 1));
  }
  if (f_.slowest > 0) {
    std::vector<std::pair<double, PeerId>> order;
    for (PeerId h = 1; h < hosts_.size(); ++h) {
      if (hosts_[h].done >= 0) order.push_back({hosts_[h].done - hosts_[h].join, h});
    }
    std::sort(order.begin(), order.end());
    if (!order.empty()) {
      std::printf("the median host, then the slowest: chunks verified per 1/20 of the bound\n");
      std::vector<PeerId> pick = {order[order.size() / 2].second};
      for (size_t i = order.size() - std::min(order.size(), static_cast<size_t>(f_.slowest));
           i < order.size(); ++i) {
        pick.push_back(order[i].second);
      }
      for (PeerId h : pick) {
        const Host& x = hosts_[h];
        const double took = x.done - x.join;
        std::printf(
            "  host %u: %.3f x the bound, downlink idle %.3f, uplink busy %.3f, transfers "
            "arriving %.2f on average, %d busy answers, chunks from %zu hosts (%zu neighbours "
            "at the end, %d chunks from the origin), %zu fetching from it:",
            h, took / bound_, x.idle / took, x.up_busy / took, x.downs_time / took, x.busy,
            x.senders.size(), x.neighbours.size(), x.senders.count(0) ? x.senders.at(0) : 0,
            x.watchers.size());
        for (int a : x.arrivals) std::printf(" %d", a);
        std::printf("\n");
      }
    }
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

double Sim::QueueDelay(PeerId x) const {
  if (f_.uplink_queue_ms <= 0) return 0;
  const Host& h = hosts_[x];
  double sending = 0;
  for (uint32_t id : h.ups) sending += transfers_[id].rate;
  return sending >= h.up * 0.99 ? f_.uplink_queue_ms / 1000 : 0;
}

double Sim::From(PeerId x) { return Latency() + QueueDelay(x); }

void Sim::Push(double t, Ev type, PeerId a, PeerId b, uint32_t chunk, bool waiting, bool claim) {
  events_.push({t, seq_++, type, a, b, chunk, waiting, claim});
}

seedd::SchedulerClock::time_point Sim::Now() const {
  // Offset so that no simulated time is the clock's zero (read as "never").
  return seedd::SchedulerClock::time_point(
      std::chrono::hours(1) + std::chrono::duration_cast<seedd::SchedulerClock::duration>(
                                  std::chrono::duration<double>(now_)));
}

void Sim::Learn(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  if (p == h || host.core_of.count(p) != 0) return;
  std::optional<PeerId> id = host.core->AddSource(hosts_[p].name, p == 0);
  if (!id) id = host.core->IdOf(hosts_[p].name);  // named to the core by a claim
  if (!id) return;
  if (host.host_of.size() <= *id) host.host_of.resize(*id + 1);
  host.host_of[*id] = p;
  host.core_of[p] = *id;
}

PeerId Sim::HostOf(const std::string& name) {
  // "10.0.0.N:1"
  const size_t dot = name.rfind('.'), colon = name.rfind(':');
  if (dot == std::string::npos || colon == std::string::npos || colon < dot) return 0;
  return static_cast<PeerId>(std::stoul(name.substr(dot + 1, colon - dot - 1)));
}

void Sim::Prune(PeerId h) {
  Host& host = hosts_[h];
  for (PeerId p : std::vector<PeerId>(host.neighbours)) {
    if (host.core->Active(host.core_of.at(p))) continue;
    // Its connections end: what is queued there is dropped; a chunk on the
    // wire still lands.
    host.neighbours.erase(std::remove(host.neighbours.begin(), host.neighbours.end(), p),
                          host.neighbours.end());
    auto& w = hosts_[p].watchers;
    w.erase(std::remove(w.begin(), w.end(), h), w.end());
    Host& other = hosts_[p];
    std::vector<seedd::UploadSlots::Id> granted;
    for (auto w = other.waiting.begin(); w != other.waiting.end();) {
      if (w->second.from == h) {
        other.slots->GiveUp(w->first, Now(), &granted);
        w = other.waiting.erase(w);
      } else {
        ++w;
      }
    }
    Granted(p, granted);
  }
}

void Sim::FillNeighbours(PeerId h) {
  Host& host = hosts_[h];
  for (const NewNeighbour& n : host.core->FillNeighbours()) {
    const PeerId p = host.host_of[n.id];
    Host& other = hosts_[p];
    if (other.failed) {  // the connection is refused
      Push(now_ + 2 * Latency(), Ev::kGone, h, p, 0);
      continue;
    }
    host.neighbours.push_back(p);
    other.watchers.push_back(h);
    // Its state, then what it verifies (the watch).
    std::vector<bool> theirs(chunks_, p == 0);
    if (p != 0 && other.core) {
      for (uint32_t c = 0; c < chunks_; ++c) theirs[c] = other.core->scheduler().Has(c);
    }
    host.core->OnState(n.id, theirs);
    Pump(h, p);
  }
}

void Sim::AskRelays(PeerId h) {
  Host& host = hosts_[h];
  if (host.failed || host.done >= 0) return;
  if (host.core->WantRelays(Now())) {
    // A state request to the origin: it announces h and lists relays.
    origin_->Announce(host.name, "s", Now());
    for (const std::string& name :
         origin_->Peers(host.name, f_.swarm.max_peers_listed, rng_, Now())) {
      Learn(h, HostOf(name));
    }
  }
  // Those that announced themselves to h (they fetch from it).
  for (PeerId w : host.watchers) {
    if (!hosts_[w].failed) Learn(h, w);
  }
  FillNeighbours(h);
  if (host.core->WantsRelays() && !host.ask_pending) {
    host.ask_pending = true;
    Push(now_ + std::min(kAnnouncedPoll, Seconds(host.core->RelayWait())), Ev::kAskRelays, h, 0, 0);
  }
}

void Sim::Failed(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  auto it = host.core_of.find(p);
  if (host.failed || !host.core || it == host.core_of.end()) return;
  host.neighbours.erase(std::remove(host.neighbours.begin(), host.neighbours.end(), p),
                        host.neighbours.end());
  auto& w = hosts_[p].watchers;
  w.erase(std::remove(w.begin(), w.end(), h), w.end());
  for (uint32_t id : std::vector<uint32_t>(host.downs)) {
    if (transfers_[id].u == p) EndTransfer(id, false);
  }
  host.core->OnFailed(it->second);
  if (host.done >= 0) return;
  AskRelays(h);
  PumpAll(h);
}

void Sim::PumpAll(PeerId h) {
  for (PeerId p : std::vector<PeerId>(hosts_[h].neighbours)) Pump(h, p);
}

void Sim::Pump(PeerId h, PeerId p) {
  Host& host = hosts_[h];
  if (host.failed || host.done >= 0) return;
  auto it = host.core_of.find(p);
  if (it == host.core_of.end()) return;
  while (std::optional<Taken> t = host.core->Next(it->second, Now())) {
    Push(now_ + From(h), Ev::kRequest, p, h, t->index, host.downs.empty(), t->claim);
  }
}

void Sim::Ask(PeerId u, const Queued& q, bool waiting) {
  Host& up = hosts_[u];
  const std::string& name = hosts_[q.from].name;
  const seedd::UploadSlots::Answer a =
      up.slots->Ask(name, name, waiting, Now(), [&](seedd::UploadSlots::Id id) -> uint64_t {
        auto it = up.sending.find(id);
        if (it == up.sending.end()) return 0;
        const Transfer& t = transfers_[it->second];
        return static_cast<uint64_t>(
            std::max(0.0, t.size - std::max(0.0, t.remaining - t.rate * (now_ - t.last))));
      });
  for (const seedd::UploadSlots::Preempted& p : a.preempt) {
    auto it = up.sending.find(p.id);
    if (it != up.sending.end()) EndTransfer(it->second, false);  // its connection closed
  }
  switch (a.verdict) {
    case seedd::UploadSlots::Verdict::kSend:
      Send(u, a.id, q);
      return;
    case seedd::UploadSlots::Verdict::kBusy:
      Push(now_ + From(u), Ev::kBusy, q.from, u, q.chunk);
      return;
    case seedd::UploadSlots::Verdict::kWait:
      up.waiting.emplace(a.id, q);
      Push(now_ + Seconds(f_.swarm.own_slot_wait), Ev::kSlotWaitEnds, u, 0,
           static_cast<uint32_t>(a.id));
      return;
  }
}

void Sim::Granted(PeerId u, const std::vector<seedd::UploadSlots::Id>& ids) {
  Host& up = hosts_[u];
  for (seedd::UploadSlots::Id id : ids) {
    auto it = up.waiting.find(id);
    if (it == up.waiting.end()) continue;
    const Queued q = it->second;
    up.waiting.erase(it);
    Send(u, id, q);
  }
}

void Sim::Send(PeerId u, seedd::UploadSlots::Id slot, const Queued& q) {
  Host& up = hosts_[u];
  if (up.failed) return;
  Host& down = hosts_[q.from];
  if (down.failed || down.core->scheduler().Has(q.chunk)) {
    Granted(u, up.slots->Release(slot, Now()));
    return;
  }
  if (u == 0) {
    if (q.claim) {
      seedd::ClaimAnswer a = origin_->Claim(down.name, q.chunk, Now());
      if (!a.send) {  // "claimed", naming the holder
        Push(now_ + From(0), Ev::kClaimed, q.from, f_.follow_holders ? HostOf(a.holder) : 0,
             q.chunk);
        Granted(u, up.slots->Release(slot, Now()));
        return;
      }
    }
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
  t = Transfer{u, q.from, q.chunk,       q.claim, chunk_bytes_, chunk_bytes_,
               0, now_,   t.version + 1, true,    t.serial + 1, slot};
  AddUp(u, id);
  up.sending[slot] = id;
  AddDown(q.from, id);
  Reflow(u);
  Reflow(q.from);
  if (f_.ahead) Push(now_ + From(u) + chunk_bytes_ / 2 / t.rate, Ev::kHalf, id, 0, t.serial);
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

void Sim::AddDown(PeerId h, uint32_t id) {
  Host& host = hosts_[h];
  if (host.downs.empty()) host.idle += now_ - host.idle_since;
  host.downs_time += host.downs.size() * (now_ - host.downs_since);
  host.downs_since = now_;
  host.downs.push_back(id);
}

void Sim::RemoveDown(PeerId h, uint32_t id) {
  Host& host = hosts_[h];
  host.downs_time += host.downs.size() * (now_ - host.downs_since);
  host.downs_since = now_;
  host.downs.erase(std::find(host.downs.begin(), host.downs.end(), id));
  if (host.downs.empty()) host.idle_since = now_;
}

void Sim::AddUp(PeerId h, uint32_t id) {
  Host& host = hosts_[h];
  if (host.ups.empty()) host.up_since = now_;
  host.ups.push_back(id);
}

void Sim::RemoveUp(PeerId h, uint32_t id) {
  Host& host = hosts_[h];
  host.ups.erase(std::find(host.ups.begin(), host.ups.end(), id));
  if (host.ups.empty()) host.up_busy += now_ - host.up_since;
}

void Sim::EndTransfer(uint32_t id, bool complete) {
  Transfer& t = transfers_[id];
  t.live = false;
  RemoveUp(t.u, id);
  RemoveDown(t.d, id);
  if (t.u == 0) origin_->EndSend(hosts_[t.d].name, t.chunk, complete, Now());
  if (!complete && !hosts_[t.d].failed && !hosts_[t.u].failed && hosts_[t.d].core) {
    auto it = hosts_[t.d].core_of.find(t.u);
    if (it != hosts_[t.d].core_of.end()) hosts_[t.d].core->OnReturned(it->second, t.chunk);
  }
  free_.push_back(id);
  const PeerId u = t.u;
  const seedd::UploadSlots::Id slot = t.slot;
  Reflow(u);
  Reflow(t.d);
  hosts_[u].sending.erase(slot);
  Granted(u, hosts_[u].slots->Release(slot, Now()));
}

void Sim::Handle(const Event& e) {
  switch (e.type) {
    case Ev::kJoin: {
      Host& host = hosts_[e.a];
      if (host.failed) return;
      host.core = std::make_unique<seedd::FetcherCore>(
          std::vector<uint64_t>(chunks_, static_cast<uint64_t>(chunk_bytes_)), f_.fetch,
          /*relaying=*/true, f_.seed * 1000003 + e.a);
      host.joined = true;
      host.idle_since = now_;
      origin_->Announce(host.name, "s", Now());  // its first connection there
      Learn(e.a, 0);
      host.core->SourcesKnown();
      AskRelays(e.a);
      return;
    }
    case Ev::kRequest: {
      Host& up = hosts_[e.a];
      if (up.failed) return;  // noticed by kGone
      Ask(e.a, Queued{e.b, e.chunk, e.claim}, e.waiting);
      return;
    }
    case Ev::kUploadDone: {
      Transfer& t = transfers_[e.a];
      if (!t.live || t.version != e.chunk) return;  // rescheduled, or cut
      const PeerId u = t.u, d = t.d;
      const uint32_t c = t.chunk;
      const double queued = QueueDelay(u);  // its last bytes behind the uplink's others
      EndTransfer(e.a, true);
      if (u == 0) origin_last_ = now_;
      Push(now_ + Latency() + queued, Ev::kArrive, d, u, c);
      return;
    }
    case Ev::kArrive: {
      Host& host = hosts_[e.a];
      if (host.failed || host.done >= 0) return;
      auto from = host.core_of.find(e.b);
      if (from == host.core_of.end()) return;
      const uint64_t rotations = host.core->rotations();
      host.core->OnArrived(from->second, e.chunk);  // endgame copies are drained
      const size_t twentieth = static_cast<size_t>((now_ - host.join) / bound_ * 20);
      if (host.arrivals.size() <= twentieth) host.arrivals.resize(twentieth + 1);
      ++host.arrivals[twentieth];
      ++host.senders[e.b];
      Push(now_ + From(e.a), Ev::kHave, e.a, 0, e.chunk);  // to every watcher
      if (host.core->Complete()) {
        host.done = now_;
        return;
      }
      if (host.core->rotations() != rotations) {
        Prune(e.a);
        AskRelays(e.a);
      } else if (host.core->WantsRelays() && !host.ask_pending) {
        AskRelays(e.a);  // the rotation found no candidate
      }
      PumpAll(e.a);
      return;
    }
    case Ev::kClaimed: {  // the origin answered "claimed": ask the relays
      Host& host = hosts_[e.a];
      if (host.failed || host.done >= 0) return;
      const NotThereVerdict v = host.core->OnClaimed(host.core_of.at(0), e.chunk, Now(),
                                                     e.b != 0 ? hosts_[e.b].name : "");
      if (v == NotThereVerdict::kForcedOld || v == NotThereVerdict::kForcedNoRelay) ++forced_;
      if (e.b != 0) Learn(e.a, e.b);  // a holder the core follows
      Prune(e.a);
      FillNeighbours(e.a);
      PumpAll(e.a);
      if (!host.wake_pending) {  // the origin may be asked again then
        host.wake_pending = true;
        Push(now_ + Seconds(seedd::kClaimRetry) * 1.001, Ev::kWake, e.a, 0, 0);
      }
      return;
    }
    case Ev::kHalf: {  // half the chunk is at the receiver: its next request goes out
      const Transfer& t = transfers_[e.a];
      if (!t.live || t.serial != e.chunk) return;
      Host& host = hosts_[t.d];
      if (host.failed || host.done >= 0) return;
      const PeerId id = host.core_of.at(t.u);
      if (host.core->scheduler().InFlight(id) != 1) return;
      if (std::optional<Taken> next = host.core->Next(id, Now(), true)) {
        Push(now_ + From(t.d), Ev::kRequest, t.u, t.d, next->index, false, next->claim);
      }
      return;
    }
    case Ev::kWake: {
      if (e.b == 0) hosts_[e.a].wake_pending = false;
      Pump(e.a, e.b);
      return;
    }
    case Ev::kBusy: {  // e.b's slots were full: ask the others
      Host& host = hosts_[e.a];
      if (host.failed || host.done >= 0) return;
      ++host.busy;
      const double retry = Seconds(f_.swarm.busy_retry);
      host.core->OnBusy(host.core_of.at(e.b), e.chunk,
                        Now() + std::chrono::duration_cast<seedd::SchedulerClock::duration>(
                                    std::chrono::duration<double>(retry)));
      PumpAll(e.a);
      Push(now_ + retry * 1.001, Ev::kWake, e.a, e.b, 0);
      return;
    }
    case Ev::kAskRelays: {
      hosts_[e.a].ask_pending = false;
      AskRelays(e.a);
      PumpAll(e.a);
      return;
    }
    case Ev::kHave: {  // e.a tells those fetching from it that it has e.chunk (one event)
      const seedd::SwarmScheduler& from = hosts_[e.a].core->scheduler();
      const uint64_t count = chunks_ - from.missing();
      for (PeerId w : std::vector<PeerId>(hosts_[e.a].watchers)) {
        Host& host = hosts_[w];
        if (host.failed || host.done >= 0) continue;
        const PeerId id = host.core_of.at(e.a);
        // A watch names the chunks its host wants ("SDWW"): one it has is not
        // answered, only counted.
        if (host.core->OnVerifiedCount(id, count)) PumpAll(w);
        if (host.core->scheduler().Has(e.chunk)) continue;
        host.core->OnHave(id, e.chunk);
        Pump(w, e.a);
      }
      return;
    }
    case Ev::kFail: {
      Host& host = hosts_[e.a];
      host.failed = true;
      host.waiting.clear();
      std::vector<uint32_t> cut = host.ups;
      cut.insert(cut.end(), host.downs.begin(), host.downs.end());
      for (uint32_t id : cut) EndTransfer(id, false);
      for (PeerId w : host.watchers) Push(now_ + f_.detect_ms / 1000, Ev::kGone, w, e.a, 0);
      return;
    }
    case Ev::kGone: {
      Failed(e.a, e.b);
      return;
    }
    case Ev::kSlotWaitEnds: {  // at host e.a, for request e.chunk
      Host& up = hosts_[e.a];
      auto it = up.waiting.find(e.chunk);
      if (up.failed || it == up.waiting.end()) return;  // granted, or gone
      const Queued q = it->second;
      up.waiting.erase(it);
      std::vector<seedd::UploadSlots::Id> granted;
      if (up.slots->GiveUp(e.chunk, Now(), &granted)) {
        Send(e.a, e.chunk, q);
      } else {
        Push(now_ + From(e.a), Ev::kBusy, q.from, e.a, q.chunk);
      }
      Granted(e.a, granted);
      return;
    }
  }
}

}  // namespace swarm_sim
