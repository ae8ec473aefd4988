// Shared artifact stores, built by name from a URL:
//   file:///path/to/shared/mount
//   redis://[[user]:password@]host:port[/db][?prefix=P&ttl=SECONDS&timeout_ms=N]
//   s3://bucket[/prefix]?endpoint=http://host:port&region=R
//
// Thread safety: the registry is safe to use from any thread; stores are thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/artifact_store.h"
#include "seedd/status.h"

namespace seedd {

// Builds the store named by `url` and checks that it works (connects, finds the
// bucket or directory). Errors name the store (credentials hidden) and, for an
// unknown scheme, list the known ones.
Result<ArtifactStorePtr> OpenArtifactStore(std::string_view url);

// Whether `url` parses as a store URL of a known scheme, without opening it
// (no connection, no file): the error names the store and the known schemes.
Status CheckStoreUrl(std::string_view url);

// The registered schemes, sorted ("file", "redis", "s3").
std::vector<std::string> KnownStoreSchemes();

// `url` with any password or secret replaced by "***", for logs and errors.
std::string RedactStoreUrl(std::string_view url);

using StoreFactory = std::function<Result<ArtifactStorePtr>(std::string_view url)>;
// Registers a backend under `scheme`. REQUIRES: the scheme is not registered yet.
void RegisterStoreBackend(std::string scheme, StoreFactory factory);

// Wraps a shared store so that a failure at run time is a warning and a miss
// (Get) or a warning (Put, List, Delete): the daemon keeps serving from its
// other sources.
ArtifactStorePtr NewTolerantStore(ArtifactStorePtr inner);

}  // namespace seedd
