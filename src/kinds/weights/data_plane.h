// The weight data plane. A connection whose authenticated request is
// {"kind": "weight_data", "root_digest": H, "relay": "HOST:PORT" (optional),
// "session": S (with relay: a fetch's random id; a new one drops its old claims)} is
// answered with one JSON frame ({"status": "ok", "chunks": N} or an error) and
// then carries binary records (integers big-endian):
//   request  (8 bytes):  magic, chunk index (u32); pipelined. Magic is
//     "SDRQ"  send the chunk;
//     "SDRN"  send it unless a relay of this swarm was already sent it (status 2);
//     "SDRW", "SDNW"  the same two from a fetcher with no chunk arriving: it may
//             wait in line for an upload slot (WeightServer::TakeSlot). The
//             "ok" frame says "wait_in_line": true when the server takes them;
//     "SDST"  the server's state (index ignored): which chunks it has, its peers;
//     "SDWT"  the chunks it verified since cursor `index` (from a "SDST" or an
//             earlier "SDWT"), answered once it has one or after kWatchWait.
//   response (24 bytes): "SDCH" (or "SDST", "SDHV"), chunk index (u32), status
//     (u32), aux (u32), length (u64); then `length` bytes. Status is
//     0  ok: `length` raw bytes of the chunk follow, sent with sendfile;
//     1  not here (a relay that has not verified it yet, or no such chunk);
//     2  claimed: a relay was sent it; aux = ms since that send completed
//        (0xffffffff while it is still being sent): fetch it from the peers;
//     3  a hole: the chunk is all zeros, no bytes follow;
//     4  busy: the server sends upload_slots chunks to relays already; ask
//        another peer, and this one not before aux ms.
//   The "SDST" body is the have bitmap (ceil(N/8) bytes, chunk i is bit
//   0x80 >> (i % 8) of byte i / 8) followed by at most max_peers_listed peers
//   that announced themselves for this root digest (half the relays holding
//   the most chunks this server sent, half at random), one HOST:PORT per line; its aux is the
//   cursor to watch from. The "SDHV" index is the next cursor, aux kHaveComplete when the server
//   has every chunk, and the body the new chunks' indexes (u32 each).
// Bytes never travel inside JSON; every chunk is verified by the fetcher.
//
// Thread safety: WeightServer serves many connections at once and Publish may be
// called meanwhile; ChunkSet is lock-free; FetchModel is self-contained.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/rate_limiter.h"
#include "common/unique_fd.h"
#include "kinds/weights/chunk_set.h"
#include "kinds/weights/manifest.h"
#include "kinds/weights/model_index.h"
#include "kinds/weights/records.h"
#include "seedd/seed_config.h"
#include "seedd/seedable.h"
#include "seedd/status.h"
#include "seedd/tokens.h"
#include "transport/tls.h"

