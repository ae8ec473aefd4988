// The sockets of a Fetch (fetch.h): data connections and watch connections.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "common/crypto.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "kinds/weights/data_plane.h"
#include "kinds/weights/net/fetch.h"
#include "seedd/fleet.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "transport/client.h"
#include "transport/data_auth.h"
#include "wire/frame.h"

namespace seedd {
namespace {

constexpr size_t kMaxPeerListBytes = 64 * 1024;   // in a state response
constexpr size_t kPieceBytes = 256 * 1024;        // received, hashed and written while in cache
constexpr uint64_t kWholeChunkBytes = 64 * 1024;  // received in one piece, not split at its half
constexpr auto kReconnectIdle = std::chrono::seconds(20);  // sources close idle connections
// How often a relay tells a source that has every chunk that it is alive: well
// within WeightServerOptions::relay_ttl (10 s).
constexpr auto kKeepAlive = std::chrono::seconds(3);
constexpr uint64_t kRecordBytes = std::tuple_size_v<HeaderRecord>;
// Connections opened to one source in any second, at most: whatever a source
// answers, a fetcher never floods it (nor the service a fake relay names).
constexpr size_t kMaxOpensPerSecond = 10;
// The wait after this host ran out of descriptors or memory opening a connection.
constexpr auto kLocalShortageWait = std::chrono::seconds(1);

}  // namespace

std::chrono::steady_clock::time_point Fetch::DeadlineFor(const Source& s, uint64_t bytes) const {
  const TransferDeadline& d = s.seed ? options_.seed_deadline : options_.chunk_deadline;
  return std::chrono::steady_clock::now() + d.Within(bytes);
}

bool Fetch::OpenOrFail(Source* source, DataConn* conn) {
  std::chrono::milliseconds retry{0};
  Result<DataConn> fd = Open(source, &retry);
  const auto now = std::chrono::steady_clock::now();
  if (fd.ok()) {
    MutexLock lock(mu_);
    source->full_since = {};
    core_.SetSourceZone(source->id, fd->zone);
    *conn = std::move(*fd);
    return true;
  }
  if (Finished()) return false;
  if (fd.status().code() == StatusCode::kResourceExhausted && retry.count() > 0) {
    // The source answered that it is full: a wait it asked for, then again.
    MutexLock lock(mu_);
    if (source->full_since == std::chrono::steady_clock::time_point{}) source->full_since = now;
    ++stats_->refused_full;
    if (now - source->full_since < options_.capacity_patience) {
      Logger().debug("weight_data: {}: {}; trying again in {} ms", source->name,
                     fd.status().message(), retry.count());
      ended_.wait_for(lock, retry, [&]() REQUIRES(mu_) {
        return FinishedLocked() || !core_.Active(source->id);
      });
      return false;
    }
  } else if (fd.status().code() == StatusCode::kResourceExhausted) {
    // This host is short of descriptors or memory: not the source's fault.
    Logger().warn("weight_data: {}: {}; trying again in {} s", source->name, fd.status().message(),
                  kLocalShortageWait.count());
    MutexLock lock(mu_);
    ended_.wait_for(lock, kLocalShortageWait,
                    [&]() REQUIRES(mu_) { return FinishedLocked() || !core_.Active(source->id); });
    return false;
  }
  Logger().warn("weight_data: {}: {}", source->name, fd.status().message());
  if (!Fail(source)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return false;
}

void Fetch::Work(Source* source) {
  while (!Finished() && !Dropped(source)) {
    DataConn conn;
    if (!OpenOrFail(source, &conn)) continue;
    std::deque<Taken> inflight;
    bool idle = false;
    Status st = Pump(conn, source, &inflight, &idle);
    Close(&conn);
    Returned(&inflight, source);
    if (Finished()) return;
    if (st.ok() && idle) continue;  // a fresh connection before the source's idle timeout
    if (st.ok() || Dropped(source)) return;
    Logger().warn("weight_data: {}: {}", source->name, st.message());
    if (Fail(source)) return;
  }
}

void Fetch::Watch(Source* source) {
  DataConn conn;
  uint32_t cursor = 0;
  bool synced = false;  // the state was read: watch from `cursor`
  bool more = true;     // the source may verify more chunks
  auto last_used = std::chrono::steady_clock::now();
  while (!Finished() && !Dropped(source)) {
    if (conn.valid() && std::chrono::steady_clock::now() - last_used > kReconnectIdle) Close(&conn);
    if (!conn.valid() && !OpenOrFail(source, &conn)) continue;
    Status st;
    if (!synced || (source->seed && WantRelays())) {
      st = AskState(*conn.conn, source);
      synced = st.ok();
      cursor = 0;
      more = true;
    } else if (more || std::chrono::steady_clock::now() - last_used >= kKeepAlive) {
      // Once the source has everything a watch is answered at once: it is sent
      // only as often as the source must hear that this relay is alive (it keeps
      // the relay's claims on chunks it sent only while it does).
      st = AskWatch(conn, source, &cursor, &more);
    } else {
      const auto wait = std::min<std::chrono::steady_clock::duration>(RelayWait(), kKeepAlive);
      MutexLock lock(mu_);
      ended_.wait_for(lock, wait, [&]() REQUIRES(mu_) { return FinishedLocked(); });
      continue;
    }
    last_used = std::chrono::steady_clock::now();
    if (st.ok()) continue;
    Close(&conn);
    if (Finished()) return;
    Logger().warn("weight_data: {}: state: {}", source->name, st.message());
    if (Fail(source)) return;
  }
  Close(&conn);
}

Status Fetch::AskState(Conn& conn, Source* source) {
  const size_t bitmap = (m_.chunks.size() + 7) / 8;
  // The whole answer within the deadline of its largest size.
  const auto deadline = DeadlineFor(*source, kRecordBytes + bitmap + kMaxPeerListBytes);
  const RequestRecord req = EncodeRequest(kStateMagic, 0);
  if (!conn.SendAllBy(req.data(), req.size(), deadline)) {
    return Status::Unavailable("cannot send a state request");
  }
  HeaderRecord record;
  SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(record.data(), record.size(), deadline));
  const Header h = DecodeHeader(record);
  if (h.magic != kStateMagic || h.status != kChunkOk || h.length < bitmap ||
      h.length > bitmap + kMaxPeerListBytes) {
    return Status::DataLoss("malformed state response");
  }
  std::string body(h.length, '\0');
  SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(body.data(), body.size(), deadline));
  ApplyState(source, body);
  return Status::Ok();
}

