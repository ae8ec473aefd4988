// One FetchModel run: the driver of a FetcherCore (proto/fetcher_core.h). The
// core decides which sources are neighbours, which chunk to ask of which, and
// what each answer means; this class owns the sockets and threads that carry
// it out and reports back what happened, with the time.
//
// Per neighbour (at most FetchOptions::max_neighbours at once, seeds included):
// one watch connection, which reads the neighbour's state once and then what it
// newly verifies ("SDWT", answered as chunks land, not polled), and its data
// connections (connections_per_source to a seed, connections_per_peer to a
// relay). Relays named by the manifest or by a state response wait as
// candidates (at most kMaxSources known) and replace neighbours that are dropped.
// A seed is asked for more relays while the neighbour set has room: after
// kFirstRelayAsk, the wait doubling up to state_interval.
//
// fetch.cc and fetch_discovery.cc turn events into core calls (under mu_),
// fetch_connections.cc holds the sockets.
//
// Thread safety: Run starts and joins every thread; the other public methods
// may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/unique_fd.h"
#include "kinds/weights/files/staging.h"
#include "kinds/weights/net/fetcher.h"
#include "kinds/weights/proto/fetcher_core.h"

namespace seedd {

// A seed or a relay this fetch knows of.
struct Source {
  HostPort addr;
  std::string name;
  PeerId id = 0;      // the core's
  bool seed = false;  // given by the caller: asked only for chunks no relay has
  // Since when every connection to it was refused for capacity (zero: not now).
  std::chrono::steady_clock::time_point full_since{};
  // When the last connections to it were opened (at most kMaxOpensPerSecond).
  std::deque<std::chrono::steady_clock::time_point> opened;
  // Its idle connections wait here for a request to send: woken by what it
  // newly offers, and by what may free or return work for any source.
  mutable std::condition_variable work;
};

// A data connection: its socket and, over TLS, its session.
struct DataConn {
  UniqueFd fd;
  std::unique_ptr<Conn> conn;
  bool wait_in_line = false;  // the server takes "SDRW" and "SDNW"
  bool claim_holder = false;  // a "claimed" answer names the relay holding the claim
  bool watch_wanted = false;  // the server takes "SDWW" (a watch for wanted chunks)
  std::string zone;           // the source's zone, as its answer said (empty: none)
  bool valid() const { return fd.valid(); }
};

class Fetch {
 public:
  Fetch(const Manifest& m, Staging& staging, const FetchOptions& o, FetchStats* s);

  // `resumed` chunks were verified by an earlier run, `reused` copied from files
  // held here (files/reuse.h).
  void Prepare(const std::vector<uint32_t>& resumed, const std::vector<uint32_t>& reused = {});
  // Fetches from `seeds` and the relays learnt on the way until every chunk is
  // verified, no known source has the missing ones, a local error, or a stop.
  void Run(const std::vector<HostPort>& seeds);

  bool Cancelled();
  uint64_t VerifiedBytes();
  bool Complete();
  Status local_error();

