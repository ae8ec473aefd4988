#include "kinds/weights/fetch.h"

#include <sys/socket.h>

#include <algorithm>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "kinds/weights/registry.h"
#include "seedd/logging.h"
#include "transport/client.h"

namespace seedd {
namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(200);  // changes notify; deferrals expire
constexpr auto kClaimRetry = std::chrono::milliseconds(300);
constexpr auto kCancelPoll = std::chrono::milliseconds(50);  // how soon a stop request is seen
constexpr auto kRegistryInterval = std::chrono::seconds(1);  // while neighbours are wanted
// A chunk claimed for longer than the seed takes to send it at
// FetchOptions::claim_floor_rate (at least kForceAfter, at most kForceAfterAtMost)
// is asked of the seed plainly.
constexpr auto kForceAfter = std::chrono::seconds(5);
constexpr auto kForceAfterAtMost = std::chrono::seconds(120);

SchedulerOptions SchedulerOptionsOf(const FetchOptions& o) {
  SchedulerOptions s;
  s.max_neighbours = std::max<size_t>(1, o.max_neighbours);
  s.pipeline = std::max(1, o.pipeline);
  s.max_requests = std::max(0, o.swarm_requests);
  s.catch_up_requests = std::max(0, o.swarm_catch_up);
  // A relay among relays keeps one chunk in flight per seed: what a seed sends
  // reaches the swarm sooner when its uplink is not split many ways.
  if (!o.relay.empty()) s.seed_requests = 1;
  return s;
}

}  // namespace

Fetch::Fetch(const Manifest& m, Staging& staging, const FetchOptions& o, FetchStats* s)
    : m_(m),
      staging_(staging),
      options_(o),
      stats_(s),
      session_(RandomHexOrDie(8)),
      sched_(m.chunks.size(), SchedulerOptionsOf(o)),
      relay_asks_(kFirstRelayAsk, o.state_interval) {}

void Fetch::Prepare(const std::vector<uint32_t>& resumed) {
  MutexLock lock(mu_);  // before any thread starts: for the analysis
  const size_t n = m_.chunks.size();
  claimed_since_.assign(n, {});
  force_.assign(n, false);
  writing_.assign(n, false);
  for (uint32_t i : resumed) {
    sched_.AlreadyHave(i);
    verified_bytes_ += m_.chunks[i].length;
    ++stats_->chunks_resumed;
    stats_->bytes_resumed += m_.chunks[i].length;
    if (options_.verified) options_.verified->Set(i);
  }
}

void Fetch::Run(const std::vector<HostPort>& seeds) {
  // The registry first: a seed that is down is dropped within a few hundred ms,
  // and the fetch gives up when nothing else is known by then.
  std::vector<HostPort> registered = AskRegistry();
  AddSeeds(seeds, true);
  AddRelays(registered);
  auto next_resolve = std::chrono::steady_clock::now() + options_.resolve_interval;
  auto next_registry = std::chrono::steady_clock::now() + kRegistryInterval;
  MutexLock lock(mu_);
  for (const std::string& text : m_.sources) {
    Result<HostPort> peer = ParseHostPort(text);
    if (peer.ok()) AddSourceLocked(*peer, false);
  }
  sources_known_ = true;
  FillNeighboursLocked();
  // This thread watches for a stop request and for a swarm that cannot help.
  while (!FinishedLocked()) {
    if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
      cancelled_ = true;
      failed_ = true;
      EndLocked();
      break;
    }
    CheckHopeLocked();
    changed_.wait_for(lock, kCancelPoll);
    if (options_.announced && sched_.NeighboursWanted() > 0) {
      lock.Unlock();
      std::vector<HostPort> relays;
      for (const std::string& text : options_.announced()) {
        Result<HostPort> relay = ParseHostPort(text);
        if (relay.ok()) relays.push_back(std::move(*relay));
      }
      AddRelays(relays);
      lock.Lock();
    }
    if (options_.registry != nullptr && sched_.NeighboursWanted() > 0 &&
        std::chrono::steady_clock::now() >= next_registry) {
      lock.Unlock();
      AddRelays(AskRegistry());
      lock.Lock();
      next_registry = std::chrono::steady_clock::now() + kRegistryInterval;
    }
    if (std::chrono::steady_clock::now() >= next_resolve) {
      lock.Unlock();
      AddSeeds(seeds, false);
      lock.Lock();
      next_resolve = std::chrono::steady_clock::now() + options_.resolve_interval;
    }
  }
  EndLocked();
  // No thread is started once the fetch is finished.
  std::vector<std::thread> workers = std::move(workers_);
  lock.Unlock();
  for (auto& w : workers) w.join();
}