Status Fetch::AskWatch(DataConn& data, Source* source, uint32_t* cursor, bool* more) {
  Conn& conn = *data.conn;
  const size_t chunks = m_.chunks.size();
  // The server answers within kWatchWait, then the largest answer at the floor rate.
  const auto deadline = DeadlineFor(*source, kRecordBytes + 4 * chunks + (chunks + 7) / 8) +
                        std::chrono::milliseconds(kWatchWait);
  // To a server that takes it, the watch names the chunks this host still
  // wants: the server answers (and wakes this thread) for those alone, not for
  // every chunk it verifies.
  const RequestRecord req =
      EncodeRequest(data.watch_wanted ? kWatchWantedMagic : kWatchMagic, *cursor);
  std::string ask(req.data(), req.size());
  if (data.watch_wanted) {
    MutexLock lock(mu_);
    ask += core_.MissingBitmap();
  }
  if (!conn.SendAllBy(ask.data(), ask.size(), deadline)) {
    return Status::Unavailable("cannot send a watch request");
  }
  HeaderRecord record;
  SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(record.data(), record.size(), deadline));
  const Header h = DecodeHeader(record);
  if (h.magic != kHaveMagic || h.status != kChunkOk || h.length % 4 != 0 || h.length > 4 * chunks ||
      h.index > chunks) {
    return Status::DataLoss("malformed watch response");
  }
  std::string body(h.length, '\0');
  SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(body.data(), body.size(), deadline));
  std::vector<uint32_t> have(h.length / 4);
  for (size_t i = 0; i < have.size(); ++i) {
    uint32_t be;
    std::memcpy(&be, body.data() + 4 * i, 4);
    have[i] = ntohl(be);
    if (have[i] >= chunks) return Status::DataLoss("watch response names no such chunk");
  }
  *more = (h.aux & kHaveComplete) == 0;
  *cursor = h.index;
  ApplyHave(source, have, !*more, h.index);
  return Status::Ok();
}