namespace seedd {

class SwarmRegistry;

inline constexpr std::string_view kWeightShardsKind = "weight_shards";
inline constexpr std::string_view kWeightDataKind = "weight_data";

struct ServedModel {
  Manifest manifest;
  std::filesystem::path dir;  // the bytes are read below it, never through a link
  // The chunks that may be served; null when the model is complete. A daemon
  // that is fetching a model serves what it has verified so far.
  std::shared_ptr<const ChunkSet> available;
  // By manifest path: where the file's bytes are below `dir` and their size and
  // mtime when indexed. A file whose size or mtime changed since is not served
  // (its chunks' digests no longer describe it). A file not listed is read at its
  // manifest path, unchecked (a staging copy still being written).
  std::map<std::string, IndexedFile, std::less<>> files;
  // `dir`, opened when published: paths resolve below what was there then, even
  // if `dir` is renamed (a staging directory committed) or a link on its path is
  // swapped.
  std::shared_ptr<const UniqueFd> root;
  // The manifest as JSON text with an empty "sources", split where the sources
  // go: serialized once when published, handed out per request. Set by Publish.
  struct Text {
    std::string head;  // ... "sources":[
    std::string tail;  // ] ...
  };
  std::shared_ptr<const Text> text;
  // Fetched from peers (a --pull), not served from a directory of this host's:
  // what is sent from it is relayed (metrics).
  bool pulled = false;
};

// A model as indexed, ready to serve.
ServedModel ServeIndexed(IndexedModel index);

// The data plane's bounds on its peers.
struct WeightServerOptions {
  std::chrono::milliseconds idle_timeout{60000};  // between requests
  // Each response record and its bytes. The floor is low: a fetcher that reads
  // slowly because its link is shared by many transfers is served; one that
  // reads nothing holds a stream thread until the deadline.
  TransferDeadline send{std::chrono::milliseconds(10000), 16 * 1024};
  // The relays a swarm (one root digest) remembers: each until it has not been
  // heard from for relay_ttl, at most max_relays at once (more are not listed).
  std::chrono::milliseconds relay_ttl{10000};
  size_t max_relays = 1024;
  // Relays listed in one state response (a random sample of those remembered):
  // a fetcher keeps a bounded set of neighbours, so it needs only a few names.
  size_t max_peers_listed = 32;
  // Chunks sent at once to fetchers that relay (a swarm); more are answered
  // "busy", and so is a relay that is being sent a chunk already (one that stops
  // reading holds one slot, not all). A chunk sent at a quarter of the uplink
  // reaches its fetcher, which passes it on, four times sooner than one sent at a
  // sixteenth (8 targets x 1 GiB at 500 Mbit/s: 1.07x one target's time with 4
  // slots, 1.15x with 2). 0: no limit. Fetchers that do not relay are not
  // limited.
  int upload_slots = 4;
  std::chrono::milliseconds busy_retry{50};
  // How long a relay's request waits for the relay's own send to end before it
  // is answered "busy".
  std::chrono::milliseconds own_slot_wait{2000};
  // Bytes per second this server sends of a model that this host is itself still
  // pulling (0: no limit). Set a little below the host's uplink: a full uplink
  // queues the host's own chunk requests and TCP acknowledgements behind its
  // uploads, and its own pull slows to a fraction of its downlink. Once the
  // pull completes, the model is served at full speed.
  uint64_t relay_upload_rate = 0;
};

class WeightServer {
 public:
  explicit WeightServer(std::vector<ServedModel> models, WeightServerOptions options = {});
  // The stream handler of kind weight_data. REQUIRES: `request` authenticated.
  void Serve(Conn& conn, const Json& request);
  // Serves `model` from now on, in place of any model of the same name.
  void Publish(ServedModel model);
  std::shared_ptr<const ServedModel> FindModel(std::string_view name) const;
  // Every model served now, by name.
  std::vector<std::shared_ptr<const ServedModel>> Models() const;
  // The relays that announced themselves for `root` recently, but `except`: at
  // most `limit`, half of them those holding the most chunks this server sent
  // (they complement any asker), the rest at random.
  std::vector<std::string> Peers(const std::string& root, const std::string& except,
                                 size_t limit = SIZE_MAX);
  // How many relays a state response or a manifest lists at most.
  size_t max_peers_listed() const { return options_.max_peers_listed; }
  // Chunk bytes sent so far, over every connection.
  uint64_t bytes_served() const { return bytes_served_.load(std::memory_order_relaxed); }
  // Chunk requests that waited in line for an upload slot and got one.
  uint64_t waited_in_line() const { return waited_in_line_.load(std::memory_order_relaxed); }
  // Data connections being served now.
  int connections() const { return connections_.load(std::memory_order_relaxed); }
  // Manifests serialized so far (once per model version published).
  uint64_t manifests_serialized() const {
    return manifests_serialized_.load(std::memory_order_relaxed);
  }

