// Chunks a pull takes from files already on this host instead of the network:
// a new revision of a model shares most of its chunks with the version before
// it (a fine-tune rewrites some tensors; tokenizers and configs repeat), and
// those are read from the earlier copy, checked against the new manifest's
// digests and written into staging, so only what changed crosses the network.
//
// A basis is a directory laid out as the model (an earlier version's copy, a
// directory being replaced); a chunk is taken from the file of the same path at
// the same offset, and only when its bytes match the manifest's digest: the
// basis is never trusted, only read. Files a basis holds as symbolic links (a
// Hugging Face snapshot) are followed; anything but a regular file is skipped.
//
// Thread safety: ReuseLocalChunks runs on the pull's thread before any chunk is
// fetched; it uses the Staging's thread-safe calls only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "kinds/weights/files/manifest.h"
#include "kinds/weights/files/staging.h"
#include "seedd/status.h"

namespace seedd {

struct ReuseStats {
  uint64_t chunks = 0;  // taken from a basis, verified and journaled
  uint64_t bytes = 0;   // of those chunks
};

// Fills the chunks of `manifest` not in `have` (journaled already) that one of
// `bases` holds with the same digest, committing each to `staging`. Returns
// their indices. An unreadable basis file is skipped; an error writing to
// staging ends the pass with that error.
Result<std::vector<uint32_t>> ReuseLocalChunks(const Manifest& manifest, Staging& staging,
                                               const std::vector<uint32_t>& have,
                                               const std::vector<std::filesystem::path>& bases,
                                               ReuseStats* stats);

}  // namespace seedd