Result<DataConn> Fetch::Open(Source* source, std::chrono::milliseconds* retry) {
  {
    MutexLock lock(mu_);
    auto& opened = source->opened;
    while (opened.size() >= kMaxOpensPerSecond) {
      const auto free_at = opened.front() + std::chrono::seconds(1);
      if (std::chrono::steady_clock::now() >= free_at) {
        opened.pop_front();
        continue;
      }
      ended_.wait_until(lock, free_at);
      if (FinishedLocked() || !core_.Active(source->id))
        return Status::Unavailable("the fetch is over");
    }
    opened.push_back(std::chrono::steady_clock::now());
  }
  Result<UniqueFd> fd = ConnectTcp(source->addr, std::chrono::seconds(5), &ended_flag_);
  if (!fd.ok()) return fd.status();
  if (!Track(fd->get())) return Status::Unavailable("the fetch is over");
  return Handshake(std::move(*fd), *source, retry);
}

void Fetch::Close(DataConn* conn) {
  if (!conn->valid()) return;
  if (conn->conn != nullptr) conn->conn->Shutdown();
  conn->conn.reset();
  Untrack(conn->fd.get());
  conn->fd.Reset();
}

Result<DataConn> Fetch::Handshake(UniqueFd fd_owned, const Source& source,
                                  std::chrono::milliseconds* retry) {
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
  // No token on the wire: each side proves it holds one (data_auth.h), the
  // source first, so a peer that is not of this fleet learns nothing from us.
  Json request = {{"kind", kWeightDataKind},
                  {"root_digest", m_.root_digest},
                  {"auth", kDataAuthScheme},
                  {"nonce", RandomHexOrDie(kDataNonceHexBytes / 2)},
                  {"claim_holder", true}};
  if (!options_.relay.empty()) {
    request["relay"] = options_.relay;
    request["session"] = session_;
  }
  if (!options_.zone.empty()) request["zone"] = options_.zone;
  const auto deadline = Clock::now() + options_.timeout;
  std::unique_ptr<Conn> conn;
  if (options_.tls != nullptr) {
    Result<std::unique_ptr<Conn>> secured =
        Conn::Connect(fd->get(), *options_.tls, source.addr.host, deadline);
    if (!secured.ok()) return secured.status();
    conn = std::move(*secured);
  } else {
    conn = std::make_unique<Conn>(fd->get());
  }
  std::string frame = EncodeJsonFrame(request);
  if (!conn->SendAllBy(frame.data(), frame.size(), deadline)) {
    return Status::Unavailable("cannot send the data request");
  }
  Result<std::string> body = ReadFrameBody(*conn, 64 * 1024, deadline);
  if (body.ok()) {
    Result<Json> challenge = ParseJson(*body);
    if (challenge.ok() && challenge->is_object() && challenge->value("status", "") == "challenge") {
      Status proved = AnswerChallenge(*conn, request, *challenge, deadline);
      if (!proved.ok()) return proved;
      body = ReadFrameBody(*conn, 64 * 1024, deadline);
    } else if (challenge.ok() && challenge->is_object() && challenge->value("status", "") == "ok") {
      return Status::PermissionDenied(
          "the peer accepted the data connection without proving that it holds the fleet's "
          "token: not a daemon of this fleet");
    }
  }
  if (!body.ok() && body.status().code() == StatusCode::kResourceExhausted) {
    // A frame header no seed sends (an HTTP reply reads as a length of 10^18):
    // another service, not a full source.
    return Status::FailedPrecondition("the peer does not speak the seed protocol (" +
                                      body.status().message() + ")");
  }
  if (!body.ok()) return body.status();
  Result<Json> response = ParseJson(*body);
  if (response.ok() && response->is_object() && (*response)["status"] == "error" &&
      response->contains("retry_ms") && (*response)["retry_ms"].is_number_unsigned()) {
    // Full, not failing: a bounded wait (a peer's number), jittered so that a
    // fleet refused at once does not return at once.
    const uint64_t ms = std::clamp<uint64_t>((*response)["retry_ms"].get<uint64_t>(), 200, 30000);
    thread_local std::mt19937_64 rng(std::random_device{}());
    *retry = std::chrono::milliseconds(ms / 2 + rng() % ms);  // at least 100 ms
    return Status::ResourceExhausted("the source is full: " + body->substr(0, 300));
  }
  if (!response.ok() || !response->is_object() || (*response)["status"] != "ok") {
    return Status::PermissionDenied("the source refused the data connection: " +
                                    body->substr(0, 300));
  }
  auto line = response->find("wait_in_line");
  const bool wait_in_line = line != response->end() && *line == true;
  auto named = response->find("claim_holder");
  const bool claim_holder = named != response->end() && *named == true;
  auto filtered = response->find("watch_wanted");
  const bool watch_wanted = filtered != response->end() && *filtered == true;
  // The source's zone: none when it says none, or something no zone is.
  std::string zone;
  if (auto z = response->find("zone");
      z != response->end() && z->is_string() && IsZoneName(z->get<std::string>())) {
    zone = z->get<std::string>();
  }
  return DataConn{std::move(*fd), std::move(conn), wait_in_line,
                  claim_holder,   watch_wanted,    std::move(zone)};
}

