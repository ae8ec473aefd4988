// The weight_shards kind (the manifest on the control channel; the bytes on the
// data plane, data_plane.h), where it installs what it adopts, and the board
// where a daemon's pulls report.
//
// Thread safety: PullBoard is thread-safe; the Seedable is, as every kind.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "kinds/weights/data_plane.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/net/fetcher.h"
#include "kinds/weights/net/weight_server.h"
#include "seedd/seed_config.h"
#include "seedd/seedable.h"
#include "seedd/status.h"
#include "seedd/tokens.h"
#include "transport/tls.h"

namespace seedd {

class SwarmRegistry;

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
  std::string zone;                                 // see FetchOptions::zone
  std::shared_ptr<PullBoard> board;                 // where pulls report; may be null
  std::function<std::string(uint32_t)> digest_of;   // see FetchOptions::digest_of
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
// Installs `manifest` (checked by the caller: parsed, of its model, signed,
// pinned) as the kind's Install does: the local copy of that version when
// unchanged, else fetched from install.sources and the relays (announcing
// `relay`, empty: none) while what is verified is served; then NAME/current
// switches to it and it is served. The daemon's --pull runs this through the
// one pull pipeline (pull.h).
Status InstallPulledModel(const std::shared_ptr<WeightServer>& server,
                          const WeightInstallOptions& install, const Manifest& manifest,
                          const std::string& relay);

// Fetches `manifest` into `dir` from install.sources and the relays (announcing
// `relay`), serving what is verified so far through `server` under
// manifest.model meanwhile; the version before it in <dir>/../current lends
// the chunks it shares. Nothing is switched or recorded.
Status FetchAndRelay(const std::shared_ptr<WeightServer>& server,
                     const WeightInstallOptions& install, const Manifest& manifest,
                     const std::string& relay, const std::filesystem::path& dir);

SeedablePtr NewWeightShardsSeedable(std::shared_ptr<WeightServer> server,
                                    WeightInstallOptions install = {});

}  // namespace seedd
