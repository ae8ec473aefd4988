#include "kinds/weights/net/fetcher.h"

#include "kinds/weights/files/destination.h"
#include "kinds/weights/files/reuse.h"
#include "kinds/weights/files/staging.h"
#include "kinds/weights/net/fetch.h"
#include "seedd/logging.h"
#include "seedd/units.h"

namespace seedd {

Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into_given, const FetchOptions& options,
                  FetchStats* stats) {
  FetchStats local;
  if (stats == nullptr) stats = &local;
  Result<DestinationPlan> plan = PlanDestination(into_given, manifest, options.replace);
  if (!plan.ok()) return plan.status();
  if (plan->placement == Placement::kUpToDate) {
    stats->up_to_date = true;
    return Status::Ok();
  }
  const std::filesystem::path& into = plan->into;
  if (sources.empty() && manifest.sources.empty()) {
    return Status::InvalidArgument("no source to fetch from");
  }
  Staging staging(manifest, plan->staging);
  Result<std::vector<uint32_t>> resumed = staging.Open();
  if (!resumed.ok()) return resumed.status();
  std::vector<std::filesystem::path> bases = options.reuse_from;
  // `into` itself when its files are being replaced by this version.
  if (plan->placement == Placement::kReplaceDir || plan->placement == Placement::kReplaceEntries) {
    bases.push_back(into);
  }
  ReuseStats reuse;
  Result<std::vector<uint32_t>> reused =
      ReuseLocalChunks(manifest, staging, *resumed, bases, &reuse);
  if (!reused.ok()) return reused.status().WithContext("copying chunks held locally");
  if (reuse.chunks > 0) {
    Logger().info("Model {}: {} of {} chunks ({}) copied from files held here, not fetched",
                  manifest.model, reuse.chunks, manifest.chunks.size(), HumanBytes(reuse.bytes));
  }
  if (options.staged) options.staged(plan->staging);
  Fetch fetch(manifest, staging, options, stats);
  fetch.Prepare(*resumed, *reused);
  fetch.Run(sources);
  if (fetch.Cancelled()) {
    const uint64_t kept = fetch.VerifiedBytes();
    if (kept == 0) return Status::Cancelled("the pull was stopped before any chunk was verified");
    return Status::Cancelled("the pull was stopped; " + HumanBytes(kept) +
                             " of verified chunks are kept in " + plan->staging.string() +
                             ", and a rerun resumes from them");
  }
  if (Status local_error = fetch.local_error(); !local_error.ok()) {
    return local_error.WithContext("the pull into " + into.string() + " stopped; rerun to resume");
  }
  if (!fetch.Complete()) {
    return Status::Unavailable(
        "every source failed before the model was complete; rerun to resume");
  }
  if (Status journaled = staging.Flush(); !journaled.ok()) {
    return journaled.WithContext("the pull into " + into.string() + " stopped; rerun to resume");
  }
  SEEDD_RETURN_IF_ERROR(staging.Seal(options.verify_sha256, options.upstream_md5));
  return InstallStaged(*plan);
}

}  // namespace seedd