#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/crypto.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "kinds/weights/data_plane.h"
#include "kinds/weights/destination.h"
#include "kinds/weights/records.h"
#include "kinds/weights/staging.h"
#include "transport/client.h"
#include "wire/frame.h"
#include "wire/json_text.h"

namespace seedd {
namespace {

constexpr int kMaxSourceFailures = 3;
constexpr size_t kMaxSources = 256;              // seeds and relays of one fetch
constexpr size_t kMaxPeerListBytes = 64 * 1024;  // in a state response
constexpr size_t kPieceBytes = 256 * 1024;       // received, hashed and written while in cache
constexpr auto kIdleWait = std::chrono::milliseconds(200);  // changes notify; deferrals expire
constexpr auto kReconnectIdle = std::chrono::seconds(20);   // sources close idle data connections
constexpr auto kClaimRetry = std::chrono::milliseconds(300);
constexpr auto kCancelPoll = std::chrono::milliseconds(50);  // how soon a stop request is seen
// A chunk a relay was sent this long ago that no relay offers is asked of the seed;
// so is one claimed for longer than the seed takes to send it at
// FetchOptions::claim_floor_rate (at least kForceAfter, at most kForceAfterAtMost).
constexpr auto kForceAfter = std::chrono::seconds(5);
constexpr auto kForceAfterAtMost = std::chrono::seconds(120);

// A seed or a relay, and what it has as far as this fetch knows.
struct Source {
  HostPort addr;
  std::string name;
  bool seed = false;  // given by the caller: asked only for chunks no relay has
  std::vector<bool> have;
  bool state_known = false;  // `have` is from its state, not assumed
  int inflight = 0;          // chunks asked of it and not answered yet, over its connections
  int failures = 0;
  bool dropped = false;
};

struct Taken {
  uint32_t index;
  bool claim;  // ask with "SDRN" (a seed, unless forced)
};

enum class Chunk : uint8_t { kQueued, kInFlight, kDone };

// Shared state of one fetch: the chunks and the sources; the bytes go to `staging`.
class Fetch {
 public:
  Fetch(const Manifest& m, Staging& staging, const FetchOptions& o, FetchStats* s)
      : m_(m), staging_(staging), options_(o), stats_(s) {}

  // Sets up the chunk states; `resumed` chunks were verified by an earlier run.
  void Prepare(const std::vector<uint32_t>& resumed) {
    const size_t n = m_.chunks.size();
    state_.assign(n, Chunk::kQueued);
    peer_count_.assign(n, 0);
    defer_until_.assign(n, {});
    claimed_since_.assign(n, {});
    force_.assign(n, false);
    for (uint32_t i : resumed) {
      state_[i] = Chunk::kDone;
      ++done_;
      verified_bytes_ += m_.chunks[i].length;
      ++stats_->chunks_resumed;
      stats_->bytes_resumed += m_.chunks[i].length;
      if (options_.verified) options_.verified->Set(i);
    }
    // Interleave the files: concurrent connections then write to different files
    // instead of contending for one file's lock in the kernel. Each fetcher starts
    // at a random place, so that fetchers of one swarm ask for different chunks.
    std::map<std::string, std::deque<uint32_t>> by_file;
    for (uint32_t i = 0; i < n; ++i) {
      if (state_[i] != Chunk::kDone) by_file[m_.chunks[i].file].push_back(i);
    }
    for (bool any = true; any;) {
      any = false;
      for (auto& [file, chunks] : by_file) {
        if (chunks.empty()) continue;
        order_.push_back(chunks.front());
        chunks.pop_front();
        any = true;
      }
    }
    if (!order_.empty()) {
      std::mt19937_64 rng(std::random_device{}());
      std::rotate(order_.begin(), order_.begin() + static_cast<long>(rng() % order_.size()),
                  order_.end());
    }
  }

