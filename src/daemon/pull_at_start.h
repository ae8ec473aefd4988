// The daemon's --pull: model `name` adopted from its sources when it starts,
// retried while they are down, or the copy pulled before served at once.
#pragma once

#include <atomic>
#include <string>
#include <utility>

#include "seedd/daemon.h"

namespace seedd {

class WeightServer;

// A --pull NAME[@ROOT_DIGEST]: the name and the pin (empty: none).
std::pair<std::string, std::string> SplitPin(const std::string& pull);

// Pulls the model `pull` names (NAME[@ROOT_DIGEST]) at start. Sources may start
// later or go away and come back: while none has served the model, rounds are
// retried with capped exponential backoff and jitter until options.pull_timeout
// (a pull resumes from its journal each round). A restart whose sources are down
// serves the copy it pulled before, if unchanged, at once. `relay` is the address
// this daemon relays on (empty: none). With `trust`, a local copy is served only
// when its manifest is signed by one of its keys.
Status PullAtStart(const DaemonOptions& options, const std::string& pull, const std::string& relay,
                   Seedable& weight_shards, WeightServer& server, const std::atomic<bool>& cancel,
                   const TrustedKeys* trust);

}  // namespace seedd
