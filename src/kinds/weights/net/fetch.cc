#include "kinds/weights/net/fetch.h"

#include <sys/socket.h>

#include <algorithm>
#include <limits>
#include <random>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "kinds/weights/net/registry.h"
#include "seedd/logging.h"
#include "transport/client.h"

namespace seedd {
namespace {

// An idle connection looks for work again when a change wakes it, when a
// deferral of its source ends (FetcherCore::NextChance), and at least this
// often: a bound for a change no wake-up covers. At 200 ms, these looks were two
// in three wake-ups of idle connections of a 32-target fleet, all finding nothing.
constexpr auto kIdleWait = std::chrono::milliseconds(1000);
constexpr auto kCancelPoll = std::chrono::milliseconds(50);  // how soon a stop request is seen
constexpr auto kRegistryInterval = std::chrono::seconds(1);  // while neighbours are wanted

std::vector<uint64_t> ChunkLengths(const Manifest& m) {
  std::vector<uint64_t> lengths;
  lengths.reserve(m.chunks.size());
  for (const ManifestChunk& c : m.chunks) lengths.push_back(c.length);
  return lengths;
}

}  // namespace

Fetch::Fetch(const Manifest& m, Staging& staging, const FetchOptions& o, FetchStats* s)
    : m_(m),
      staging_(staging),
      options_(o),
      stats_(s),
      session_(RandomHexOrDie(8)),
      core_(ChunkLengths(m), o, !o.relay.empty(), std::random_device{}()),
      recorder_(new std::atomic<uint8_t>[m.chunks.size()]) {
  for (size_t i = 0; i < m.chunks.size(); ++i) recorder_[i].store(kNobody);
  core_.SetSelf(o.relay);
  core_.SetZone(o.zone);
  std::map<std::string_view, uint32_t> file_index;
  for (size_t f = 0; f < m.files.size(); ++f) file_index.emplace(m.files[f].path, f);
  chunk_file_.reserve(m.chunks.size());
  MutexLock lock(mu_);
  file_left_.assign(m.files.size(), 0);
  chunk_counted_.assign(m.chunks.size(), false);
  for (const ManifestChunk& c : m.chunks) {
    auto it = file_index.find(c.file);
    chunk_file_.push_back(it == file_index.end() ? 0 : it->second);
    if (it != file_index.end()) ++file_left_[it->second];
  }
}

void Fetch::CountVerifiedLocked(uint32_t index) {
  if (index >= chunk_counted_.size() || chunk_counted_[index]) return;
  chunk_counted_[index] = true;
  const uint32_t f = chunk_file_[index];
  if (file_left_[f] > 0 && --file_left_[f] == 0 && options_.file_ready) {
    options_.file_ready(m_.files[f].path);
  }
}

void Fetch::Prepare(const std::vector<uint32_t>& resumed, const std::vector<uint32_t>& reused) {
  MutexLock lock(mu_);  // before any thread starts: for the analysis
  for (uint32_t i : resumed) {
    core_.Resumed(i);
    verified_bytes_ += m_.chunks[i].length;
    ++stats_->chunks_resumed;
    stats_->bytes_resumed += m_.chunks[i].length;
    if (options_.verified) options_.verified->Set(i);
  }
  for (uint32_t i : reused) {
    core_.Resumed(i);
    verified_bytes_ += m_.chunks[i].length;
    ++stats_->chunks_reused;
    stats_->bytes_reused += m_.chunks[i].length;
    if (options_.verified) options_.verified->Set(i);
  }
  if (!options_.file_ready) return;
  std::vector<bool> whole(m_.files.size(), true);
  for (uint32_t f : chunk_file_) whole[f] = false;
  for (size_t f = 0; f < whole.size(); ++f) {
    if (whole[f]) options_.file_ready(m_.files[f].path);  // empty: no chunk
  }
  for (uint32_t i : resumed) CountVerifiedLocked(i);
  for (uint32_t i : reused) CountVerifiedLocked(i);
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
  core_.SourcesKnown();
  FillNeighboursLocked();
  // This thread watches for a stop request and for a swarm that cannot help.
  while (!FinishedLocked()) {
    if (CancelIfAskedLocked()) break;
    CheckHopeLocked();
    ended_.wait_for(lock, kCancelPoll);
    if (options_.announced && core_.WantsRelays()) {
      lock.Unlock();
      std::vector<HostPort> relays;
      for (const std::string& text : options_.announced()) {
        Result<HostPort> relay = ParseHostPort(text);
        if (relay.ok()) relays.push_back(std::move(*relay));
      }
      AddRelays(relays);
      lock.Lock();
    }
    if (options_.registry != nullptr && core_.WantsRelays() &&
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
  lock.Lock();
  stats_->requests_across_owned = core_.scheduler().crossed_owned();
  stats_->requests_across_other = core_.scheduler().crossed_other();
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
  return core_.Complete();
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
  return !core_.Active(source->id);
}

int Fetch::Depth(const Source& s) {
  MutexLock lock(mu_);
  return DepthLocked(s);
}

int Fetch::DepthLocked(const Source& s) const {
  auto it = depth_.find(s.id);
  return it == depth_.end() ? 1 : std::max(1, it->second);
}

void Fetch::FillNeighboursLocked() {
  // Sources the core named itself (a claim's holder, to follow).
  while (sources_.size() < core_.sources()) {
    const PeerId id = static_cast<PeerId>(sources_.size());
    auto source = std::make_unique<Source>();
    source->name = core_.Name(id);
    Result<HostPort> addr = ParseHostPort(source->name);
    if (addr.ok()) source->addr = std::move(*addr);
    source->seed = core_.IsSeed(id);
    source->id = id;
    if (!source->seed) stats_->peers.push_back(source->name);
    sources_.push_back(std::move(source));
  }
  const std::vector<NewNeighbour> added = core_.FillNeighbours();
  for (const NewNeighbour& n : added) {
    Source* s = sources_[n.id].get();
    depth_[n.id] = n.depth;
    workers_.emplace_back([this, s] { Watch(s); });
    for (int c = 0; c < n.connections; ++c) workers_.emplace_back([this, s] { Work(s); });
  }
  // A neighbour added may have retired another (a claim holder followed, a
  // rotation): the retired one's threads see it and end.
  if (added.empty()) return;
  for (const auto& s : sources_) {
    if (!core_.Active(s->id)) s->work.notify_all();
  }
  ended_.notify_all();
}

bool Fetch::CancelIfAskedLocked() {
  if (options_.cancel == nullptr || !options_.cancel->load(std::memory_order_relaxed)) return false;
  cancelled_ = true;
  core_.Stop();
  EndLocked();
  return true;
}

void Fetch::WakeWorkersLocked() {
  // Each source's threads in turn first: the first to take the lock gets a
  // request that may go out to a relay, and woken always in one order, the
  // sources listed first (the first relays the seed named) got those requests
  // and their uplinks saturated while later relays idled (bench/fanout.sh, 16
  // targets: 1.34-1.37x one target in one order, 1.18-1.22x in turn).
  if (sources_.empty()) return;
  const size_t first = wake_turn_++ % sources_.size();
  for (size_t k = 0; k < sources_.size(); ++k) {
    sources_[(first + k) % sources_.size()]->work.notify_all();
  }
}

void Fetch::WakeLocked(const Source& s, std::chrono::steady_clock::time_point now) {
  // As many connections as the requests it may take need (a connection takes
  // up to its depth): every connection of a seed woken for each freed request
  // found one request for the first and nothing for the others.
  if (!core_.MayAsk(s.id, now)) return;
  const int depth = DepthLocked(s);
  for (int k = (core_.Room(s.id) + depth - 1) / depth; k > 0; --k) s.work.notify_one();
}

void Fetch::WakeAskersLocked() {
  // Only the connections that can use a freed or returned request, each
  // source's in turn: waking every idle connection of the fetch for each chunk
  // that arrived made the threads of a relaying daemon fight for the lock
  // (bench/fanout.sh, 32 targets: three in four futex calls of the daemons
  // were these wake-ups and their lock).
  if (sources_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  // One relay beyond the requests free: a connection woken may be busy.
  int relays = core_.FreeRelayRequests();
  relays = relays == std::numeric_limits<int>::max() ? relays : relays + 1;
  const size_t first = wake_turn_++ % sources_.size();
  for (size_t k = 0; k < sources_.size(); ++k) {
    const Source& s = *sources_[(first + k) % sources_.size()];
    if (!core_.Active(s.id) || !core_.MayAsk(s.id, now)) continue;
    if (!s.seed) {
      if (relays <= 0) continue;
      --relays;
    }
    WakeLocked(s, now);
  }
}

void Fetch::CheckHopeLocked() {
  if (core_.CheckHope(std::chrono::steady_clock::now())) EndLocked();
}

void Fetch::EndLocked() {
  ended_flag_ = true;
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  WakeWorkersLocked();
  ended_.notify_all();
}

Status Fetch::LocalFailure(Status st) {
  MutexLock lock(mu_);
  if (local_error_.ok()) local_error_ = std::move(st);
  core_.Stop();
  EndLocked();
  return Status::Ok();
}

bool Fetch::Fail(Source* source, std::optional<uint32_t> chunk) {
  MutexLock lock(mu_);
  WakeWorkersLocked();
  ended_.notify_all();
  return FailLocked(source, chunk);
}

bool Fetch::FailLocked(Source* source, std::optional<uint32_t> chunk) {
  if (core_.Dropped(source->id)) return true;
  if (!core_.OnFailed(source->id, chunk)) return false;
  Logger().warn("weight_data: dropping {} {}", source->seed ? "source" : "relay", source->name);
  stats_->sources_dropped.push_back(source->name);
  FillNeighboursLocked();
  CheckHopeLocked();
  WakeWorkersLocked();
  ended_.notify_all();
  return true;
}

std::optional<Taken> Fetch::TakeAhead(Source* source) {
  MutexLock lock(mu_);
  if (FinishedLocked() || !core_.Active(source->id)) return std::nullopt;
  std::optional<Taken> t = core_.Next(source->id, std::chrono::steady_clock::now(), true);
  if (t) {
    ++stats_->requests;
    ++stats_->requests_ahead;
  }
  return t;
}

void Fetch::TakeSome(Source* source, bool wait, const std::function<bool()>& room,
                     std::deque<Taken>* inflight) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + kIdleWait;
  for (;;) {
    if (FinishedLocked() || !core_.Active(source->id)) return;
    const auto now = std::chrono::steady_clock::now();
    bool took = false;
    while (room()) {
      std::optional<Taken> t = core_.Next(source->id, now);
      if (!t) break;
      ++stats_->requests;
      inflight->push_back(*t);
      took = true;
    }
    if (took || !wait ||
        source->work.wait_until(
            lock,
            std::min(deadline, core_.NextChance(source->id, std::chrono::steady_clock::now()))) ==
            std::cv_status::timeout)
      return;
  }
}

void Fetch::NotThere(uint32_t index, Source* source, uint32_t status, const std::string& holder) {
  MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (status == kChunkClaimed && source->seed) ++stats_->answered_claimed;
  const bool dropped_before = core_.Dropped(source->id);
  const NotThereVerdict v = status == kChunkNotHere
                                ? core_.OnNotThere(source->id, index, now)
                                : core_.OnClaimed(source->id, index, now, holder);
  // A holder followed: its connections start (and those of the neighbour it
  // replaces end).
  FillNeighboursLocked();
  WakeAskersLocked();  // the chunk is asked elsewhere
  switch (v) {
    case NotThereVerdict::kDeferred:
      return;
    case NotThereVerdict::kForcedOld:
    case NotThereVerdict::kForcedNoRelay:
      Logger().debug("weight_data: asking the seed plainly for chunk {} ({})", index,
                     v == NotThereVerdict::kForcedNoRelay ? "no relay left" : "claimed for long");
      return;
    case NotThereVerdict::kRelayLied:
      Logger().warn("weight_data: relay {} offered chunk {} but answered \"{}\"", source->name,
                    index, status == kChunkNotHere ? "not here" : "claimed");
      break;
    case NotThereVerdict::kSeedBroken:
      Logger().warn("weight_data: source {} offered chunk {} but does not serve it", source->name,
                    index);
      break;
  }
  if (!dropped_before && core_.Dropped(source->id)) {
    Logger().warn("weight_data: dropping {} {}", source->seed ? "source" : "relay", source->name);
    stats_->sources_dropped.push_back(source->name);
    FillNeighboursLocked();
    CheckHopeLocked();
    WakeWorkersLocked();  // its threads end
    ended_.notify_all();
  }
}

void Fetch::Busy(uint32_t index, const Source* source, std::chrono::milliseconds retry) {
  MutexLock lock(mu_);
  ++stats_->answered_busy;
  core_.OnBusy(source->id, index, std::chrono::steady_clock::now() + retry);
  WakeAskersLocked();
}

void Fetch::Returned(uint32_t index, const Source* source) {
  MutexLock lock(mu_);
  core_.OnReturned(source->id, index);
  WakeAskersLocked();
}

void Fetch::Returned(std::deque<Taken>* inflight, const Source* source) {
  MutexLock lock(mu_);
  for (const Taken& t : *inflight) core_.OnReturned(source->id, t.index);
  inflight->clear();
  WakeAskersLocked();
}

FetcherCore::WriteTurn Fetch::BeginWrite(uint32_t index) {
  MutexLock lock(mu_);
  return core_.BeginWrite(index);
}

bool Fetch::TakeRecord(uint32_t index, bool held) {
  MutexLock lock(RecordMu(index));
  if (recorder_[index].load(std::memory_order_relaxed) != kNobody) return false;
  recorder_[index].store(held ? kHeld : kWritten, std::memory_order_relaxed);
  return true;
}

std::unique_ptr<char[]> Fetch::Hold(uint64_t length) {
  if (length > options_.held_copy_bytes) return nullptr;
  if (held_bytes_.fetch_add(length) + length > options_.held_copy_bytes) {
    held_bytes_.fetch_sub(length);
    return nullptr;
  }
  return std::unique_ptr<char[]>(new char[length]);
}

void Fetch::ReleaseHeld(uint64_t length) { held_bytes_.fetch_sub(length); }

void Fetch::EndWrite(uint32_t index) {
  MutexLock lock(mu_);
  core_.EndWrite(index);
}

Status Fetch::Record(uint32_t index, bool hole, const Source* source, uint64_t received) {
  const ManifestChunk& c = m_.chunks[index];
  Status journaled = staging_.Commit(index);
  MutexLock lock(mu_);
  // The arrival frees a request of `source`; of any source only when the
  // requests to relays were at their bound.
  const bool bound = !source->seed && core_.FreeRelayRequests() <= 0;
  CountLocked(received, source);
  if (!journaled.ok()) {
    core_.OnReturned(source->id, index);
    WakeAskersLocked();
    return journaled;
  }
  const uint64_t rotations = core_.rotations();
  // Endgame copies still on the wire are drained.
  const auto now = std::chrono::steady_clock::now();
  core_.OnArrived(source->id, index, now);
  // The request it frees (this connection, which is not waiting, may take it
  // first; another of the source's connections when this one's requests ahead
  // fill its depth).
  WakeLocked(*source, now);
  if (bound) WakeAskersLocked();
  if (core_.rotations() != rotations) {
    Logger().debug("weight_data: relay {} sent nothing in the last {} chunks; trying another",
                   core_.Name(core_.last_rotated()), options_.rotate_after);
    FillNeighboursLocked();
  }
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
  CountVerifiedLocked(index);
  if (core_.Complete()) EndLocked();
  if (options_.progress) options_.progress(verified_bytes_);
  CancelIfAskedLocked();  // seen at once, not at the fetch thread's next look
  return Status::Ok();
}

void Fetch::RejectCopy(uint32_t index, Source* source) {
  const ManifestChunk& c = m_.chunks[index];
  Count(c.length, source);
  Logger().warn("weight_data: chunk {} ({} at {}) from {} failed verification; fetching it again",
                index, c.file, c.offset, source->name);
  Reject(index, source);
}

void Fetch::ReadPast(uint32_t index, const Source* source) {
  MutexLock lock(mu_);
  CountLocked(m_.chunks[index].length, source);
  core_.OnReturned(source->id, index);
  WakeAskersLocked();
}

void Fetch::Reject(uint32_t index, Source* source) {
  metrics::ChunkVerificationFailed();
  MutexLock lock(mu_);
  ++stats_->chunks_rejected;
  FailLocked(source, index);
  WakeWorkersLocked();
  ended_.notify_all();
}

void Fetch::Count(uint64_t n, const Source* source) {
  MutexLock lock(mu_);
  CountLocked(n, source);
}

void Fetch::CountLocked(uint64_t n, const Source* source) {
  stats_->bytes_received += n;
  if (!source->seed) stats_->bytes_from_peers += n;
  if (core_.Remote(source->id)) {
    stats_->bytes_across_zones += n;
    metrics::BytesAcrossZones(n);
  }
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