Status Fetch::AnswerChallenge(Conn& conn, const Json& request, const Json& challenge,
                              Clock::time_point deadline) {
  const std::string nonce = challenge.value("nonce", "");
  const std::string proof = challenge.value("proof", "");
  const std::string binding = SessionBinding(conn);
  TokenRing own({options_.token});
  const TokenRing& tokens = options_.tokens != nullptr ? *options_.tokens : own;
  if (challenge.value("auth", "") != kDataAuthScheme || !IsLowerHex(nonce, kDataNonceHexBytes) ||
      !ProvedByAny(tokens, proof, "source", request, nonce, binding)) {
    return Status::PermissionDenied(
        "the peer did not prove that it holds the fleet's token: not a daemon of this fleet "
        "(a relay named by someone else?), or its token differs");
  }
  const std::string answer = EncodeJsonFrame(
      Json{{"proof", DataProof(tokens.Sent(), "fetcher", request, nonce, binding)}});
  if (!conn.SendAllBy(answer.data(), answer.size(), deadline)) {
    return Status::Unavailable("cannot send the data request's proof");
  }
  return Status::Ok();
}

RequestRecord Fetch::RequestFor(const DataConn& conn, const Taken& t) const {
  if (conn.wait_in_line && receiving_.load(std::memory_order_relaxed) == 0) {
    return EncodeRequest(t.claim ? kClaimWaitingMagic : kSendWaitingMagic, t.index);
  }
  return EncodeRequest(t.claim ? kClaimMagic : kSendMagic, t.index);
}

