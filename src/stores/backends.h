// The built-in store backends' factories (see seedd/store_registry.h for URLs).
#pragma once

#include <string_view>

#include "seedd/artifact_store.h"
#include "seedd/status.h"

namespace seedd {

Result<ArtifactStorePtr> OpenFileStore(std::string_view url);
Result<ArtifactStorePtr> OpenRedisStore(std::string_view url);
Result<ArtifactStorePtr> OpenS3Store(std::string_view url);

// Counts every operation of `inner` in seedd_store_operations_total under
// `backend` ("disk" for a daemon's own cache, else the URL's scheme).
ArtifactStorePtr NewCountingStore(ArtifactStorePtr inner, std::string backend);

}  // namespace seedd