  // Fetches from `seeds` and every relay learnt on the way until every chunk is
  // verified or no source is left that has the missing ones.
  void Run(const std::vector<HostPort>& seeds) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const HostPort& s : seeds) AddSourceLocked(s, true);
      for (const std::string& text : m_.sources) {
        Result<HostPort> peer = ParseHostPort(text);
        if (peer.ok()) AddSourceLocked(*peer, false);
      }
    }
    std::thread poller([this] { Poll(); });
    // This thread watches for a stop request meanwhile.
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!FinishedLocked()) {
        if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
          cancelled_ = true;
          failed_ = true;
          EndLocked();
          break;
        }
        changed_.wait_for(lock, kCancelPoll);
      }
    }
    poller.join();
    // The poller no longer adds workers.
    for (auto& w : workers_) w.join();
  }

  bool Cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  uint64_t VerifiedBytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return verified_bytes_;
  }

  bool Complete() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ == m_.chunks.size();
  }

 private:
  bool FinishedLocked() const { return done_ == m_.chunks.size() || failed_; }
  bool Finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return FinishedLocked();
  }

  // Adds a source (once) and its connections. REQUIRES: mu_ held.
  void AddSourceLocked(const HostPort& addr, bool seed) {
    const std::string name = addr.ToString();
    if (name == options_.relay || sources_.size() >= kMaxSources) return;
    for (const auto& s : sources_) {
      if (s->name == name) return;
    }
    auto source = std::make_unique<Source>();
    source->addr = addr;
    source->name = name;
    source->seed = seed;
    source->have.assign(m_.chunks.size(), seed);  // a seed has everything until it says otherwise
    Source* s = source.get();
    sources_.push_back(std::move(source));
    if (!seed) stats_->peers.push_back(name);
    const int connections = seed ? options_.connections_per_source : options_.connections_per_peer;
    for (int c = 0; c < std::max(1, connections); ++c) {
      workers_.emplace_back([this, s] { Work(s); });
    }
    if (!seed) ++live_peers_;  // it has nothing yet: no chunk count changes
  }

  // Asks every source for its state at options_.state_interval: which chunks it
  // has and which relays it knows. New relays get connections.
  void Poll() {
    std::map<std::string, UniqueFd> conns;
    std::unique_lock<std::mutex> lock(mu_);
    while (!FinishedLocked()) {
      std::vector<Source*> live;
      for (const auto& s : sources_) {
        if (!s->dropped) live.push_back(s.get());
      }
      lock.unlock();
      for (Source* s : live) {
        Status st = PollOne(s, &conns[s->name]);
        if (!st.ok()) {
          Close(&conns[s->name]);
          conns.erase(s->name);
          if (Finished()) break;
          Logger().warn("weight_data: {}: state: {}", s->name, st.message());
          Fail(s);
        }
      }
      lock.lock();
      CheckHopeLocked();
      changed_.wait_for(lock, options_.state_interval, [this] { return FinishedLocked(); });
    }
    lock.unlock();
    for (auto& [name, conn] : conns) Close(&conn);
  }

  // A seed (the caller's own source) is held to seed_deadline, a relay to chunk_deadline.
  const TransferDeadline& DeadlineOf(const Source& s) const {
    return s.seed ? options_.seed_deadline : options_.chunk_deadline;
  }

  Status PollOne(Source* s, UniqueFd* conn) {
    if (!conn->valid()) {
      Result<UniqueFd> fd = Open(*s);
      if (!fd.ok()) return fd.status();
      *conn = std::move(*fd);
    }
    const size_t bitmap = (m_.chunks.size() + 7) / 8;
    // The whole answer within the deadline of its largest size.
    const auto deadline = DeadlineOf(*s).For(bitmap + kMaxPeerListBytes);
    const RequestRecord req = EncodeRequest(kStateMagic, 0);
    if (!SendAllBy(conn->get(), req.data(), req.size(), deadline)) {
      return Status::Unavailable("cannot send a state request");
    }
    HeaderRecord record;
    SEEDD_RETURN_IF_ERROR(RecvAllBy(conn->get(), record.data(), record.size(), deadline));
    const Header h = DecodeHeader(record);
    if (h.magic != kStateMagic || h.status != kChunkOk || h.length < bitmap ||
        h.length > bitmap + kMaxPeerListBytes) {
      return Status::DataLoss("malformed state response");
    }
    std::string body(h.length, '\0');
    SEEDD_RETURN_IF_ERROR(RecvAllBy(conn->get(), body.data(), body.size(), deadline));
    std::lock_guard<std::mutex> lock(mu_);
    // Only what changed moves the relay counts: a state costs O(chunks), not
    // O(relays x chunks).
    const bool counted = !s->seed && !s->dropped;
    for (size_t i = 0; i < m_.chunks.size(); ++i) {
      const bool has = (static_cast<unsigned char>(body[i / 8]) & (0x80 >> (i % 8))) != 0;
      if (has == s->have[i]) continue;
      s->have[i] = has;
      if (counted) peer_count_[i] = static_cast<uint16_t>(peer_count_[i] + (has ? 1 : -1));
    }
    s->state_known = true;
    size_t pos = bitmap;
    while (pos < body.size()) {
      size_t end = body.find('\n', pos);
      if (end == std::string::npos) end = body.size();
      Result<HostPort> peer = ParseHostPort(std::string_view(body).substr(pos, end - pos));
      if (peer.ok()) AddSourceLocked(*peer, false);
      pos = end + 1;
    }
    changed_.notify_all();
    return Status::Ok();
  }

  // How many live relays have each chunk, counted again (when one is dropped).
  // REQUIRES: mu_ held.
  void Recount() {
    std::fill(peer_count_.begin(), peer_count_.end(), 0);
    live_peers_ = 0;
    for (const auto& s : sources_) {
      if (s->seed || s->dropped) continue;
      ++live_peers_;
      for (size_t i = 0; i < peer_count_.size(); ++i) peer_count_[i] += s->have[i];
    }
  }

  // Gives up when no live source has a missing chunk and none is in flight.
  // REQUIRES: mu_ held.
  void CheckHopeLocked() {
    if (FinishedLocked()) return;
    for (uint32_t i = 0; i < state_.size(); ++i) {
      if (state_[i] == Chunk::kInFlight) return;
      if (state_[i] == Chunk::kDone) continue;
      for (const auto& s : sources_) {
        if (!s->dropped && s->have[i]) return;
      }
    }
    failed_ = true;
    EndLocked();
  }

  // Writing to the destination failed (a full disk, say): no source is to blame,
  // and the fetch ends with the local error. Returns Ok for the caller to stop.
  Status LocalFailure(Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (local_error_.ok()) local_error_ = std::move(st);
    failed_ = true;
    EndLocked();
    return Status::Ok();
  }

 public:
  Status local_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return local_error_;
  }

 private:
  // The fetch is over: connections blocked on a slow source are woken at once.
  // REQUIRES: mu_ held.
  void EndLocked() {
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    changed_.notify_all();
  }

  // Connections are tracked so that EndLocked can wake them; false (and the
  // connection is not to be used) when the fetch is over already.
  bool Track(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (FinishedLocked()) return false;
    open_fds_.insert(fd);
    return true;
  }
  void Untrack(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.erase(fd);
  }

  // One connection's loop against `source`; returns when the fetch is over.
  void Work(Source* source) {
    while (!Finished() && !Dropped(source)) {
      Result<UniqueFd> conn = Open(*source);
      if (!conn.ok()) {
        if (Finished()) return;
        Logger().warn("weight_data: {}: {}", source->name, conn.status().message());
        if (Fail(source)) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::deque<Taken> inflight;
      bool idle = false;
      Status st = Pump(conn->get(), source, &inflight, &idle);
      Close(&*conn);
      Requeue(&inflight, source);
      if (Finished()) return;
      if (st.ok() && idle) continue;  // a fresh connection before the source's idle timeout
      if (st.ok()) return;
      Logger().warn("weight_data: {}: {}", source->name, st.message());
      if (Fail(source)) return;
    }
  }

  // A connection to `source`, handshake done, tracked (see Track): close it with Close.
  Result<UniqueFd> Open(const Source& source) {
    Result<UniqueFd> fd = ConnectTcp(source.addr, std::chrono::seconds(5));
    if (!fd.ok()) return fd.status();
    if (!Track(fd->get())) return Status::Unavailable("the fetch is over");
    Result<UniqueFd> ready = Handshake(std::move(*fd));
    return ready;
  }
  void Close(UniqueFd* fd) {
    if (!fd->valid()) return;
    Untrack(fd->get());
    fd->Reset();
  }

  Result<UniqueFd> Handshake(UniqueFd fd_owned) {
    struct Guard {
      Fetch* f;
      UniqueFd fd;
      ~Guard() {
        if (fd.valid()) f->Untrack(fd.get());
      }
    } guard{this, std::move(fd_owned)};
    UniqueFd* fd = &guard.fd;
    int flags = ::fcntl(fd->get(), F_GETFL);
    ::fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK);
    timeval tv{static_cast<time_t>(options_.timeout.count() / 1000),
               static_cast<suseconds_t>((options_.timeout.count() % 1000) * 1000)};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    Json request = {
        {"kind", kWeightDataKind}, {"root_digest", m_.root_digest}, {"token", options_.token}};
    if (!options_.relay.empty()) {
      request["relay"] = options_.relay;
      request["session"] = session_;
    }
    std::string frame = EncodeJsonFrame(request);
    if (!SendAll(fd->get(), frame.data(), frame.size())) {
      return Status::Unavailable("cannot send the data request");
    }
    Result<std::string> body = ReadFrameBody(fd->get(), 64 * 1024, Clock::now() + options_.timeout);
    if (!body.ok()) return body.status();
    Result<Json> response = ParseJson(*body);
    if (!response.ok() || !response->is_object() || (*response)["status"] != "ok") {
      return Status::PermissionDenied("the source refused the data connection: " +
                                      body->substr(0, 300));
    }
    return std::move(*fd);
  }

  // Keeps requests in flight; verifies and writes each chunk. Returns Ok when the
  // fetch is over, or with *idle when the connection sat unused for a while.
  Status Pump(int fd, Source* source, std::deque<Taken>* inflight, bool* idle) {
    // A relay asks a seed for one chunk at a time per connection: the seed's
    // claim on it is then taken just before the bytes leave.
    const int depth = !options_.relay.empty() ? 1 : options_.pipeline;
    std::string buf;  // one piece of a chunk
    const uint64_t record_bytes = std::tuple_size_v<HeaderRecord>;
    auto last_used = std::chrono::steady_clock::now();
    for (;;) {
      while (static_cast<int>(inflight->size()) < depth) {
        std::optional<Taken> next = Take(source, inflight->empty());
        if (!next) break;
        const RequestRecord req =
            EncodeRequest(next->claim ? kClaimMagic : kSendMagic, next->index);
        inflight->push_back(*next);
        if (!SendAllBy(fd, req.data(), req.size(), DeadlineOf(*source).For(req.size()))) {
          return Status::Unavailable("cannot send a chunk request");
        }
      }
      if (inflight->empty()) {
        if (Finished() || Dropped(source)) return Status::Ok();
        if (std::chrono::steady_clock::now() - last_used > kReconnectIdle) {
          *idle = true;
          return Status::Ok();
        }
        continue;
      }
      last_used = std::chrono::steady_clock::now();
      // From here the front chunk's whole answer is due by its deadline.
      const uint64_t due = record_bytes + m_.chunks[inflight->front().index].length;
      const auto deadline = DeadlineOf(*source).For(due);
      HeaderRecord record;
      SEEDD_RETURN_IF_ERROR(RecvAllBy(fd, record.data(), record.size(), deadline));
      const Header h = DecodeHeader(record);
      const uint32_t index = h.index;
      const uint32_t status = h.status;
      const uint64_t length = h.length;
      if (h.magic != kChunkMagic || index != inflight->front().index) {
        return Status::DataLoss("malformed chunk response");
      }
      const ManifestChunk& c = m_.chunks[index];
      if (status == kChunkNotHere || status == kChunkClaimed) {
        if (length != 0) return Status::DataLoss("malformed chunk response");
        PopFront(inflight, source);
        NotThere(index, source, status, h.aux);
        continue;
      }
      if (status == kChunkHole) {
        if (length != 0) return Status::DataLoss("malformed chunk response");
        PopFront(inflight, source);
        if (ZeroDigest(c.length) != c.xxh3) {
          Logger().warn("weight_data: chunk {} ({} at {}) from {} is not a hole; fetching it again",
                        index, c.file, c.offset, source->name);
          Reject(index, source);
          if (Dropped(source)) return Status::DataLoss("source dropped after bad chunks");
          continue;
        }
        // The staging file reads zeros there already: nothing to write.
        if (Status st = Record(index, true, source); !st.ok()) return LocalFailure(st);
        continue;
      }
      if (status != kChunkOk || length != c.length) {
        return Status::DataLoss("chunk " + std::to_string(index) + ": status " +
                                std::to_string(status) + ", " + std::to_string(length) + " bytes");
      }
      PopFront(inflight, source);
      bool verified = false;
      bool local = false;
      Status got = Receive(fd, index, &buf, &verified, deadline, &local);
      if (!got.ok()) {
        Requeue(index);
        return local ? LocalFailure(got) : got;
      }
      Count(c.length, source);
      if (!verified) {
        Logger().warn(
            "weight_data: chunk {} ({} at {}) from {} failed verification; fetching it again",
            index, c.file, c.offset, source->name);
        Reject(index, source);
        if (Dropped(source)) return Status::DataLoss("source dropped after bad chunks");
        continue;
      }
      Status stored = staging_.Sync(c);
      if (stored.ok()) stored = Record(index, false, source);
      if (!stored.ok()) {
        Requeue(index);
        return LocalFailure(stored);
      }
    }
  }

  // Receives chunk `index` into its place in the staging file and checks its
  // digest, a cache-sized piece at a time: each piece is received, hashed and
  // written while it is still in the CPU's cache, so the bytes cross memory
  // about twice (socket buffer, page cache) instead of five times. The bytes of
  // a chunk that fails verification are never journaled nor served, and are
  // overwritten when it is fetched again.
  Status Receive(int sock, uint32_t index, std::string* buf, bool* verified,
                 std::chrono::steady_clock::time_point deadline, bool* local) {
    const ManifestChunk& c = m_.chunks[index];
    Result<std::shared_ptr<UniqueFd>> file = staging_.File(c.file);  // once per chunk
    if (!file.ok()) {
      *local = true;
      return file.status();
    }
    buf->resize(kPieceBytes);
    Xxh3Stream hash;
    Status st;
    for (uint64_t done = 0; done < c.length && st.ok();) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, c.length - done));
      st = RecvAllBy(sock, buf->data(), n, deadline);
      if (!st.ok()) break;
      hash.Update(std::string_view(buf->data(), n));
      st = staging_.Write(**file, c, done, buf->data(), n);
      *local = !st.ok();
      done += n;
    }
    *verified = st.ok() && hash.HexDigest() == c.xxh3;
    return st;
  }

  std::string ZeroDigest(uint64_t length) {
    std::lock_guard<std::mutex> lock(zero_mu_);
    auto it = zero_digests_.find(length);
    if (it == zero_digests_.end()) {
      it = zero_digests_.emplace(length, Xxh3Hex(std::string(length, '\0'))).first;
    }
    return it->second;
  }

  Status Record(uint32_t index, bool hole, const Source* source) {
    const ManifestChunk& c = m_.chunks[index];
    Status journaled = staging_.Journal(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (!journaled.ok()) {
      state_[index] = Chunk::kQueued;
      return journaled;
    }
    state_[index] = Chunk::kDone;
    ++done_;
    stats_->chunks_holes += hole;
    verified_bytes_ += c.length;
    auto use = std::find_if(stats_->used.begin(), stats_->used.end(),
                            [&](const SourceUse& u) { return u.name == source->name; });
    if (use == stats_->used.end()) {
      use = stats_->used.insert(stats_->used.end(), SourceUse{source->name, source->seed, 0});
    }
    if (!hole) use->bytes += c.length;
    if (options_.verified) options_.verified->Set(index);
    if (done_ == m_.chunks.size()) EndLocked();
    changed_.notify_all();
    if (options_.progress) options_.progress(verified_bytes_);
    return Status::Ok();
  }

  // The next chunk for `source`: from a relay, any missing chunk it has; from a
  // seed, one no live relay has, claimed on the seed. With `wait` (the caller has
  // nothing in flight) waits a little for one.
  std::optional<Taken> Take(Source* source, bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + kIdleWait;
    for (;;) {
      if (FinishedLocked() || source->dropped) return std::nullopt;
      const auto now = std::chrono::steady_clock::now();
      // A relay among relays keeps one chunk in flight per seed: what a seed sends
      // reaches the swarm sooner when its uplink is not split many ways.
      const bool one_at_a_time =
          source->seed && !options_.relay.empty() && live_peers_ > 0 && source->inflight >= 1;
      for (uint32_t i : order_) {
        if (one_at_a_time) break;
        if (state_[i] != Chunk::kQueued || !source->have[i]) continue;
        Taken t{i, false};
        if (source->seed && !force_[i]) {
          if (peer_count_[i] > 0 || now < defer_until_[i]) continue;
          t.claim = true;
        }
        state_[i] = Chunk::kInFlight;
        ++source->inflight;
        return t;
      }
      if (!wait || changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        return std::nullopt;
      }
    }
  }

  // The source answered "not here" or "claimed" for chunk `index`.
  void NotThere(uint32_t index, Source* source, uint32_t status, uint32_t aux) {
    std::lock_guard<std::mutex> lock(mu_);
    state_[index] = Chunk::kQueued;
    const auto now = std::chrono::steady_clock::now();
    if (!source->seed) {
      // A relay is asked only for chunks it offered, and its verified chunks only
      // ever grow: "not here" is a lie (or a restart), and a relay has no claims
      // to report. Either way it fails, and is dropped.
      Logger().warn("weight_data: relay {} offered chunk {} but answered \"{}\"", source->name,
                    index, status == kChunkNotHere ? "not here" : "claimed");
      FailLocked(source);
    } else if (status == kChunkNotHere) {
      // A seed that is itself still fetching says in its state what it has; one
      // that offered the chunk there and does not serve it is broken (a file
      // changed under it, say) and fails.
      const bool offered = source->state_known && source->have[index];
      source->have[index] = false;
      if (offered) {
        Logger().warn("weight_data: source {} offered chunk {} but does not serve it", source->name,
                      index);
        FailLocked(source);
      }
    } else {
      if (claimed_since_[index] == std::chrono::steady_clock::time_point{}) {
        claimed_since_[index] = now;
      }
      // Claimed by a relay long ago (or for long, however the claim is renewed),
      // yet no live relay offers it: ask the seed for it anyway.
      // A claim still held after the seed could have sent the chunk at the floor
      // rate (a seed whose link many fetchers share is that slow, a stalled holder
      // slower).
      const auto claim_limit = std::clamp<std::chrono::steady_clock::duration>(
          std::chrono::milliseconds(m_.chunks[index].length * 1000 /
                                    std::max<uint64_t>(1, options_.claim_floor_rate)),
          kForceAfter, kForceAfterAtMost);
      const bool sent_long_ago = aux != 0xffffffff && std::chrono::milliseconds(aux) >= kForceAfter;
      // So does one whose claim holder cannot be reached: relays were named, and
      // every one of them is dropped. (Before any relay is known, a claim may be a
      // relay that has only just started: it is waited for.)
      const bool no_relay_left = !stats_->peers.empty() && live_peers_ == 0;
      if ((sent_long_ago || no_relay_left || now - claimed_since_[index] >= claim_limit) &&
          peer_count_[index] == 0) {
        force_[index] = true;
        Logger().debug("weight_data: asking the seed plainly for chunk {} ({}{}{})", index,
                       sent_long_ago ? "sent long ago; " : "",
                       no_relay_left ? "no relay left; " : "",
                       now - claimed_since_[index] >= claim_limit ? "claimed for long" : "");
      } else {
        defer_until_[index] = now + kClaimRetry;
      }
    }
    changed_.notify_all();
  }

  void Requeue(uint32_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_[i] == Chunk::kInFlight) state_[i] = Chunk::kQueued;
    changed_.notify_all();
  }
  // Answered (or given up): no longer in flight on `source`.
  void PopFront(std::deque<Taken>* inflight, Source* source) {
    inflight->pop_front();
    std::lock_guard<std::mutex> lock(mu_);
    --source->inflight;
    changed_.notify_all();
  }
  void Requeue(std::deque<Taken>* inflight, Source* source) {
    std::lock_guard<std::mutex> lock(mu_);
    source->inflight -= static_cast<int>(inflight->size());
    for (const Taken& t : *inflight) {
      if (state_[t.index] == Chunk::kInFlight) state_[t.index] = Chunk::kQueued;
    }
    inflight->clear();
    changed_.notify_all();
  }
  void Count(uint64_t n, const Source* source) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_->bytes_received += n;
    if (!source->seed) stats_->bytes_from_peers += n;
  }
  void Reject(uint32_t index, Source* source) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_->chunks_rejected;
    state_[index] = Chunk::kQueued;
    FailLocked(source);
    changed_.notify_all();
  }
  bool Fail(Source* source) {
    std::lock_guard<std::mutex> lock(mu_);
    changed_.notify_all();
    return FailLocked(source);
  }
  // True when the source is now dropped: a seed after kMaxSourceFailures, a relay
  // (anyone with the token can announce one) at its first failure.
  bool FailLocked(Source* source) {
    ++source->failures;
    if ((!source->seed || source->failures >= kMaxSourceFailures) && !source->dropped) {
      source->dropped = true;
      Logger().warn("weight_data: dropping {} {} after {} failure(s)",
                    source->seed ? "source" : "relay", source->name, source->failures);
      stats_->sources_dropped.push_back(source->name);
      Recount();
      CheckHopeLocked();
    }
    return source->dropped;
  }
  bool Dropped(const Source* source) {
    std::lock_guard<std::mutex> lock(mu_);
    return source->dropped;
  }

  const Manifest& m_;
  Staging& staging_;
  const FetchOptions& options_;
  FetchStats* stats_;
  const std::string session_ = RandomHex(8);  // this fetch, to the sources it relays for
  std::mutex mu_;
  std::condition_variable changed_;               // a chunk, a source or the outcome changed
  std::vector<std::unique_ptr<Source>> sources_;  // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;              // GUARDED_BY(mu_)
  std::vector<uint32_t> order_;                   // the fetch order
  std::vector<Chunk> state_;                      // GUARDED_BY(mu_)
  std::vector<uint16_t> peer_count_;              // GUARDED_BY(mu_): live relays having it
  std::vector<std::chrono::steady_clock::time_point> defer_until_;    // GUARDED_BY(mu_)
  std::vector<std::chrono::steady_clock::time_point> claimed_since_;  // GUARDED_BY(mu_)
  std::set<int> open_fds_;       // GUARDED_BY(mu_): connections EndLocked wakes
  std::vector<bool> force_;      // GUARDED_BY(mu_): ask the seed with SDRQ
  size_t done_ = 0;              // GUARDED_BY(mu_)
  int live_peers_ = 0;           // GUARDED_BY(mu_): relays not dropped
  bool failed_ = false;          // GUARDED_BY(mu_): no source has the rest, or a local error
  Status local_error_;           // GUARDED_BY(mu_)
  bool cancelled_ = false;       // GUARDED_BY(mu_): stopped on request
  uint64_t verified_bytes_ = 0;  // GUARDED_BY(mu_)
  std::mutex zero_mu_;
  std::map<uint64_t, std::string> zero_digests_;  // GUARDED_BY(zero_mu_)
};

}  // namespace

