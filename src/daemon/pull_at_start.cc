#include "daemon/pull_at_start.h"

#include "kinds/weights/files/local_copy.h"
#include "kinds/weights/pull.h"
#include "kinds/weights/weight_shards_kind.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

// Serves the copy of `name` pulled before, if it is unchanged since (and is
// `pin` when given), under the manifest recorded with it. NotFound when there
// is none.
Status ServeLocalCopy(const DaemonOptions& options, const std::string& name, const std::string& pin,
                      WeightServer& server, const TrustedKeys* trust) {
  const std::filesystem::path base = options.cache_dir / "weights" / name;
  std::error_code ec;
  const std::filesystem::path version = std::filesystem::read_symlink(base / "current", ec);
  if (ec || !version.has_filename() || version.filename() != version) {
    return Status::NotFound("no local copy");
  }
  if (!pin.empty() && version.string() != pin) return Status::NotFound("no local copy of the pin");
  Result<ServedModel> local = LoadLocalCopy(base / version, version.string());
  if (!local.ok()) {
    return Status::Unavailable("the local copy " + (base / version).string() +
                               " cannot be served: " + local.status().message());
  }
  if (Status signed_by = CheckManifestSigned(local->manifest, trust,
                                             "the local copy " + (base / version).string());
      !signed_by.ok()) {
    return Status::Unavailable(signed_by.message());
  }
  Logger().warn("Cannot pull model {}; serving the local copy {} (root digest {})", name,
                (base / version).string(), local->manifest.root_digest);
  server.Publish(std::move(*local));
  return Status::Ok();
}

// Whether a pull of this model left a journal of verified chunks (in a
// staging directory under `base`, at most two levels down).
bool HasJournal(const std::filesystem::path& base) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(base, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() >= 2) it.disable_recursion_pending();
    // A header of 76 bytes, then one record per verified chunk (staging.cc).
    if (it->path().filename() == ".seedd-journal" && it->file_size(ec) > 76 && !ec) return true;
  }
  return false;
}

}  // namespace

std::pair<std::string, std::string> SplitPin(const std::string& pull) {
  const size_t at = pull.find('@');
  if (at == std::string::npos) return {pull, ""};
  return {pull.substr(0, at), pull.substr(at + 1)};
}

Status PullAtStart(const DaemonOptions& options, const std::string& pull, const std::string& relay,
                   const std::shared_ptr<WeightServer>& server,
                   const WeightInstallOptions& install) {
  if (!options.seed.source.has_value()) return Status::InvalidArgument("needs --source");
  const auto [name_text, pin_text] = SplitPin(pull);
  const std::string& name = name_text;  // bindings a lambda can capture (clang 14)
  const std::string& pin = pin_text;
  PullPlan plan;
  plan.model = name;
  plan.pin = pin;
  plan.relay = relay;
  plan.sources = {*options.seed.source};
  plan.sources.insert(plan.sources.end(), options.more_sources.begin(), options.more_sources.end());
  plan.token = options.seed.token;
  plan.tokens = options.transport.tokens;  // the current token, after a rotation too
  plan.tls = options.transport.tls;
  plan.cancel = install.cancel;  // a stop ends the manifest's exchange too
  plan.trust = install.trust;
  plan.deadline = std::chrono::steady_clock::now() + options.pull_timeout;
  plan.deadline_text = "--pull-timeout (" + std::to_string(options.pull_timeout.count()) + " s)";
  plan.retry_refusals = true;  // unattended: a source may be fixed or updated meanwhile
  plan.on_retry = [&](const std::string& why, std::chrono::milliseconds wait, int round,
                      std::chrono::milliseconds left) {
    Logger().warn("Model {}: {}; retrying in {:.1f} s (round {}; giving up in {} s)", name, why,
                  std::chrono::duration<double>(wait).count(), round,
                  std::chrono::duration_cast<std::chrono::seconds>(left).count());
  };
  plan.after_first_round = [&] {
    return ServeLocalCopy(options, name, pin, *server, install.trust.get());
  };
  plan.stopped = [&] {
    return Status::Cancelled(
        HasJournal(options.cache_dir / "weights" / name)
            ? "the pull was stopped; its verified chunks are kept and the next start resumes "
              "from them"
            : "the pull was stopped before any chunk was verified");
  };
  return RunPull(plan, [&](const Manifest& manifest) {
    return InstallPulledModel(server, install, manifest, relay);
  });
}

}  // namespace seedd
