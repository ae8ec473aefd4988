// Housekeeping of a daemon's model cache (<cache>/weights/NAME/): the versions
// a name keeps, and what pulls left behind.
//
// For each model NAME with a `current` link, removed are:
//  - versions (a <root digest> directory and its record) beyond the newest
//    `keep_versions` by commit time, `current`'s target always among those kept;
//  - directories with no record (an old layout, or a copy discarded halfway);
//  - abandoned pulls: staging directories (.<root>.seedd-staging) that no pull
//    holds (see Staging's lock), and leftovers (.seedd-discard-*, .current-*).
// A name without `current` is left alone: its staging may be a first pull to resume.
//
// Thread safety: functions of the filesystem; safe beside running pulls.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "seedd/status.h"

namespace seedd {

inline constexpr int kDefaultKeepVersions = 2;

struct GcOptions {
  int keep_versions = kDefaultKeepVersions;  // at least 1
  bool dry_run = false;                      // report only
  std::string only_model;                    // one NAME; empty: every name
};

struct GcReport {
  std::vector<std::filesystem::path> removed;  // or, dry, to be removed
  uint64_t bytes = 0;                          // their size
};

// Collects the garbage under <cache_dir>/weights (see above).
Result<GcReport> CollectWeightsGarbage(const std::filesystem::path& cache_dir,
                                       const GcOptions& options);

}  // namespace seedd
