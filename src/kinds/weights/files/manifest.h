// The weight_shards manifest: what a target needs to fetch and verify a model
// directory. Files (relative path, size), tensors from the safetensors headers,
// chunks with XXH3-128 or SHA-256 digests, the model fingerprint, the sources, and a root
// digest over the canonical manifest. Built on the source; validated whole on the
// target before anything is written.
//
// Thread safety: values and pure functions; BuildManifest may run concurrently
// for different directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kinds/weights/files/file_digests.h"
#include "kinds/weights/files/safetensors.h"
#include "seedd/json.h"
#include "seedd/status.h"
#include "seedd/weights.h"

namespace seedd {

// Letters, digits, '_', '.', '-'; 1 to 128 bytes; not "." or "..".
bool IsModelName(std::string_view s);

// Checks a relative path from a peer: no absolute path, no "." or ".." or empty
// component, no '\\' or NUL, at most 4096 bytes and 255 per component.
Status ValidateRelativePath(std::string_view path);

// True when a component of `path` starts with ".seedd-": names seedd uses inside
// staging and cache directories, never a model's.
bool IsReservedPath(std::string_view path);

}  // namespace seedd
