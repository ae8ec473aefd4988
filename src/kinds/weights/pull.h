// The one pull pipeline: the manifest from the sources, checked, then the
// bytes, in rounds retried while the sources are down. seedctl pull, the
// library's and the Python package's PullModel (a model into a directory) and
// the daemon's --pull (a model into its cache, relayed while it lands) all run
// it; they differ only in where the manifest is installed and how persistent
// they are.
//
// Thread safety: RunPull is self-contained; its hooks run on the caller's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kinds/weights/files/manifest.h"
#include "seedd/seed_config.h"
#include "seedd/signing.h"
#include "seedd/status.h"
#include "seedd/tls.h"
#include "seedd/tokens.h"

namespace seedd {

struct PullPlan {
  std::string model;
  std::string pin;    // the root digest to accept (empty: whatever the sources serve)
  std::string relay;  // this host's relay address, announced with the request (empty: none)
  std::vector<HostPort> sources;
  std::string token;                        // sent, unless `tokens` has one
  std::shared_ptr<const TokenRing> tokens;  // the current token, after a rotation too
  std::shared_ptr<const TlsContext> tls;
  std::shared_ptr<const std::atomic<bool>> cancel;
  std::shared_ptr<const TrustedKeys> trust;  // null: signatures are not checked
  std::chrono::steady_clock::time_point deadline;
  std::string deadline_text;  // how the final error names it: "...; gave up after <this>"
  // false (a person at a terminal): a source's error answer, a version other
  // than the pin, a bad or unsigned manifest and an install's error other than
  // "every source failed" end the pull at once. true (a daemon starting
  // unattended): they are retried like a source that is down, until `deadline`.
  bool retry_refusals = false;
  // Called before each wait for the sources: why, how long, the next round's
  // number and the time left before the deadline.
  std::function<void(const std::string& why, std::chrono::milliseconds wait, int round,
                     std::chrono::milliseconds left)>
      on_retry;
  // Called once, when the first round did not install the model: Ok ends the
  // pull there (e.g. a copy pulled before is served); NotFound goes on with the
  // rounds; another error goes on and is named in the final error.
  std::function<Status()> after_first_round;
  // What a stop says when it comes before the manifest is installed or between
  // rounds (a stop during the install is the install's to say).
  std::function<Status()> stopped;
};

// Whether `m`, offered by `from` for `model`, may be installed: of that model,
// signed by a key of `trust` (when not null), the pin (when not empty).
// FailedPrecondition or PermissionDenied naming `from` and what was wrong.
Status CheckOffered(const Manifest& m, const std::string& model, const std::string& pin,
                    const TrustedKeys* trust, const std::string& from);

// Runs `plan`: each round asks the sources in order for the manifest of
// plan.model (kind weight_shards, announcing plan.relay), checks it (parsed, of
// that model, signed when plan.trust, the pin) and hands it to `install`.
// Rounds repeat (RetryRounds: 0.5 s doubling to 30 s) while no source answers or
// `install` returns Unavailable (every source failed mid-pull), and with
// plan.retry_refusals on the refusals it names. Errors: NotFound (every source
// answered "miss", never retried), FailedPrecondition (a refusal, when final),
// Unavailable (no source answered by the deadline), DeadlineExceeded (the
// install kept failing until the deadline), Cancelled, or install's own error.
Status RunPull(const PullPlan& plan, const std::function<Status(const Manifest&)>& install);

}  // namespace seedd
