#include "daemon/pull_at_start.h"

#include "common/backoff.h"
#include "kinds/weights/files/local_copy.h"
#include "kinds/weights/weight_shards_kind.h"
#include "seedd/logging.h"

namespace seedd {
namespace {

// One round of adopting model `name` (kind weight_shards) from the first source
// that has it: its Install fetches the bytes from every source and the relays,
// serving what is verified so far meanwhile (as a relay when `relay` is set).
AdoptOutcome AdoptOnce(const DaemonOptions& options, const std::vector<HostPort>& sources,
                       const Json& ctx, Seedable& weight_shards, std::string* why) {
  AdoptOutcome outcome = AdoptOutcome::kNoResponse;
  for (const HostPort& source : sources) {
    SeedConfig client;
    client.source = source;
    client.token = options.seed.token;
    TransportOptions sends;
    sends.tokens = options.transport.tokens;  // the current token, after a rotation too
    sends.tls = options.transport.tls;
    sends.cancel = options.transport.cancel;  // a stop ends the manifest's exchange too
    Result<std::unique_ptr<SeedTransport>> transport = SeedTransport::Create({}, client, sends);
    if (!transport.ok()) return AdoptOutcome::kNoResponse;
    std::string said;
    outcome = (*transport)->Adopt(weight_shards, ctx, &said);
    if (!said.empty()) *why = source.ToString() + ": " + said;
    if (outcome == AdoptOutcome::kAdopted) return outcome;
    if (outcome == AdoptOutcome::kRejected) break;  // the bytes come from every source at once
  }
  return outcome;
}

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
                   Seedable& weight_shards, WeightServer& server, const std::atomic<bool>& cancel,
                   const TrustedKeys* trust) {
  if (!options.seed.source.has_value()) return Status::InvalidArgument("needs --source");
  std::vector<HostPort> sources = {*options.seed.source};
  sources.insert(sources.end(), options.more_sources.begin(), options.more_sources.end());
  const auto [name_text, pin] = SplitPin(pull);
  const std::string& name = name_text;  // a binding a lambda can capture (clang 14)
  Json ctx = {{"model", name}};
  if (!pin.empty()) ctx["root_digest"] = pin;
  if (!relay.empty()) ctx["relay"] = relay;
  RetryRounds rounds(std::chrono::steady_clock::now() + options.pull_timeout,
                     [&] { return cancel.load(); });
  std::string local_problem;
  for (;;) {
    std::string said;
    const AdoptOutcome outcome = AdoptOnce(options, sources, ctx, weight_shards, &said);
    if (outcome == AdoptOutcome::kAdopted) return Status::Ok();
    if (cancel.load()) {
      return Status::Cancelled(
          HasJournal(options.cache_dir / "weights" / name)
              ? "the pull was stopped; its verified chunks are kept and the next start "
                "resumes from them"
              : "the pull was stopped before any chunk was verified");
    }
    if (outcome == AdoptOutcome::kMiss) {
      return Status::NotFound("no source serves model '" + name + "'");
    }
    if (rounds.round() == 1) {
      Status local = ServeLocalCopy(options, name, pin, server, trust);
      if (local.ok()) return local;
      if (local.code() != StatusCode::kNotFound) local_problem = "; " + local.message();
    }
    const std::string why = outcome == AdoptOutcome::kRejected ? "the pull failed (" + said + ")"
                            : outcome == AdoptOutcome::kNotOk
                                ? "a source answered with an error (" + said + ")"
                                : "no source answered";
    const bool waited = rounds.WaitBeforeNext(
        [&](RetryRounds::Clock::duration wait, RetryRounds::Clock::duration left) {
          Logger().warn("Model {}: {}; retrying in {:.1f} s (round {}; giving up in {} s)", name,
                        why, std::chrono::duration<double>(wait).count(), rounds.round() + 1,
                        std::chrono::duration_cast<std::chrono::seconds>(left).count());
        });
    if (!waited) {
      return Status::Unavailable(why + ", and --pull-timeout (" +
                                 std::to_string(options.pull_timeout.count()) + " s) has passed" +
                                 local_problem);
    }
  }
}

}  // namespace seedd
