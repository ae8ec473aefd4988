// What the compile_cache kind's two halves share: the bundle's side
// (bundle.cc: listing, checking, installing) and the seedable's (compile_cache.cc).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/compile_cache.h"

namespace seedd {

// Where an install stages its files, inside the target directory; never bundled.
inline constexpr std::string_view kStagingPrefix = ".seedd-incoming-";

// A regular file of a cache directory, as a bundle lists it.
struct FoundFile {
  std::string path;  // relative, '/'-separated
  std::filesystem::path full;
  uint64_t size;
  int64_t mtime_ns;
};

// The files a bundle of `spec.dir` holds, sorted by path (stat only, no reads).
Result<std::vector<FoundFile>> ListCacheFiles(const CompileCacheSpec& spec);

// A factor's value as text: a string as it is, anything else as its JSON.
std::string FactorText(const Json& v);

}  // namespace seedd
