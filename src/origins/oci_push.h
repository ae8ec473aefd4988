// A model directory written to an OCI registry as a ModelPack artifact: one raw
// layer per file (its path in org.cncf.model.filepath, its digest the file's
// SHA-256), a ModelPack config, and an image manifest under the tag. A layer
// the repository holds already is not sent again.
//
// Thread safety: a function of its arguments.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

#include "seedd/origins.h"

namespace seedd {

Result<OriginPush> PushModelPackDir(std::string_view url, const std::filesystem::path& dir,
                                    const OriginAccess& access,
                                    const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace seedd
