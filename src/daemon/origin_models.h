// Models a daemon serves from where they live upstream (--model NAME=oci://...,
// NAME=s3://...): fetched into <cache>/weights/origins/NAME/, every file checked
// against its upstream digest. With a registry (--registry redis://), daemons
// configured alike fetch each version from upstream once per fleet: the first to
// claim the version in the registry fetches it and publishes its root digest
// there; the others pull that root digest from the daemons holding it (and
// relay), and a claim whose holder dies lapses and is taken over.
//
// Registry keys (beside the swarms'): <prefix>seedd:origin-lease:<version hex>
// (the fetching daemon's claim, 30 s, renewed every 10 s while it fetches) and
// <prefix>seedd:origin-root:<version hex> (the root digest of what it fetched,
// one day).
//
// Thread safety: functions of their arguments; called from Daemon::Create.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "seedd/daemon.h"

namespace seedd {

class SwarmRegistry;

// What to do with one origin model.
struct OriginModelPlan {
  // Serve the model from this directory (fetched here, or held already)...
  std::optional<std::filesystem::path> dir;
  // ...then tell the fleet its root digest (set when this daemon fetched it for
  // the fleet).
  std::function<void(const std::string& root)> publish;
  // Or pull `pull` (NAME@ROOT) at start from `sources`, which hold it.
  std::string pull;
  std::vector<HostPort> sources;
};

// `registry` may be null: the model is fetched from upstream here. `cancel`
// ends a wait for another daemon's fetch.
Result<OriginModelPlan> PlanOriginModel(const DaemonOptions& options, const std::string& name,
                                        const std::string& url,
                                        const std::shared_ptr<SwarmRegistry>& registry,
                                        const std::shared_ptr<std::atomic<bool>>& cancel);

}  // namespace seedd