 private:
  struct Claim {
    int holder = -1;  // peer id; -1: not claimed
    bool sending = false;
    std::chrono::steady_clock::time_point sent_at;
  };
  struct Swarm {
    std::map<std::string, int> ids;                           // peer address → id
    std::vector<std::string> addrs;                           // by id
    std::vector<std::chrono::steady_clock::time_point> seen;  // by id
    std::vector<std::string> sessions;                        // by id
    std::vector<Claim> claims;                                // by chunk
    std::vector<uint32_t> held;  // by id: chunks whose claim it holds, as of held_at
    std::chrono::steady_clock::time_point held_at{};
  };
  std::shared_ptr<const ServedModel> FindRoot(const std::string& root) const;
  int Announce(const std::string& root, const std::string& relay, const std::string& session,
               size_t chunks);
  // Forgets the relays of `swarm` not heard from for relay_ttl. REQUIRES: mu_ held.
  void Expire(Swarm& swarm, std::chrono::steady_clock::time_point now);
  // For "SDRN": 0 and a claim for `peer` (when >= 0), or 2 and the aux value.
  uint32_t ClaimChunk(const std::string& root, int peer, uint32_t index, uint32_t* aux);
  void EndSend(const std::string& root, int peer, uint32_t index, bool complete);
  void ServeRequests(Conn& conn, const std::string& root, std::shared_ptr<const ServedModel> model,
                     int peer, const std::string& relay, const std::string& session);
  // Answers "SDST" (state) or "SDWT" (watch from `cursor`); false when the
  // connection is to close.
  bool ServeState(Conn& conn, const ServedModel& model, bool watch, uint32_t cursor,
                  const std::string& relay);
  // An upload slot for a chunk to `relay`: false when every slot is taken, or
  // `relay` holds one still after own_slot_wait (a relay that stops reading
  // holds one slot, not all). A `waiting` relay (nothing arrives at it) that was
  // turned away within two busy_retry waits in line, up to own_slot_wait, for the
  // next slot, ahead of the next request of a relay whose send just ended:
  // otherwise those holding slots keep them with requests sent ahead, and a
  // newcomer is turned away for as long as they fetch (simulated, 1,000 hosts
  // with 10% joining late: late joiners p99 1.43x the bound, 1.24x in line).
  // At most upload_slots wait in line.
  bool TakeSlot(const std::string& relay, bool waiting);
  void ReleaseSlot(const std::string& relay);
  // Logs once per model file that changed since it was indexed.
  void WarnChanged(const ServedModel& model, const std::string& file, const std::string& why);

  const WeightServerOptions options_;
  // options_.relay_upload_rate's bucket; null without one.
  const std::unique_ptr<RateLimiter> relay_limiter_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ServedModel>, std::less<>> by_name_;  // GUARDED_BY
  std::map<std::string, std::shared_ptr<const ServedModel>> by_root_;  // GUARDED_BY(mu_)
  std::map<std::string, Swarm> swarms_;                                // GUARDED_BY(mu_)
  std::set<std::string> warned_;                                       // GUARDED_BY(mu_)
  std::atomic<uint64_t> bytes_served_{0};
  std::atomic<int> connections_{0};
  std::atomic<uint64_t> waited_in_line_{0};
  std::atomic<uint64_t> manifests_serialized_{0};
  std::mutex slots_mu_;
  std::condition_variable slot_freed_;
  int relay_sends_ = 0;                 // GUARDED_BY(slots_mu_): chunks being sent to relays
  std::map<std::string, int> sending_;  // GUARDED_BY(slots_mu_): by relay, those it holds
  // GUARDED_BY(slots_mu_): relays answered "busy" recently, and when.
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> turned_away_;
  std::deque<uint64_t> line_;  // GUARDED_BY(slots_mu_): tickets of the waiting, first first
  uint64_t next_ticket_ = 0;   // GUARDED_BY(slots_mu_)
};

// Where the weight_shards kind installs what it adopts, and from where.
// The pulls of a daemon, running and done, for /status and the
// seedd_pull_progress_ratio metric. Thread-safe.
class PullBoard {
 public:
  struct Entry {
    std::string model;
    std::string root_digest;
    std::string state;  // "pulling", "done" or "failed"
    uint64_t total_bytes = 0;
    uint64_t verified_bytes = 0;  // resumed ones included
    uint64_t resumed_bytes = 0;   // verified by an earlier run
    size_t seeds = 0;             // sources that sent a verified chunk
    size_t relays = 0;            // relays that did
    double seconds = 0;           // since the pull started (to its end, once ended)
    std::string error;            // why it failed
  };
  void Started(const Manifest& m);
  void Progress(const std::string& model, uint64_t verified, uint64_t resumed, size_t seeds,
                size_t relays);
  void Finished(const std::string& model, const Status& status);
  std::vector<Entry> Snapshot() const;

