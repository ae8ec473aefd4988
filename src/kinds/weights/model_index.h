// The model directories people have, indexed into a manifest: a plain directory,
// or a snapshot in the Hugging Face hub cache, whose files are relative links
// (models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH). Links are followed
// only while they stay inside the model's repository root; the index says where
// each file's bytes are read from and what they were (size, mtime) when indexed.
//
// Thread safety: pure functions; IndexModel may run concurrently for different
// directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "kinds/weights/manifest.h"
#include "seedd/status.h"

namespace seedd {

// Where one manifest file's bytes are, and what they were when indexed.
struct IndexedFile {
  std::string read_path;  // below the model's root, no link on the way
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct IndexedModel {
  Manifest manifest;
  // The directory the bytes are read below: the model directory, or for a hub
  // cache snapshot its repository (models--ORG--NAME), which holds the blobs.
  std::filesystem::path root;
  std::map<std::string, IndexedFile, std::less<>> files;  // by manifest path
};

// Indexes every regular file under `dir` (and every link that resolves to a
// regular file inside the repository root) into a manifest. A link that leaves
// the root, dangles or names a directory is an error naming it; so is a
// directory with no files.
Result<IndexedModel> IndexModel(const std::string& model, const std::filesystem::path& dir,
                                const BuildOptions& options, BuildStats* stats = nullptr);

}  // namespace seedd
