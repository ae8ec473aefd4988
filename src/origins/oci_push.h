// A model directory written to an OCI registry as a ModelPack artifact: one raw
// layer per file (its path in org.cncf.model.filepath, its digest the file's
// SHA-256), a ModelPack config, and an image manifest under the tag. A layer
// the repository holds already is not sent again.
//
// Thread safety: a function of its arguments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/origins.h"

namespace seedd {

// A file below a directory to push: its path in the model and its SHA-256.
struct PushFile {
  std::filesystem::path file;
  std::string path;    // relative, validated
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;
};
// The SHA-256 (hex) of `length` bytes of `file` from `offset` (to its end when
// UINT64_MAX): IoError when the file ends sooner.
Result<std::string> FileSha256Hex(const std::filesystem::path& file, uint64_t offset = 0,
                                  uint64_t length = UINT64_MAX);

// The regular files below `dir` (links followed; entries named .seedd* left
// out), sorted by path, each hashed: NotFound for no directory or no file,
// InvalidArgument (before any is read) for one over `max_size` bytes.
Result<std::vector<PushFile>> FilesToPush(const std::filesystem::path& dir,
                                          uint64_t max_size = UINT64_MAX);

Result<OriginPush> PushModelPackDir(std::string_view url, const std::filesystem::path& dir,
                                    const OriginAccess& access,
                                    const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace seedd
