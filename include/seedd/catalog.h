// The catalog kind: what a daemon serves, for `seedctl ls`. Request
// {"kind": "catalog", "prefix": "triton/" (optional)}; payload
// {"models": [{"name", "root_digest", "total_size", "files", "complete"}],
//  "artifacts": ["KIND/CONFIG_HASH/FILENAME", ...], "truncated": bool}:
// every model, and the artifact keys (the local cache's, then each shared
// store's, without duplicates) that start with the prefix, at most
// kMaxCatalogKeys. An extension: the reference serves no such kind.
//
// Thread safety: the seedable is called from resolver threads; `list` must be
// thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "seedd/seedable.h"

namespace seedd {

inline constexpr std::string_view kCatalogKind = "catalog";
inline constexpr size_t kMaxCatalogKeys = 10000;
inline constexpr size_t kMaxCatalogPrefix = 512;

struct CatalogModel {
  std::string name;
  std::string root_digest;
  uint64_t total_size = 0;
  uint64_t files = 0;
  bool complete = true;  // false while the daemon is still pulling it
};

struct Catalog {
  std::vector<CatalogModel> models;
  std::vector<std::string> artifacts;
  bool truncated = false;  // more keys matched than kMaxCatalogKeys
};

Json CatalogToJson(const Catalog& catalog);
// Checks a catalog a peer sent: shapes, and every string printable and bounded.
Result<Catalog> ParseCatalog(const Json& payload);

// The catalog kind, listing with `list(prefix)`. The target side is for
// seedctl: RequestParams passes "prefix" through; Install refuses.
SeedablePtr NewCatalogSeedable(std::function<Result<Catalog>(const std::string& prefix)> list);

}  // namespace seedd