bool Fetch::Cancelled() {
  MutexLock lock(mu_);
  return cancelled_;
}

uint64_t Fetch::VerifiedBytes() {
  MutexLock lock(mu_);
  return verified_bytes_;
}

bool Fetch::Complete() {
  MutexLock lock(mu_);
  return sched_.Complete();
}

Status Fetch::local_error() {
  MutexLock lock(mu_);
  return local_error_;
}

bool Fetch::Finished() {
  MutexLock lock(mu_);
  return FinishedLocked();
}

bool Fetch::Dropped(const Source* source) {
  MutexLock lock(mu_);
  return source->dropped;
}

int Fetch::Depth(const Source& s) const {
  // A relay fetching from a seed asks one chunk at a time per connection: the
  // seed's claim on it is then taken just before the bytes leave.
  if (s.seed) {
    return options_.relay.empty() ? std::max({1, options_.pipeline, options_.small_chunk_pipeline})
                                  : 1;
  }
  return std::max(1, options_.peer_pipeline);
}

void Fetch::StartLocked(Source* s) {
  const int depth = Depth(*s);
  int connections =
      std::max(1, s->seed ? options_.connections_per_source : options_.connections_per_peer);
  // A seed sends a relaying fetcher one chunk at a time (one upload slot per
  // relay): a second connection keeps the next request waiting there, more
  // only add to the seed's connections, which every fetcher of a fleet holds.
  if (s->seed && !options_.relay.empty()) connections = std::min(connections, 2);
  if (!sched_.AddNeighbour(s->id, s->seed, connections * depth)) return;
  s->neighbour = true;
  workers_.emplace_back([this, s] { Watch(s); });
  for (int c = 0; c < connections; ++c) workers_.emplace_back([this, s] { Work(s); });
  changed_.notify_all();
}

void Fetch::CheckHopeLocked() {
  if (!sources_known_ || FinishedLocked() || !sched_.Stuck()) return;
  for (const auto& s : sources_) {
    if (s->dropped) continue;
    // A neighbour whose state is not known yet, or a candidate, may still help.
    if (!s->neighbour || !s->state_known) return;
  }
  failed_ = true;
  EndLocked();
}

void Fetch::EndLocked() {
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  changed_.notify_all();
}

Status Fetch::LocalFailure(Status st) {
  MutexLock lock(mu_);
  if (local_error_.ok()) local_error_ = std::move(st);
  failed_ = true;
  EndLocked();
  return Status::Ok();
}

bool Fetch::Fail(Source* source, std::optional<uint32_t> chunk) {
  MutexLock lock(mu_);
  changed_.notify_all();
  return FailLocked(source, chunk);
}

bool Fetch::FailLocked(Source* source, std::optional<uint32_t> chunk) {
  if (source->dropped) return true;
  const bool dropped = chunk ? sched_.Failed(source->id, *chunk) : sched_.Failed(source->id);
  if (!dropped) return false;
  source->dropped = true;
  Logger().warn("weight_data: dropping {} {}", source->seed ? "source" : "relay", source->name);
  stats_->sources_dropped.push_back(source->name);
  FillNeighboursLocked();
  CheckHopeLocked();
  changed_.notify_all();
  return true;
}

std::optional<Taken> Fetch::Take(Source* source, bool wait, bool ahead) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + kIdleWait;
  for (;;) {
    if (FinishedLocked() || source->dropped) return std::nullopt;
    if (std::optional<uint32_t> c =
            sched_.Next(source->id, std::chrono::steady_clock::now(), ahead)) {
      ++stats_->requests;
      stats_->requests_ahead += ahead;
      return Taken{*c, source->seed && !force_[*c]};
    }
    if (!wait || changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return std::nullopt;
    }
  }
}