Status Fetch::Pump(DataConn& data, Source* source, std::deque<Taken>* inflight, bool* idle) {
  Conn& conn = *data.conn;
  const int depth = Depth(*source);
  // One piece of a chunk, allocated once, not zeroed: every connection of
  // every pull has one, and a part pull of an origin model opens many.
  const std::unique_ptr<char[]> buf(new char[kPieceBytes]);
  auto last_used = std::chrono::steady_clock::now();
  // Past `pipeline` requests, more only while those in flight are small.
  auto room = [&] {
    const int n = static_cast<int>(inflight->size());
    if (n >= depth) return false;
    if (n < options_.pipeline) return true;
    uint64_t bytes = 0;
    for (const Taken& t : *inflight) bytes += m_.chunks[t.index].length;
    return bytes < options_.pipeline_bytes;
  };
  // Refilled once a quarter of the depth is free (or any of the first
  // `pipeline`): with small chunks, a request sent per chunk answered cost a
  // send here, a receive at the source and a lock each.
  auto refill = [&] {
    const int n = static_cast<int>(inflight->size());
    return n < options_.pipeline || depth - n >= std::max(1, depth / 4);
  };
  std::string requests;  // sent together: one send for a pipeline's worth
  for (;;) {
    requests.clear();
    const size_t before = inflight->size();
    if (refill()) TakeSome(source, inflight->empty(), room, inflight);
    for (size_t i = before; i < inflight->size(); ++i) {
      const RequestRecord req = RequestFor(data, (*inflight)[i]);
      requests.append(req.data(), req.size());
    }
    if (!requests.empty() &&
        !conn.SendAllBy(requests.data(), requests.size(), DeadlineFor(*source, requests.size()))) {
      return Status::Unavailable("cannot send a chunk request");
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
    const uint32_t index = inflight->front().index;
    const ManifestChunk& c = m_.chunks[index];
    const auto deadline = DeadlineFor(*source, kRecordBytes + c.length);
    HeaderRecord record;
    SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(record.data(), record.size(), deadline));
    const Header h = DecodeHeader(record);
    if (h.magic != kChunkMagic || h.index != index) {
      return Status::DataLoss("malformed chunk response");
    }
    if (h.status == kChunkNotHere || h.status == kChunkClaimed) {
      // A claim may name its holder (when the server said it would).
      std::string holder;
      if (h.length != 0) {
        if (h.status != kChunkClaimed || !data.claim_holder || h.length > kMaxRelayNameBytes) {
          return Status::DataLoss("malformed chunk response");
        }
        holder.resize(h.length);
        SEEDD_RETURN_IF_ERROR(conn.RecvAllBy(holder.data(), holder.size(), deadline));
        if (!ParseHostPort(holder).ok()) holder.clear();  // not followed
      }
      inflight->pop_front();
      NotThere(index, source, h.status, holder);
      if (Dropped(source)) return Status::DataLoss("source dropped");
      continue;
    }
    if (h.status == kChunkBusy) {
      if (h.length != 0) return Status::DataLoss("malformed chunk response");
      inflight->pop_front();
      Busy(index, source, std::chrono::milliseconds(std::min<uint32_t>(h.aux, 10000)));
      continue;
    }
    if (h.status == kChunkHole) {
      if (h.length != 0) return Status::DataLoss("malformed chunk response");
      inflight->pop_front();
      if (ZeroDigest(c.length) != DigestOf(index)) {
        Logger().warn("weight_data: chunk {} ({} at {}) from {} is not a hole; fetching it again",
                      index, c.file, c.offset, source->name);
        Reject(index, source);
        if (Dropped(source)) return Status::DataLoss("source dropped after bad chunks");
        continue;
      }
      // Nothing to write but zeros: punched, since an earlier attempt at this
      // chunk (rejected, or cut short) may have left bytes there. Verified
      // already, it wins over a copy being written, as a held copy does.
      const FetcherCore::WriteTurn turn = BeginWrite(index);
      const bool held = turn == FetcherCore::WriteTurn::kWriting;
      if (turn == FetcherCore::WriteTurn::kHave || !TakeRecord(index, held)) {
        if (turn == FetcherCore::WriteTurn::kWrite) EndWrite(index);
        Returned(index, source);
        continue;
      }
      Status st = staging_.Zero(c);
      if (st.ok()) st = Record(index, true, source);
      if (!held) EndWrite(index);
      if (!st.ok()) return LocalFailure(st);
      continue;
    }
    if (h.status != kChunkOk || h.length != c.length) {
      return Status::DataLoss("chunk " + std::to_string(index) + ": status " +
                              std::to_string(h.status) + ", " + std::to_string(h.length) +
                              " bytes");
    }
    inflight->pop_front();
    // A chunk is arriving: requests sent meanwhile do not wait in line.
    struct Arriving {
      std::atomic<int>& n;
      explicit Arriving(std::atomic<int>& count) : n(count) { n.fetch_add(1); }
      ~Arriving() { n.fetch_sub(1); }
      Arriving(const Arriving&) = delete;
      Arriving& operator=(const Arriving&) = delete;
    } arriving(receiving_);
    // Once half the chunk is here the next request goes out, to wait at the
    // source and follow this chunk without a round trip (through a queue of
    // shaped traffic, a round trip can take as long as a chunk).
    bool ahead_unsent = false;
    auto ahead = [&] {
      if (!inflight->empty()) return;
      std::optional<Taken> next = TakeAhead(source);
      if (!next) return;
      const RequestRecord req = RequestFor(data, *next);
      inflight->push_back(*next);
      ahead_unsent = !conn.SendAllBy(req.data(), req.size(), DeadlineFor(*source, req.size()));
    };
    switch (BeginWrite(index)) {
      case FetcherCore::WriteTurn::kHave: {
        // Verified already (an endgame copy that came in second): read past.
        Landing past{buf.get()};
        Status st = Receive(conn, index, &past, deadline, ahead);
        if (!st.ok()) {
          Returned(index, source);
          return st;
        }
        ReadPast(index, source);
        if (ahead_unsent) return Status::Unavailable("cannot send a chunk request");
        continue;
      }
      case FetcherCore::WriteTurn::kWriting: {
        Status st = ReceiveHeld(conn, source, index, buf.get(), deadline, ahead);
        if (st.ok() && ahead_unsent) st = Status::Unavailable("cannot send a chunk request");
        if (!st.ok()) return st;
        if (Dropped(source)) return Status::DataLoss("source dropped after bad chunks");
        continue;
      }
      case FetcherCore::WriteTurn::kWrite:
        break;
    }
    Landing landing{buf.get()};
    landing.write = true;
    Status got = Receive(conn, index, &landing, deadline, ahead);
    if (got.ok() && ahead_unsent) got = Status::Unavailable("cannot send a chunk request");
    if (!got.ok()) {
      EndWrite(index);
      Returned(index, source);
      return landing.local ? LocalFailure(got) : got;
    }
    if (landing.superseded || (landing.verified && !TakeRecord(index, false))) {
      // A copy held aside was verified first and is the one written.
      EndWrite(index);
      ReadPast(index, source);
      continue;
    }
    if (!landing.verified) {
      EndWrite(index);
      RejectCopy(index, source);
      if (Dropped(source)) return Status::DataLoss("source dropped after bad chunks");
      continue;
    }
    Status stored = Record(index, false, source, c.length);
    EndWrite(index);
    if (!stored.ok()) {
      Returned(index, source);
      return LocalFailure(stored);
    }
  }
}

