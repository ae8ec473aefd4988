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
// The serving side is weight_server.h, the fetching side fetcher.h.
//
// Thread safety: WeightServer serves many connections at once and Publish may be
// called meanwhile; ChunkSet is lock-free; FetchModel is self-contained.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "kinds/weights/fetcher.h"
#include "kinds/weights/manifest.h"
#include "kinds/weights/weight_server.h"
#include "seedd/seed_config.h"
#include "seedd/seedable.h"
#include "seedd/status.h"
#include "seedd/tokens.h"
#include "transport/tls.h"

namespace seedd {

class SwarmRegistry;

inline constexpr std::string_view kWeightShardsKind = "weight_shards";
inline constexpr std::string_view kWeightDataKind = "weight_data";

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
  mutable Mutex mu_;
  struct Running {
    Entry entry;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<Running> pulls_ GUARDED_BY(mu_);  // the latest pull of each model
};

// Where the weight_shards kind installs what it adopts, and from where.
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
  // Only manifests signed by one of these keys are installed; null: any.
  std::shared_ptr<const TrustedKeys> trust;
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

}  // namespace seedd
