// The built-in kind "artifact": any small file in a daemon's disk store.
//
// Key fields {"namespace", "config_hash", "filename"} name
// <cache-dir>/<namespace>/<config_hash>/<filename>. The payload is
// {"filename", "size", "sha256", "data"} with data in base64.
//
// Thread safety: the seedable is thread-safe (its store is).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>
#include <vector>

#include "seedd/artifact_store.h"
#include "seedd/json.h"
#include "seedd/seedable.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr std::string_view kArtifactKind = "artifact";
inline constexpr size_t kMaxArtifactBytes = 16 * 1024 * 1024;

// Checks the three key fields of `fields` (an object); the error names the field.
Result<ArtifactKey> ArtifactKeyFromFields(const Json& fields);

// Serves and installs artifacts from `cache_dir`; Resolve then consults the
// `shared` stores in order (a daemon's --store list).
SeedablePtr NewArtifactSeedable(const std::filesystem::path& cache_dir,
                                std::vector<std::shared_ptr<ArtifactStore>> shared = {});
// Installs into `store` and serves from it, then from `shared` (keys
// <namespace>/<config_hash>/<filename>).
SeedablePtr NewArtifactSeedable(ArtifactStorePtr store,
                                std::vector<std::shared_ptr<ArtifactStore>> shared = {});

}  // namespace seedd