std::filesystem::path NormalizeDestination(const std::filesystem::path& into) {
  std::filesystem::path p = into.lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dest/"
  return p;
}

std::filesystem::path StagingDir(const std::filesystem::path& into_given) {
  const std::filesystem::path into = NormalizeDestination(into_given);
  const auto parent = into.has_parent_path() ? into.parent_path() : std::filesystem::path(".");
  return parent / ("." + into.filename().string() + ".seedd-staging");
}

Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into_given, const FetchOptions& options,
                  FetchStats* stats) {
  FetchStats local;
  if (stats == nullptr) stats = &local;
  Result<DestinationPlan> plan = PlanDestination(into_given, manifest, options.replace);
  if (!plan.ok()) return plan.status();
  if (plan->placement == Placement::kUpToDate) {
    stats->up_to_date = true;
    return Status::Ok();
  }
  const std::filesystem::path& into = plan->into;
  if (sources.empty() && manifest.sources.empty()) {
    return Status::InvalidArgument("no source to fetch from");
  }
  Staging staging(manifest, plan->staging);
  Result<std::vector<uint32_t>> resumed = staging.Open();
  if (!resumed.ok()) return resumed.status();
  if (options.staged) options.staged(plan->staging);
  Fetch fetch(manifest, staging, options, stats);
  fetch.Prepare(*resumed);
  fetch.Run(sources);
  if (fetch.Cancelled()) {
    return Status::Cancelled("the pull was stopped; " + std::to_string(fetch.VerifiedBytes()) +
                             " verified bytes are kept in " + plan->staging.string() +
                             ", and a rerun resumes from them");
  }
  if (Status local_error = fetch.local_error(); !local_error.ok()) {
    return local_error.WithContext("the pull into " + into.string() + " stopped; rerun to resume");
  }
  if (!fetch.Complete()) {
    return Status::Unavailable(
        "every source failed before the model was complete; rerun to resume");
  }
  SEEDD_RETURN_IF_ERROR(staging.Seal(options.verify_sha256));
  return InstallStaged(*plan);
}

}  // namespace seedd