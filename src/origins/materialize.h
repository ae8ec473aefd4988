// An upstream model made a local directory: every file fetched from its
// origin (or copied from a local copy with the same digest), verified against
// its upstream digest as it lands, synced, and only then put under its final
// name. Layout below `root` (one per model name):
//   root/<version hex>/FILES                  the model, complete and verified
//   root/<version hex>.seedd-origin.json      {"format": "seedd.origin/1", "url",
//                                              "version", "files": [{"path", "size",
//                                              "digest" (upstream's), "sha256",
//                                              "mtime_ns"}]}
//   root/.staging-<version hex>-<random>/     while fetching; removed on failure
// A copy is reused when its record names the version and every file still has
// the size and mtime recorded.
//
// Thread safety: one call per `root` at a time (a daemon materialises each of its
// models once, at start).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "origins/origin.h"

namespace seedd {

struct MaterializeOptions {
  int parallel = 4;  // files fetched at once
  // Recorded copies searched for files with the same digest (other versions,
  // other models): each a directory holding <hex>.seedd-origin.json records.
  std::vector<std::filesystem::path> reuse_from;
  // Directories laid out as the model (an earlier version of it, such as the
  // directory a pull replaces): a file at the same path and of the same size is
  // copied instead of fetched when its bytes match the upstream's digest (read
  // and checked as they are copied; one that does not match is fetched).
  std::vector<std::filesystem::path> reuse_dirs;
  // Bytes fetched or copied so far, of the total; from the fetching threads.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Called from the fetching threads once file `index` of the model (or its
  // first file of the same digest) landed at `path` with SHA-256 `sha256` ("sha256:<hex>",
  // computed here), verified and synced, while
  // the others may still be fetched: what is complete can be served at once.
  std::function<void(size_t index, const std::filesystem::path& path, const std::string& sha256)>
      landed;
  // Called from the fetching threads when file `index` did not land (the fetch
  // of the model fails with `why`): claims taken for it are given up, and
  // waits for other files may end.
  std::function<void(size_t index, const Status& why)> failed;
  // Files larger than this as ranged GETs, range_streams at once (see
  // OriginAccess); 0: one GET per file.
  uint64_t range_bytes = 64 << 20;
  int range_streams = 4;
  // Set: the fetch ends Cancelled at the next piece that lands (an upstream
  // that sends nothing is given up on after its stall timeout).
  std::shared_ptr<std::atomic<bool>> cancel;
};

struct MaterializeStats {
  uint64_t files = 0;
  uint64_t bytes_fetched = 0;  // from upstream
  uint64_t bytes_reused = 0;   // copied from a local copy with the same digest
  uint64_t files_reused = 0;
  // Fetched with no upstream digest to check (a multipart S3 object uploaded
  // without a checksum): trusted as the transport delivered them.
  uint64_t files_unverified = 0;
  uint64_t ranged_gets = 0;
  bool already_here = false;  // a recorded copy of this version was reused whole
};

// Whether root/<version hex>/ holds `model` as its record says (nothing to fetch).
bool HoldsVersion(const std::filesystem::path& root, const OriginModel& model);

// The copy below `root` fetched last from `url` whose files are all as recorded
// (what a daemon serves when its upstream cannot be reached): its directory and
// upstream version. NotFound when there is none.
struct HeldCopy {
  std::filesystem::path dir;
  std::string version;
};
Result<HeldCopy> LatestHeldCopy(const std::filesystem::path& root, const std::string& url);

// The directory holding `model` (see above). A file whose bytes do not hash to
// its upstream digest is DataLoss naming the file, the expected and the actual
// digest; nothing is then left under the final name.
Result<std::filesystem::path> MaterializeModel(Origin& origin, const OriginModel& model,
                                               const std::filesystem::path& root,
                                               const MaterializeOptions& options,
                                               MaterializeStats* stats);

}  // namespace seedd