 private:
  mutable std::mutex mu_;
  struct Running {
    Entry entry;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<Running> pulls_;  // GUARDED_BY(mu_): the latest pull of each model
};

struct WeightInstallOptions {
  std::filesystem::path cache_dir;  // models land in <cache_dir>/weights/<NAME>/<root digest>
  std::vector<HostPort> sources;    // the seeds; none: Install refuses (a serving-only daemon)
  std::string token;
  std::shared_ptr<const TokenRing> tokens;          // see FetchOptions::tokens
  std::shared_ptr<const std::atomic<bool>> cancel;  // see FetchOptions::cancel
  size_t max_neighbours = 16;                       // see FetchOptions::max_neighbours
  std::shared_ptr<SwarmRegistry> registry;          // see FetchOptions::registry
  bool verify_sha256 = false;                       // see FetchOptions::verify_sha256
  std::shared_ptr<const TlsContext> tls;            // see FetchOptions::tls
  std::shared_ptr<PullBoard> board;                 // where pulls report; may be null
};

// The weight_shards kind: request {"model": NAME, "fingerprint": HEX (optional),
// "relay": HOST:PORT (optional)}, payload the model's manifest whose "sources"
// list the relays of the same root digest. The target validates the manifest;
// Install (ctx {"model": NAME, "relay": HOST:PORT (optional)}) then fetches the
// bytes on the data plane from `install.sources` and the relays, serving the
// chunks verified so far through `server` meanwhile, commits the model under
// <cache_dir>/weights/NAME/<root digest> (see local_copy.h; a copy there is
// reused only when unchanged since its pull), switches NAME/current to it
// atomically and serves it.
SeedablePtr NewWeightShardsSeedable(std::shared_ptr<WeightServer> server,
                                    WeightInstallOptions install = {});

struct FetchOptions {
  std::string token;
  // Connect with TLS, verifying the sources and relays against its CA; null:
  // plain TCP.
  std::shared_ptr<const TlsContext> tls;
  // When set, the token sent is its first, read at each new connection (a
  // rotation reaches a pull that is running); else `token`.
  std::shared_ptr<const TokenRing> tokens;
  int connections_per_source = 4;  // to each seed (a source given by the caller)
  int pipeline = 4;                // chunk requests in flight per seed connection
  // The same to a relay. One: a relay sends a few chunks at once (its upload
  // slots), and a request queued behind another at one relay is a chunk that
  // another relay with a free slot could be sending (simulated with swarm_sim:
  // 100 hosts p99 5.18x the bound with 4, 2.01x with 1).
  int peer_pipeline = 1;
  int connections_per_peer = 1;  // to each relay learnt from the manifest or a state
  // Chunk requests in flight to relays in all (0: no bound; a seed's are not
  // counted). Matches the servers' upload slots: a downlink split among many
  // senders makes each transfer slow and holds their few slots for longer
  // (simulated, 1,000 hosts: p99 1.57x the bound unbounded, 1.33x with 4).
  int swarm_requests = 4;
  // Requests beyond swarm_requests while this host holds fewer chunks than its
  // relay neighbours on average: a host that fell behind takes a larger share of
  // their uplinks, and the last host of a fleet comes in sooner (simulated, 16
  // hosts on 50 Mbit/s links with 20 ms latency: the last at 1.27-1.38x the
  // bound without, 1.19-1.23x with 2).
  int swarm_catch_up = 2;
  std::chrono::milliseconds timeout{30000};  // connecting, the handshake, a state response
  // A source that refuses connections for capacity (its data plane is full) is
  // tried again as it says, for this long before each refusal counts as a
  // failure.
  std::chrono::milliseconds capacity_patience{120000};
  // Neighbours (seeds and relays) fetched from at once; the other relays learnt
  // wait as candidates and replace those dropped. Each neighbour costs one watch
  // connection (what it newly has) and its data connections.
  size_t max_neighbours = 16;
  // How often a seed is asked for more relays while the neighbour set has room.
  std::chrono::milliseconds state_interval{500};
  // A source given by name that resolves to several addresses (a Kubernetes
  // headless service) is a seed at each address; names are resolved again this
  // often while the fetch runs, and new addresses join as seeds.
  std::chrono::milliseconds resolve_interval{30000};
  // Where else to find relays of the root digest (registry.h): asked at the
  // start and then every second while the neighbour set has room.
  std::shared_ptr<SwarmRegistry> registry;
  // The relays that announced themselves to this host's own server for the
  // root digest (they fetch from here, so they hold chunks of it too), as
  // HOST:PORT: taken as candidates while the neighbour set has room, asked
  // every 50 ms. Relays that start together find each other within moments
  // of the first connection between them, not at a seed's next state answer.
  std::function<std::vector<std::string>()> announced;
  // Each chunk from a relay, from its request reaching the front of the
  // connection's queue to its last byte. A relay that misses it is dropped at once.
  TransferDeadline chunk_deadline;
  // The same for a seed (a source the caller gave), with a floor low enough that
  // a seed whose link many fetchers share is not taken for one that stalls (16
  // fetchers at 50 Mbit/s missed the relays' floor). Three misses drop it.
  TransferDeadline seed_deadline{std::chrono::milliseconds(10000), 16 * 1024};
  // A chunk a seed says another fetcher claimed (it is being sent there) is
  // asked of the seed plainly once the claim is older than the chunk's length at
  // this rate (5 s to 120 s): on a congested seed an honest claim takes that
  // long, and a claim holder that stalls is not waited for beyond it.
  uint64_t claim_floor_rate = 64 * 1024;  // bytes per second
  // Also check every file's SHA-256 against the manifest before committing (for
  // those who distrust their peers; costs one more read of the model).
  bool verify_sha256 = false;
  // This fetcher's own data-plane address when it serves what it fetches (a
  // relay): announced to the sources, and seeds are then asked one chunk at a
  // time per connection so that each chunk leaves the seed about once.
  std::string relay;
  // When set (size = the manifest's chunk count), verified chunks are added as
  // they land (a server publishes it to relay them).
  std::shared_ptr<ChunkSet> verified;
  // Called from fetch threads with the bytes verified so far, with the fetch's
  // lock held (FetchStats may be read there).
  std::function<void(uint64_t verified_bytes)> progress;
  // Called once the staging directory is ready, before any chunk is fetched (a
  // server publishes it to relay the chunks verified there).
  std::function<void(const std::filesystem::path& staging)> staged;
  // Set to stop the fetch: it returns Cancelled within about 50 ms, the staging
  // directory and its journal kept for a rerun.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // `into` may hold other files: they are replaced by the model (see FetchModel).
  bool replace = false;
};

// `into` without "." and ".." components or a trailing '/'.
std::filesystem::path NormalizeDestination(const std::filesystem::path& into);

// Where FetchModel stages a new `into`: a hidden directory beside it.
std::filesystem::path StagingDir(const std::filesystem::path& into);

// Fetches the files of `manifest` into `into` from the seeds `sources` and from
// the relays listed in the manifest or learnt from the sources' states,
// preferring relays that have a chunk over the seeds: staged with a journal of
// verified chunks (a rerun fetches only what is missing), each chunk's XXH3-128
// checked as it lands and refetched (from another source when there is one) on
// a mismatch, a source that keeps failing dropped, free space checked first,
// and moved into place only when every chunk is verified. `into` may be:
//  - absent: staged in StagingDir(into), renamed into place;
//  - an existing empty directory (a volume's mount point): staged in
//    <into>/.seedd-staging, its entries renamed into `into`;
//  - a directory holding exactly this version (every file's chunks match the
//    manifest): Ok with stats->up_to_date, nothing moved;
//  - anything else: AlreadyExists before any byte moves, unless
//    options.replace: then a directory is swapped for the staged one atomically
//    (renameat2 RENAME_EXCHANGE) and a mount point's entries are replaced.
Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into, const FetchOptions& options,
                  FetchStats* stats = nullptr);

}  // namespace seedd