Status Fetch::ReceiveHeld(Conn& conn, Source* source, uint32_t index, char* piece,
                          std::chrono::steady_clock::time_point deadline,
                          const std::function<void()>& halfway) {
  // Another copy is being written: an endgame copy asked elsewhere while that
  // one was slow to come. Held in memory, this one is written if it is
  // verified first; read past, it waited for the slower copy.
  const ManifestChunk& c = m_.chunks[index];
  std::unique_ptr<char[]> held = Hold(c.length);
  struct Release {
    Fetch* f;
    uint64_t length;
    ~Release() {
      if (length != 0) f->ReleaseHeld(length);
    }
  } release{this, held != nullptr ? c.length : 0};
  Landing landing{piece, held.get()};
  Status st = Receive(conn, index, &landing, deadline, halfway);
  if (!st.ok()) {
    Returned(index, source);
    return st;
  }
  if (held == nullptr || (landing.verified && !TakeRecord(index, true))) {
    ReadPast(index, source);  // beyond the memory held, or the other copy was verified first
    return Status::Ok();
  }
  if (!landing.verified) {
    RejectCopy(index, source);
    return Status::Ok();
  }
  // Won: the copy being written writes no more of its pieces (see Receive).
  Result<std::shared_ptr<UniqueFd>> file = staging_.FileFor(c);
  Status written = file.ok() ? staging_.Write(**file, c, 0, held.get(), c.length) : file.status();
  if (written.ok()) written = Record(index, false, source, c.length);
  if (!written.ok()) {
    Returned(index, source);
    return LocalFailure(written);
  }
  MutexLock lock(mu_);
  ++stats_->held_copies_written;
  return Status::Ok();
}

