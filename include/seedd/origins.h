// Models where fleets keep them: an origin URL in place of a model directory.
//   oci://REGISTRY[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST][?plain-http=true]
//     an OCI registry: a ModelPack artifact, or an artifact whose layers carry
//     org.opencontainers.image.title;
//   s3://BUCKET/PREFIX[?endpoint=http(s)://HOST:PORT&region=R]
//     every object below the prefix (AWS credentials as for the S3 store).
// Every file is verified against the digest its upstream gives it (an OCI
// layer's; an S3 object's x-amz-checksum-sha256 or single-part ETag) before it
// is kept.
//
// Thread safety: functions of their arguments.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

// How to reach upstreams.
struct OriginAccess {
  // Registry credentials as `docker login`, `podman login` and `skopeo login`
  // write them: {"auths": {"HOST[:PORT]": {"auth": base64("user:password")}}}.
  std::filesystem::path auth_file;
  std::filesystem::path ca_file;  // a CA bundle trusted instead of the system's
  // A transfer that moves less than 1 KiB/s for this long fails.
  std::chrono::milliseconds stall_timeout{30000};
  // A file larger than range_bytes is fetched as ranged GETs of range_bytes,
  // range_streams at once, written in place and then checked whole against its
  // upstream digest: one connection to an object store or a registry's storage
  // carries much less than a host's link. 0: one GET per file. An upstream that
  // ignores ranges, or a file with no digest known before its GET (a multipart S3
  // object whose headers name no SHA-256), gets one GET.
  uint64_t range_bytes = 64 << 20;
  int range_streams = 4;
  // An S3 push: a file larger than this goes up as a multipart upload in parts
  // of this size (5 MiB to 5 GiB; more when 10,000 parts would not hold it).
  // 0: a file of up to 5 GiB in one PUT, a larger one in parts of 512 MiB.
  uint64_t push_part_bytes = 0;
};

// Whether `spec` is an origin URL (oci://) rather than a directory.
bool IsOriginUrl(std::string_view spec);
// Checks an origin URL's form (no network): InvalidArgument saying what is wrong.
Status CheckOriginUrl(std::string_view url);

struct OriginCopy {
  std::filesystem::path dir;  // the model's files, complete and verified
  std::string version;        // what the upstream named: an OCI manifest's sha256:...
  uint64_t files = 0;
  uint64_t total_bytes = 0;
  uint64_t bytes_fetched = 0;  // from upstream
  uint64_t bytes_reused = 0;   // copied from files with the same digest held here
  bool already_here = false;   // this version was held whole: nothing moved
  // Files the upstream gave no digest for (a multipart S3 object uploaded
  // without a checksum): as the transport delivered them.
  uint64_t files_unverified = 0;
  uint64_t ranged_gets = 0;  // ranges fetched of files larger than range_bytes
  double seconds = 0;
};

// Fetches the model `url` names into a directory below `root` (root/<version
// hex>/, beside its record; `root`'s other versions and `reuse_from`'s copies
// lend files with the same digest). A version held already is not fetched again.
// Errors name the URL and what the upstream answered; a file whose bytes do not
// match its digest is DataLoss naming it, and nothing is kept under a final name.
// `cancel` set: the fetch ends Cancelled at the next piece that lands.
Result<OriginCopy> CopyFromOrigin(
    std::string_view url, const std::filesystem::path& root, const OriginAccess& access,
    const std::vector<std::filesystem::path>& reuse_from = {},
    const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr,
    const std::shared_ptr<std::atomic<bool>>& cancel = nullptr);

struct OriginPullOptions {
  OriginAccess access;
  // `into` may hold other files: they are swapped for the model's atomically.
  bool replace = false;
  // Directories laid out as the model (an earlier version of it): a file at the
  // same path and of the same size is copied instead of fetched when its bytes
  // match the upstream's digest. With `replace`, `into` itself is one.
  std::vector<std::filesystem::path> reuse_from;
  // Bytes fetched or copied so far, of the total; from the fetching threads.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Set: the pull ends Cancelled at the next piece that lands, nothing moved
  // into `into` (what `seedctl pull` and the Python package's pull stop with).
  std::shared_ptr<std::atomic<bool>> cancel;
};

// The model `url` names, fetched into the directory `into` itself, as an
// engine reads it: every file checked against its upstream digest in a staging
// directory beside `into` (.NAME.seedd-origin, the same file system), then
// moved in: `into` is created, or filled if it is an empty directory (a
// volume's mount point), or, with `replace`, swapped for the model's files in
// one rename (a reader sees the old files or the new). Files held already at
// the same path with the upstream's digest (in `into` when replacing it, or in
// `reuse_from`) are copied, not fetched: a revision moves what changed
// (OriginCopy::bytes_reused says how much did not). A directory holding
// other files without `replace` is FailedPrecondition before any byte moves;
// on any failure nothing is moved and the staging directory is removed.
Result<OriginCopy> PullFromOrigin(std::string_view url, const std::filesystem::path& into,
                                  const OriginPullOptions& options);

// What a pull from `url` did, as `seedctl pull --progress json`'s done event and
// the C API's result say it: {"from", "into", "version", "files", "total_bytes",
// "bytes_fetched", "bytes_reused", "files_unverified", "seconds"}.
Json OriginPullJson(std::string_view url, const OriginCopy& copy);

struct OriginPush {
  std::string url;  // oci://REGISTRY/REPOSITORY:TAG
  // Its digest, "sha256:<hex>": pins it (url@digest); for S3, the version
  // readers see (the listing's digest).
  std::string manifest;
  uint64_t files = 0;
  uint64_t total_bytes = 0;
  uint64_t bytes_sent = 0;       // layers the repository did not hold yet
  uint64_t multipart_files = 0;  // S3: files uploaded in parts
  double seconds = 0;
};

// Writes the files below `dir` to `url`: oci://REGISTRY/REPOSITORY:TAG as a
// ModelPack artifact (one raw layer per file, its path in
// org.cncf.model.filepath): what `--model NAME=oci://...` and `modctl` read;
// layers the repository holds already are not sent again. Or
// s3://BUCKET/PREFIX?endpoint=...: one object per file below the prefix, each
// PUT with its x-amz-checksum-sha256, or, over OriginAccess::push_part_bytes
// (5 GiB by default), a multipart upload of parts with their own checksums and
// the file's SHA-256 as x-amz-meta-sha256, which readers verify against;
// `manifest` is then the listing's version. Links are followed;
// entries named .seedd* are left out.
Result<OriginPush> PushToRegistry(
    std::string_view url, const std::filesystem::path& dir, const OriginAccess& access,
    const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

}  // namespace seedd
