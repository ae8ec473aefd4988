// The daemon's --pull: model `name` pulled from its sources when it starts
// through the one pull pipeline (kinds/weights/pull.h) into its cache, relayed
// while it lands, retried while the sources are down, or the copy pulled before
// served at once.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "kinds/weights/weight_shards_kind.h"
#include "seedd/daemon.h"

namespace seedd {

// A --pull NAME[@ROOT_DIGEST]: the name and the pin (empty: none).
std::pair<std::string, std::string> SplitPin(const std::string& pull);

// Pulls the model `pull` names (NAME[@ROOT_DIGEST]) at start. Sources may start
// later or go away and come back: while none has served the model, rounds are
// retried with capped exponential backoff and jitter until options.pull_timeout
// (a pull resumes from its journal each round). A restart whose sources are down
// serves the copy it pulled before, if unchanged, at once. `relay` is the address
// this daemon relays on (empty: none). With install.trust, a manifest, and a
// local copy, are taken only when signed by one of its keys; install.cancel
// stops the pull.
Status PullAtStart(const DaemonOptions& options, const std::string& pull, const std::string& relay,
                   const std::shared_ptr<WeightServer>& server,
                   const WeightInstallOptions& install);

}  // namespace seedd