// Receives chunk `index` into its place in the staging file and checks its
// digest, a cache-sized piece at a time: each piece is received, hashed and
// written while it is still in the CPU's cache, so the bytes cross memory about
// twice (socket buffer, page cache) instead of five times. The bytes of a chunk
// that fails verification are never journaled nor served, and are overwritten
// when it is fetched again. A held copy lands in its buffer, checked but not
// written; neither written nor held, the bytes are read and dropped.
Status Fetch::Receive(Conn& conn, uint32_t index, Landing* landing,
                      std::chrono::steady_clock::time_point deadline,
                      const std::function<void()>& halfway) {
  const ManifestChunk& c = m_.chunks[index];
  bool past_half = false;
  // A small chunk is one piece, one receive and one write: the next request
  // goes out before it, as it would halfway through a larger one.
  if (c.length <= kWholeChunkBytes) {
    past_half = true;
    halfway();
  }
  auto at = [&](uint64_t done) {
    if (!past_half && done * 2 >= c.length) {
      past_half = true;
      halfway();
    }
  };
  // The next piece: a piece ends at the chunk's half, so that `halfway` runs
  // there and not only once a chunk of at most a piece has arrived whole.
  const uint64_t half = (c.length + 1) / 2;
  auto piece = [&](uint64_t done) {
    uint64_t n = std::min<uint64_t>(kPieceBytes, c.length - done);
    if (!past_half && done < half) n = std::min(n, half - done);
    return static_cast<size_t>(n);
  };
  std::shared_ptr<UniqueFd> file;
  if (landing->write) {
    Result<std::shared_ptr<UniqueFd>> opened = staging_.FileFor(c);  // once per chunk
    if (!opened.ok()) {
      landing->local = true;
      return opened.status();
    }
    file = std::move(*opened);
  }
  std::optional<ChunkHasher> hash;
  if (landing->write || landing->held != nullptr) hash.emplace(m_.chunk_digest);
  Status st;
  for (uint64_t done = 0; done < c.length && st.ok();) {
    const size_t n = piece(done);
    char* into = landing->held != nullptr ? landing->held + done : landing->piece;
    st = conn.RecvAllBy(into, n, deadline);
    if (!st.ok()) break;
    metrics::BytesReceived(metrics::Plane::kData, n);
    if (hash) hash->Update(std::string_view(into, n));
    if (file != nullptr) {
      // Under the chunk's stripe: a held copy that won waits for this piece,
      // and no piece of this copy is written after it.
      MutexLock lock(RecordMu(index));
      if (recorder_[index].load(std::memory_order_relaxed) == kHeld) {
        landing->superseded = true;
        file.reset();  // the rest is read past
        hash.reset();
      } else {
        st = staging_.Write(*file, c, done, into, n);
        landing->local = !st.ok();
      }
    }
    done += n;
    if (st.ok()) at(done);
  }
  landing->verified = st.ok() && hash && hash->HexDigest() == DigestOf(index);
  return st;
}

std::string Fetch::DigestOf(uint32_t index) const {
  const std::string& digest = m_.chunks[index].digest;
  if (!digest.empty() || !options_.digest_of) return digest;
  return options_.digest_of(index);
}

std::string Fetch::ZeroDigest(uint64_t length) {
  MutexLock lock(zero_mu_);
  auto it = zero_digests_.find(length);
  if (it == zero_digests_.end()) {
    it = zero_digests_.emplace(length, ChunkDigestHex(m_.chunk_digest, std::string(length, '\0')))
             .first;
  }
  return it->second;
}

}  // namespace seedd
