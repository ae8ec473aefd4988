// Where a pull's verified files end up, decided before any byte moves: a new
// directory, an existing empty one (a volume's mount point), one that already
// holds the version (nothing to do), or, when asked, one whose files the model
// replaces.
//
// Thread safety: functions of the filesystem; one pull per destination.
#pragma once

#include <filesystem>

#include "kinds/weights/files/manifest.h"
#include "seedd/status.h"

namespace seedd {

enum class Placement {
  kCreate,          // `into` is absent: stage beside it, rename into place
  kFillEmpty,       // an empty directory: stage inside it, move the entries up
  kUpToDate,        // holds exactly this version already
  kReplaceDir,      // swap a staged directory beside it for it (RENAME_EXCHANGE)
  kReplaceEntries,  // a mount point: stage inside, then replace its entries
};

struct DestinationPlan {
  Placement placement = Placement::kCreate;
  std::filesystem::path into;     // normalized
  std::filesystem::path staging;  // where Staging works
};

// `into` without "." and ".." components or a trailing '/'.
std::filesystem::path NormalizeDestination(const std::filesystem::path& into);

// Where FetchModel stages a new `into`: a hidden directory beside it.
std::filesystem::path StagingDir(const std::filesystem::path& into);

// Decides how `manifest` reaches `into` (see Placement). A directory holding
// other files is AlreadyExists unless `replace`; a file is AlreadyExists always.
// Entries named .seedd-* (a pull's staging) do not count as files held.
Result<DestinationPlan> PlanDestination(const std::filesystem::path& into, const Manifest& manifest,
                                        bool replace);

// True when `dir` holds exactly the files of `manifest` (no others besides
// .seedd-* entries) and every chunk matches its digest: one read of the files.
bool HoldsVersion(const std::filesystem::path& dir, const Manifest& manifest);

// Moves the sealed staging directory of `plan` into place (see Placement).
Status InstallStaged(const DestinationPlan& plan);

}  // namespace seedd