void Fetch::NotThere(uint32_t index, Source* source, uint32_t status) {
  MutexLock lock(mu_);
  changed_.notify_all();
  const auto now = std::chrono::steady_clock::now();
  if (!source->seed) {
    // A relay is asked only for chunks it offered, and its verified chunks only
    // ever grow: "not here" is a lie (or a restart), and a relay has no claims to
    // report. Either way it fails, and is dropped.
    Logger().warn("weight_data: relay {} offered chunk {} but answered \"{}\"", source->name, index,
                  status == kChunkNotHere ? "not here" : "claimed");
    FailLocked(source, index);
    return;
  }
  if (status == kChunkNotHere) {
    // A seed that is itself still fetching says what it has; one that offered the
    // chunk there and does not serve it is broken (a file changed under it, say).
    const bool offered = source->state_known && sched_.Offers(source->id, index);
    sched_.Lacks(source->id, index);
    if (offered) {
      Logger().warn("weight_data: source {} offered chunk {} but does not serve it", source->name,
                    index);
      FailLocked(source, std::nullopt);
    }
    return;
  }
  ++stats_->answered_claimed;
  if (claimed_since_[index] == std::chrono::steady_clock::time_point{}) claimed_since_[index] = now;
  // Claimed for longer than the seed could have sent the chunk at the floor rate
  // (a seed whose link many fetchers share is that slow, a holder that stalls
  // slower), yet no neighbour offers it: ask the seed for it anyway. A holder
  // the seed stopped hearing from loses its claim there; one that was sent the
  // chunk and is alive passes it on through the swarm, which takes a few hops
  // when the neighbour sets are bounded, so the time since the send decides
  // nothing here.
  const auto claim_limit = std::clamp<std::chrono::steady_clock::duration>(
      std::chrono::milliseconds(m_.chunks[index].length * 1000 /
                                std::max<uint64_t>(1, options_.claim_floor_rate)),
      kForceAfter, kForceAfterAtMost);
  // So is one whose holder cannot be reached: relays were named, and none is a
  // neighbour now. (Before any relay is known, a claim may be a relay that has
  // only just started: it is waited for.)
  const bool no_relay_left = !stats_->peers.empty() && sched_.relay_neighbours() == 0;
  const bool claimed_long = now - claimed_since_[index] >= claim_limit;
  if ((no_relay_left || claimed_long) && sched_.Holders(index) == 0) {
    force_[index] = true;
    Logger().debug("weight_data: asking the seed plainly for chunk {} ({})", index,
                   no_relay_left ? "no relay left" : "claimed for long");
    sched_.Deferred(source->id, index, now);
  } else {
    sched_.Deferred(source->id, index, now + kClaimRetry);
  }
}

void Fetch::Busy(uint32_t index, const Source* source, std::chrono::milliseconds retry) {
  MutexLock lock(mu_);
  ++stats_->answered_busy;
  sched_.Busy(source->id, index, std::chrono::steady_clock::now() + retry);
  changed_.notify_all();
}

void Fetch::Returned(uint32_t index, const Source* source) {
  MutexLock lock(mu_);
  sched_.Returned(source->id, index);
  changed_.notify_all();
}

void Fetch::Returned(std::deque<Taken>* inflight, const Source* source) {
  MutexLock lock(mu_);
  for (const Taken& t : *inflight) sched_.Returned(source->id, t.index);
  inflight->clear();
  changed_.notify_all();
}

bool Fetch::BeginWrite(uint32_t index) {
  MutexLock lock(mu_);
  if (writing_[index] || sched_.Has(index)) return false;
  writing_[index] = true;
  return true;
}

void Fetch::EndWrite(uint32_t index) {
  MutexLock lock(mu_);
  writing_[index] = false;
}

Status Fetch::Record(uint32_t index, bool hole, const Source* source) {
  const ManifestChunk& c = m_.chunks[index];
  Status journaled = staging_.Commit(index);
  MutexLock lock(mu_);
  changed_.notify_all();
  if (!journaled.ok()) {
    sched_.Returned(source->id, index);
    return journaled;
  }
  sched_.Arrived(source->id, index);  // endgame copies still on the wire are drained
  metrics::ChunkVerified();
  stats_->chunks_holes += hole;
  verified_bytes_ += c.length;
  auto use = std::find_if(stats_->used.begin(), stats_->used.end(),
                          [&](const SourceUse& u) { return u.name == source->name; });
  if (use == stats_->used.end()) {
    use = stats_->used.insert(stats_->used.end(), SourceUse{source->name, source->seed, 0});
  }
  if (!hole) use->bytes += c.length;
  if (options_.verified) options_.verified->Set(index);
  if (sched_.Complete()) EndLocked();
  if (options_.progress) options_.progress(verified_bytes_);
  return Status::Ok();
}

void Fetch::Reject(uint32_t index, Source* source) {
  metrics::ChunkVerificationFailed();
  MutexLock lock(mu_);
  ++stats_->chunks_rejected;
  FailLocked(source, index);
  changed_.notify_all();
}

void Fetch::Count(uint64_t n, const Source* source) {
  MutexLock lock(mu_);
  stats_->bytes_received += n;
  if (!source->seed) stats_->bytes_from_peers += n;
}

bool Fetch::Track(int fd) {
  MutexLock lock(mu_);
  if (FinishedLocked()) return false;
  open_fds_.insert(fd);
  return true;
}

void Fetch::Untrack(int fd) {
  MutexLock lock(mu_);
  open_fds_.erase(fd);
}

}  // namespace seedd
