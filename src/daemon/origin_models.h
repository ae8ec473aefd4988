// Models a daemon serves from where they live upstream (--model NAME=oci://...,
// NAME=s3://...): fetched into <cache>/weights/origins/NAME/, every file checked
// against its upstream digest.
//
// With a registry (--registry redis://), daemons configured alike fetch each
// version from upstream about once per fleet, file by file, and serve each file
// as soon as it is complete:
//  - each file is claimed in the registry by the first daemon to reach it while
//    one of the fleet's 2 upstream slots is free (few files at once: the first
//    are complete, and swarmed, early); that daemon fetches it from upstream,
//    checks it against its upstream digest, serves it at once as a one-file
//    model of its own ("part") and publishes the part's manifest;
//  - the others pull that part from the daemons holding it (relaying to each
//    other as any pull does), check the file against its upstream digest too,
//    and serve it on;
//  - a file over --origin-range-mib travels as pieces of that size instead,
//    each claimed, fetched from upstream (a ranged GET) and published as a part
//    of its own, so the fleet pulls a large file's first pieces while its last
//    are upstream; a piece is served while it lands (its chunk digests listed
//    in the registry as they are computed) and pulled so by the others; every
//    daemon puts the pieces together and checks the whole file against its
//    upstream digest, then serves the pieces from it;
//  - a claim whose daemon died lapses and the file is taken over;
//  - once a daemon holds every file it serves the model (the same files give the
//    same root digest everywhere) and publishes that root digest: a daemon
//    starting later pulls the whole version from the daemons holding it.
//
// Registry keys (beside the swarms'), <hex> the version's:
//   <prefix>seedd:origin-lease:<hex>:<file>  a file's fetch from upstream, 30 s,
//                                            renewed every 10 s while it runs
//   <prefix>seedd:origin-slot:<hex>:<0|1>    an upstream slot, held likewise
//   <prefix>seedd:origin-part:<hex>:<file>   {"manifest": the part's manifest,
//                                            "expected": the file's upstream
//                                            digest}, one day
//   <prefix>seedd:origin-lease|part:<hex>:<file>.<piece>  the same for a piece,
//                                            its record with "offset"
//   <prefix>seedd:origin-live:<hex>:<file>.<piece>  {"root", "holder", "offset",
//                                            "length"} while the piece lands
//   <prefix>seedd:origin-digests:<hex>:<file>.<piece>  its chunk digests so far
//                                            (a list); see docs/protocol.md
//   <prefix>seedd:origin-root:<hex>          the model's root digest, one day
// <file> is the file's index in the upstream's listing (the same on every daemon
// for one version).
//
// Thread safety: PlanOriginModel from Daemon::Create; FetchWithFleet from
// Daemon::Start, its parts served and pulled from its fetching threads.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kinds/weights/files/model_index.h"
#include "kinds/weights/weight_shards_kind.h"
#include "origins/origin.h"
#include "seedd/daemon.h"

namespace seedd {

class SwarmRegistry;
class WeightServer;

// What to do with one origin model.
struct OriginModelPlan {
  // Serve the model from this directory (fetched here, or held already)...
  std::optional<std::filesystem::path> dir;
  // Or pull `pull` (NAME@ROOT) at start from `sources`, which hold it...
  std::string pull;
  std::vector<HostPort> sources;
  // Or fetch this version at start together with the fleet (FetchWithFleet),
  // once the data plane listens.
  std::optional<OriginModel> fleet;
};

// `registry` may be null: the model is fetched from upstream here, now.
Result<OriginModelPlan> PlanOriginModel(const DaemonOptions& options, const std::string& name,
                                        const std::string& url,
                                        const std::shared_ptr<SwarmRegistry>& registry);

// What FetchWithFleet needs of the daemon: its server (parts are served there),
// how it pulls (install: token, TLS, cancel...), how it indexes, and the
// address it relays at (empty: parts are not announced, and only pulled).
struct FleetContext {
  std::shared_ptr<SwarmRegistry> registry;
  std::shared_ptr<WeightServer> server;
  WeightInstallOptions install;
  BuildOptions build;
  std::string relay;
};

// Fetches `model` (of `url`) with the fleet as described above and returns the
// directory holding it, every file checked against its upstream digest.
Result<std::filesystem::path> FetchWithFleet(const DaemonOptions& options, const std::string& name,
                                             const std::string& url, const OriginModel& model,
                                             const FleetContext& fleet);

// Tells the fleet that `version` (an upstream version) is served as `root`.
void PublishOriginRoot(SwarmRegistry& registry, const std::string& name, const std::string& version,
                       const std::string& root);

}  // namespace seedd
