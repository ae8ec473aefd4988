// The daemon's state (Daemon::Rep), shared by daemon.cc (Create, Start, Stop)
// and daemon_status.cc (what /status reports).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "daemon/admin_server.h"
#include "daemon/compile_cache_plane.h"
#include "daemon/fleet_agent.h"
#include "daemon/usage_watch.h"
#include "kinds/autotune/flashinfer_cache.h"
#include "kinds/weights/net/registry.h"
#include "kinds/weights/weight_shards_kind.h"
#include "origins/origin.h"
#include "seedd/daemon.h"

namespace seedd {

struct Daemon::Rep {
  DaemonOptions options_;
  std::unique_ptr<SeedTransport> transport_;
  std::shared_ptr<FlashInferWarmupCache> autotune_;
  std::vector<std::shared_ptr<ArtifactStore>> shared_;  // the --store list, in order
  std::shared_ptr<WeightServer> weights_;               // null when no model is served or pulled
  SeedablePtr weight_shards_;                           // null likewise
  WeightInstallOptions weight_install_;                 // how --pull installs what it pulls
  std::shared_ptr<DaemonCompileCachePlane> compile_plane_;  // null likewise
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<TokenRing> tokens_;        // shared with the transport and the pulls
  std::shared_ptr<SwarmRegistry> registry_;  // null without --registry
  // Origin models fetched for the fleet by another daemon: NAME@ROOT and holders.
  std::vector<std::pair<std::string, std::vector<HostPort>>> origin_pulls_;
  // Origin models fetched at start together with the fleet (origin_models.h).
  struct FleetFetch {
    std::string name, url;
    OriginModel model;
  };
  std::vector<FleetFetch> fleet_fetches_;
  BuildOptions weight_build_;                     // how served models are indexed
  std::unique_ptr<RegistryAnnouncer> announcer_;  // while serving, with a registry
  std::unique_ptr<FleetAgent> fleet_;             // likewise: status and preheat requests
  // Pulls started by preheat requests, joined by Stop.
  Mutex preheat_mu_;
  std::vector<std::thread> preheats_ GUARDED_BY(preheat_mu_);
  std::map<std::string, std::string> preheat_of_ GUARDED_BY(preheat_mu_);  // model -> request
  std::shared_ptr<PullBoard> pulls_;          // the pulls' progress, for /status
  std::shared_ptr<const TrustedKeys> trust_;  // null without --trust-key
  struct WarmupRecord {
    std::string kind, state, source, error;  // state: "running", "done", "failed"
    double seconds = 0;
  };
  void RecordWarmup(WarmupRecord record);
  mutable Mutex warmups_mu_;
  std::vector<WarmupRecord> warmups_ GUARDED_BY(warmups_mu_);
  std::shared_ptr<UsageWatch> usage_;  // what the warmups installed, watched (null: nothing to)
  std::optional<HostPort> bound_;      // the D2D listener, once Start bound it
  std::unique_ptr<AdminServer> admin_;
  std::atomic<bool> ready_{false};
  bool stopped_ = false;
};

}  // namespace seedd
