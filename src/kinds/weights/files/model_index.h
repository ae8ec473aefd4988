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
#include <memory>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "kinds/weights/files/chunk_set.h"
#include "kinds/weights/files/manifest.h"
#include "seedd/status.h"

namespace seedd {

// Where one manifest file's bytes are, and what they were when indexed.
struct IndexedFile {
  std::string read_path;  // below the model's root, no link on the way
  uint64_t size = 0;      // of read_path, as its mtime
  int64_t mtime_ns = 0;
  // Where the file's bytes start in read_path: a piece of a larger file.
  uint64_t offset = 0;
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

// A model version as a WeightServer serves it (net/weight_server.h).
struct ServedModel {
  Manifest manifest;
  std::filesystem::path dir;  // the bytes are read below it, never through a link
  // The chunks that may be served; null when the model is complete. A daemon
  // that is fetching a model serves what it has verified so far.
  std::shared_ptr<const ChunkSet> available;
  // By manifest path: where the file's bytes are below `dir` and their size and
  // mtime when indexed. A file whose size or mtime changed since is not served
  // (its chunks' digests no longer describe it). A file not listed is read at its
  // manifest path, unchecked (a staging copy still being written).
  std::map<std::string, IndexedFile, std::less<>> files;
  // `dir`, opened when published: paths resolve below what was there then, even
  // if `dir` is renamed (a staging directory committed) or a link on its path is
  // swapped.
  std::shared_ptr<const UniqueFd> root;
  // The manifest as JSON text with an empty "sources", split where the sources
  // go: serialized once when published, handed out per request. Set by Publish.
  struct Text {
    std::string head;  // ... "sources":[
    std::string tail;  // ] ...
  };
  std::shared_ptr<const Text> text;
  // Fetched from peers (a --pull), not served from a directory of this host's:
  // what is sent from it is relayed (metrics).
  bool pulled = false;
};

// A model as indexed, ready to serve.
ServedModel ServeIndexed(IndexedModel index);

}  // namespace seedd