 private:
  // fetch.cc: bookkeeping.
  bool FinishedLocked() const REQUIRES(mu_) { return core_.Finished(); }
  bool Finished();
  // Dropped, or retired from the neighbours: its connections end.
  bool Dropped(const Source* source);
  // `zone`: its zone, when the naming said (a state's relay list).
  void AddSourceLocked(const HostPort& addr, bool seed,
                       const std::optional<std::string>& zone = std::nullopt) REQUIRES(mu_);
  // The seeds `given`, a name that resolves to several addresses as one seed
  // per address. Resolves without mu_ held; `first` logs what a name became.
  void AddSeeds(const std::vector<HostPort>& given, bool first) EXCLUDES(mu_);
  // Relays from options_.registry, when it has one. Without mu_ held.
  std::vector<HostPort> AskRegistry() EXCLUDES(mu_);
  void AddRelays(const std::vector<HostPort>& relays);
  // Starts the connections of the neighbours the core picks.
  void FillNeighboursLocked() REQUIRES(mu_);
  // Gives up when no neighbour or candidate can supply a missing chunk.
  void CheckHopeLocked() REQUIRES(mu_);
  // Every source's idle connections look for work again.
  void WakeWorkersLocked() REQUIRES(mu_);
  // Wakes the connections that may use a request freed or returned
  // (FetcherCore::MayAsk), each source's in turn.
  void WakeAskersLocked() REQUIRES(mu_);
  // Wakes idle connections of `s` when it may be asked now, enough for the
  // requests it may take.
  void WakeLocked(const Source& s, std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // A stop was asked (options_.cancel): the fetch ends. True when it was.
  bool CancelIfAskedLocked() REQUIRES(mu_);
  // The fetch is over: connections blocked on a slow source are woken at once.
  void EndLocked() REQUIRES(mu_);
  // A local error (a full disk, say): no source is to blame; the fetch ends with
  // it. Returns Ok for the caller to stop.
  Status LocalFailure(Status st);
  // True when `source` is dropped for this failure (of `chunk`, when given).
  bool Fail(Source* source, std::optional<uint32_t> chunk = std::nullopt);
  bool FailLocked(Source* source, std::optional<uint32_t> chunk) REQUIRES(mu_);
  // Requests in flight on one data connection to `s` (as the core started it).
  int Depth(const Source& s);
  int DepthLocked(const Source& s) const REQUIRES(mu_);
  // A request for `source` sent while a chunk from it is still arriving (see
  // SwarmScheduler::Next's `ahead`), or none.
  std::optional<Taken> TakeAhead(Source* source);
  // Requests for `source` appended to *inflight while `room()` allows, in one
  // pass under the lock; with `wait` (nothing in flight on the caller's
  // connection), waiting a little for the first: until a change wakes it, its
  // source's deferral ends (FetcherCore::NextChance) or kIdleWait passes.
  void TakeSome(Source* source, bool wait, const std::function<bool()>& room,
                std::deque<Taken>* inflight);
  // `source` answered "not here" or "claimed" for `index`; a claim may name the
  // relay `holder` it went to.
  void NotThere(uint32_t index, Source* source, uint32_t status, const std::string& holder = "");
  // `source` answered that its upload slots are taken: the chunk is asked
  // elsewhere, and `source` for nothing before `retry` from now.
  void Busy(uint32_t index, const Source* source, std::chrono::milliseconds retry);
  // Requests that ended without an answer, without blame.
  void Returned(uint32_t index, const Source* source);
  void Returned(std::deque<Taken>* inflight, const Source* source);
  // Whether an arriving copy of `index` may be written to the staging file
  // (FetcherCore::BeginWrite); kWrite pairs with EndWrite.
  FetcherCore::WriteTurn BeginWrite(uint32_t index);
  void EndWrite(uint32_t index);
  // Who records chunk `index` once its copy is verified: the copy written as it
  // arrived (`held` false) or a copy held in memory; true when it is the caller.
  // The first to ask wins; the copy being written stops writing once a held
  // copy has won (see Receive).
  bool TakeRecord(uint32_t index, bool held);
  // A buffer for a held copy of `length` bytes, within held_copy_bytes; null
  // when over it. ReleaseHeld gives the bytes back.
  std::unique_ptr<char[]> Hold(uint64_t length);
  void ReleaseHeld(uint64_t length);
  // Chunk `index` verified and written (`received` bytes of it came from
  // `source`, counted as Count does): journaled, and the core told.
  Status Record(uint32_t index, bool hole, const Source* source, uint64_t received = 0);
  void Reject(uint32_t index, Source* source);
  // A whole copy of `index` from `source` failed verification: counted,
  // logged and rejected.
  void RejectCopy(uint32_t index, Source* source);
  // A whole copy of `index` from `source` was read and dropped (another copy
  // was written): counted, and its request returned without blame.
  void ReadPast(uint32_t index, const Source* source);
  void Count(uint64_t n, const Source* source);
  void CountLocked(uint64_t n, const Source* source) REQUIRES(mu_);
  // A state response: the bitmap, then relay names one per line.
  void ApplyState(Source* source, std::string_view body);
  // A watch answer: the chunks `source` verified since the last (those this
  // host wants, to a filtered watch), whether it has every chunk, and how many
  // it has verified in all.
  void ApplyHave(Source* source, const std::vector<uint32_t>& chunks, bool complete,
                 uint64_t verified);
  // Whether a seed should be asked for more relays now.
  bool WantRelays();
  // How long a seed's watch waits before asking WantRelays again.
  std::chrono::milliseconds RelayWait();
  // Connections are tracked so that EndLocked can wake them; false (and the
  // connection is not to be used) when the fetch is over already.
  bool Track(int fd);
  void Untrack(int fd);

  // fetch_connections.cc: sockets.
  // When `bytes` to or from `s` must have moved, from now.
  std::chrono::steady_clock::time_point DeadlineFor(const Source& s, uint64_t bytes) const;
  // One data connection's loop against `source`; returns when the fetch is over
  // or `source` is dropped.
  void Work(Source* source);
  // The watch connection's loop: the state, then what is new, and for a seed
  // more relays while wanted.
  void Watch(Source* source);
  // A source refused for capacity (its data plane full, a parsed busy answer)
  // is ResourceExhausted with when to try again in *retry; ResourceExhausted
  // with no *retry is this host's shortage (no descriptor left). At most
  // kMaxOpensPerSecond connections a second to one source: it waits for that.
  Result<DataConn> Open(Source* source, std::chrono::milliseconds* retry);
  // Checks the source's proof in `challenge` (an answer to `request`) and sends
  // ours: PermissionDenied when the source did not prove it holds a token.
  Status AnswerChallenge(Conn& conn, const Json& request, const Json& challenge,
                         std::chrono::steady_clock::time_point deadline);
  // Open, or a failure of `source` logged and counted (then a short pause
  // unless it is dropped); false when there is no connection. A refusal for
  // capacity is not a failure: the connection is tried again when the source
  // said, the neighbours serving meanwhile (a fleet at its origin's door),
  // until the source has refused for FetchOptions::capacity_patience.
  bool OpenOrFail(Source* source, DataConn* conn);
  void Close(DataConn* conn);
  Result<DataConn> Handshake(UniqueFd fd, const Source& source, std::chrono::milliseconds* retry);
  Status Pump(DataConn& conn, Source* source, std::deque<Taken>* inflight, bool* idle);
  // The request record for `t` on `conn`: "waiting" when no chunk is arriving
  // from anyone and the server takes it.
  RequestRecord RequestFor(const DataConn& conn, const Taken& t) const;
  // What Receive does with a chunk's bytes, and what came of it.
  struct Landing {
    char* piece = nullptr;    // a piece's buffer (fetch_connections.cc's kPieceBytes)
    char* held = nullptr;     // or the whole chunk's: a copy held aside, not written
    bool write = false;       // written to the staging file piece by piece
    bool verified = false;    // out: the digest matched (not checked when read past)
    bool superseded = false;  // out: a held copy won; the rest was read past
    bool local = false;       // out: the failure was this host's (its disk)
  };
  // Receives chunk `index` (see fetch_connections.cc): read past, written, or
  // held, and checked unless read past; `halfway` is called once half of it has
  // arrived.
  Status Receive(Conn& conn, uint32_t index, Landing* landing,
                 std::chrono::steady_clock::time_point deadline,
                 const std::function<void()>& halfway);
  // A copy of `index` arriving while another is being written: held and raced
  // (the first verified is written) when held_copy_bytes allows, else read
  // past. An error ends the connection.
  Status ReceiveHeld(Conn& conn, Source* source, uint32_t index, char* piece,
                     std::chrono::steady_clock::time_point deadline,
                     const std::function<void()>& halfway);
  Status AskState(Conn& conn, Source* source);
  // Returns false in *more when the source has every chunk.
  Status AskWatch(DataConn& data, Source* source, uint32_t* cursor, bool* more);
  std::string ZeroDigest(uint64_t length);
  // Chunk `index`'s digest: the manifest's, or FetchOptions::digest_of's for a
  // chunk the manifest leaves without one (empty: not known yet).
  std::string DigestOf(uint32_t index) const;

  const Manifest& m_;
  Staging& staging_;
  const FetchOptions& options_;
  FetchStats* stats_;
  const std::string session_;  // this fetch, to the sources it relays for
  Mutex mu_;
  // Idle connections wait on their source's `work` (WakeAskersLocked wakes
  // those that may use a request freed or returned; a chunk a neighbour
  // announced wakes only its own; WakeWorkersLocked all, when a source is
  // dropped or retired or the fetch ends); the fetch's own thread, watches and
  // connections being opened wait on ended_ (the fetch ended, a source was
  // dropped, retired or added). One notify of every thread per chunk each
  // neighbour announced woke tens of threads of each daemon thousands of times
  // a second in a fleet of relays, each to take the lock in turn.
  std::condition_variable ended_;
  FetcherCore core_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Source>> sources_ GUARDED_BY(mu_);  // by PeerId
  size_t wake_turn_ GUARDED_BY(mu_) = 0;         // whose threads WakeWorkersLocked wakes first
  std::map<PeerId, int> depth_ GUARDED_BY(mu_);  // of each neighbour started
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
  std::set<int> open_fds_ GUARDED_BY(mu_);  // connections EndLocked wakes
  // Set by EndLocked: connects still in progress give up (a connect whose
  // SYN went unanswered held the fetch's end for its whole 5 s timeout).
  std::atomic<bool> ended_flag_{false};
  Status local_error_ GUARDED_BY(mu_);
  bool cancelled_ GUARDED_BY(mu_) = false;  // stopped on request
  uint64_t verified_bytes_ GUARDED_BY(mu_) = 0;
  // By chunk, its file (index into m_.files); by file, its chunks not yet
  // verified; by chunk, whether it was counted (options_.file_ready).
  std::vector<uint32_t> chunk_file_;
  std::vector<uint32_t> file_left_ GUARDED_BY(mu_);
  std::vector<bool> chunk_counted_ GUARDED_BY(mu_);
  void CountVerifiedLocked(uint32_t index) REQUIRES(mu_);
  bool registry_failing_ = false;  // only the Run thread asks the registry
  std::atomic<int> receiving_{0};  // chunks arriving now, over every connection
  // Per chunk, who records it (TakeRecord: kNobody, kWritten, kHeld), changed
  // under the chunk's stripe of record_mu_, which a copy being written also
  // holds while it writes a piece: once a held copy has won, no piece of
  // another copy lands over it.
  enum Recorder : uint8_t { kNobody, kWritten, kHeld };
  static constexpr size_t kRecordStripes = 64;
  Mutex& RecordMu(uint32_t index) { return record_mu_[index % kRecordStripes]; }
  Mutex record_mu_[kRecordStripes];
  std::unique_ptr<std::atomic<uint8_t>[]> recorder_;
  std::atomic<uint64_t> held_bytes_{0};  // in held copies now
  Mutex zero_mu_;
  std::map<uint64_t, std::string> zero_digests_ GUARDED_BY(zero_mu_);
};

}  // namespace seedd
