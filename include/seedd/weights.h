// The weights API: manifests of model directories, and pulling a model from
// seedd daemons (the origin and the relays of the same version) as a library
// call. seedctl pull is this call with a terminal's progress.
//
// A manifest lists a model's files, its safetensors tensors and its chunks with
// their digests; its root digest names the version (docs/protocol.md). Build
// one on the source (BuildManifest), validate one from a peer (ParseManifest).
//
// PullModel asks the sources for the model's manifest (retrying those that are
// down until options.timeout), checks a pinned root digest, then fetches the
// chunks on the data plane from the sources and the relays of the same root
// digest, verifying each, into a staging directory beside `into`, resumable,
// and moves it into place only when every chunk is verified.
//
// Thread safety: values and pure functions; PullModel may run concurrently for
// different destinations; its callbacks are called from its threads.
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
#include "seedd/origins.h"
#include "seedd/signing.h"
#include "seedd/status.h"
#include "seedd/tls.h"

namespace seedd {

// ---- Manifests ----

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // byte range in the file (header included in the offset)
  uint64_t end = 0;
};

// The chunk size of a manifest built without one: about kTargetChunks chunks
// per model, a power of two from 256 KiB to 64 MiB. What a swarm loses while it
// starts (the first chunks leave the origin, hop by hop) and while it ends (the
// last chunks spread) is a few chunk times each, so it is the number of chunks,
// not their size, that sets how close a fleet comes to one host's time
// (docs/benchmarks.md: 16 targets of a 64 MiB model at 1.68x one target's time
// with 2 MiB chunks, 1.45x with 256 KiB). The floor bounds the per-chunk cost
// (a request, a header, a digest); the ceiling a chunk's retry.
inline constexpr uint64_t kTargetChunks = 1024;
inline constexpr uint64_t kMinAutoChunkBytes = 256ull << 10;
inline constexpr uint64_t kMaxAutoChunkBytes = 64ull << 20;
inline uint64_t AutoChunkBytes(uint64_t total_bytes) {
  uint64_t size = kMinAutoChunkBytes;
  while (size < kMaxAutoChunkBytes && size * kTargetChunks < total_bytes) size *= 2;
  return size;
}
inline constexpr uint64_t kDefaultChunkBytes = 2ull << 20;  // a parsed manifest's, until set
// The chunk sizes an index builds and a manifest may carry.
inline constexpr uint64_t kMinChunkBytes = 4096;
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;
inline constexpr size_t kMaxManifestFiles = 100000;

// A chunk size given in MiB (a fraction allowed), in bytes: a multiple of 64 KiB,
// at least 64 KiB.
inline uint64_t ChunkBytesOfMib(double mib) {
  constexpr double kStep = 64 * 1024;
  const double steps = mib * 1048576.0 / kStep + 0.5;
  return steps < 1 ? static_cast<uint64_t>(kStep) : static_cast<uint64_t>(steps) * 64 * 1024;
}

// How chunks are digested. XXH3-128 catches corruption at memory speed but its
// collisions can be constructed; SHA-256 also holds against a relay that forges
// chunks. The manifest names its algorithm and the root digest covers that name,
// so a fetcher verifies with whatever the (pinned) manifest says.
enum class ChunkDigest { kXxh3, kSha256 };
// "xxh3" or "sha256": the manifest's "chunk_digest" and each chunk's digest key.
std::string_view ChunkDigestName(ChunkDigest algo);
// InvalidArgument naming `flag` unless `name` is "xxh3" or "sha256".
Result<ChunkDigest> ParseChunkDigest(std::string_view name, std::string_view flag);

// A link rate in bytes per second: a number and a unit, kbit, mbit or gbit (bits
// per second, as tc and cloud egress limits give them) or kB, MB or GB (bytes,
// decimal): "45mbit", "2.5gbit", "100MB"; "0": no limit (returns 0). From 1 kB/s
// to 10 TB/s; anything else is InvalidArgument naming `flag`.
Result<uint64_t> ParseRate(std::string_view text, std::string_view flag);

struct ManifestFile {
  std::string path;  // relative, '/'-separated
  uint64_t size = 0;
  std::string sha256;  // of the whole file, for targets that verify files too
};

struct ManifestTensor {
  std::string file;
  TensorInfo info;
};

struct ManifestChunk {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  // Lowercase hex of the manifest's chunk_digest over the chunk's bytes: XXH3-128
  // (32 digits, canonical big-endian) or SHA-256 (64 digits).
  std::string digest;
};

// The manifest format this seedd writes. 2: the root digest covers the
// content only (the same files give the same digest whatever model name they
// are served as); 1 (no "format" key): it covered the model name too, read and
// served on as it was.
inline constexpr int kManifestFormat = 2;

struct Manifest {
  int format = kManifestFormat;  // 1 or 2
  std::string model;
  std::string fingerprint;  // SHA-256 hex
  uint64_t chunk_size = kDefaultChunkBytes;
  ChunkDigest chunk_digest = ChunkDigest::kXxh3;
  uint64_t total_size = 0;
  std::vector<ManifestFile> files;      // sorted by path
  std::vector<ManifestTensor> tensors;  // by file, then offset
  std::vector<ManifestChunk> chunks;    // by file, then offset
  std::vector<std::string> sources;     // host:port
  std::string root_digest;              // see ManifestRootDigest
  // Of the root digest (seedd/signing.h), kept and served on with the manifest.
  std::vector<Signature> signatures;

  Json ToJson() const;  // includes root_digest
};

struct BuildOptions {
  uint64_t chunk_size = 0;  // 0: AutoChunkBytes of the model's size
  ChunkDigest chunk_digest = ChunkDigest::kSha256;
  // Chunk digests are cached here, keyed by path, size and modification time, so a
  // restart does not rehash. Empty: no cache.
  std::filesystem::path digest_cache;
  std::vector<std::string> sources;
  // Signs the manifest (its root digest); null: unsigned.
  std::shared_ptr<const SigningKey> sign_key;
  // Only the files whose relative path this accepts; null: every file.
  std::function<bool(std::string_view path)> include;
};

struct BuildStats {
  uint64_t bytes_hashed = 0;  // chunk bytes read and hashed (0 when all came from the cache)
};

// Builds the manifest of the model directory `dir` (see IndexModel in
// model_index.h, which also says where each file's bytes are read from).
Result<Manifest> BuildManifest(const std::string& model, const std::filesystem::path& dir,
                               const BuildOptions& options, BuildStats* stats = nullptr);

// Bounds on a manifest from a peer, each checked before the part it bounds is
// read (docs/operations.md lists them).
struct ManifestLimits {
  size_t files = kMaxManifestFiles;
  size_t chunks = 4u << 20;  // 8 TiB of 2 MiB chunks
  size_t tensors = 1u << 20;
  size_t dims = 32;          // per tensor shape
  size_t name_bytes = 1024;  // a tensor's name
  size_t sources = 256;
};

// Validates a manifest from a peer: its size against `limits`, names and paths,
// file sizes, chunks tiling every file exactly, tensors inside their files, sizes
// adding up, the root digest.
Result<Manifest> ParseManifest(const Json& json, const ManifestLimits& limits = {});

// SHA-256 hex of the canonical text (sorted keys, compact) of `manifest` without
// its "root_digest", "sources" (where to fetch varies; what to fetch does not),
// "signatures" (they sign the root digest) and, from format 2, "model" (a
// version's identity is its content, not the name it is served as).
std::string ManifestRootDigest(const Json& manifest);

// Ok when `trust` is null or `m` carries a signature of its root digest by one
// of its keys; else PermissionDenied naming the model, `from` and the keys.
Status CheckManifestSigned(const Manifest& m, const TrustedKeys* trust, std::string_view from);

// A pin: `pin` is a root digest (64 lowercase hex digits, as `seedctl manifest`
// prints it); InvalidArgument naming `flag` otherwise.
Status ValidatePin(std::string_view pin, std::string_view flag);
// Ok when `pin` is empty or is `m`'s root digest; else FailedPrecondition
// naming both (a source that offers another version of the model).
Status CheckPinned(const Manifest& m, std::string_view pin);

// ---- Model directories ----

// The hub cache: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::filesystem::path HubCacheDir();

// "hf:ORG/NAME[@REVISION]" is the snapshot of that model in the hub cache
// (REVISION a ref such as main, the default, or a commit); anything else is a
// directory path, returned as it is.
Result<std::filesystem::path> ResolveModelDir(std::string_view spec);

// ---- Local copies: <cache_dir>/weights/<NAME>/<root digest> ----

// Housekeeping of a daemon's model cache (<cache>/weights/NAME/): the versions
// a name keeps, and what pulls left behind.
//
// For each model NAME with a `current` link, removed are:
//  - versions (a <root digest> directory and its record) beyond the newest
//    `keep_versions` by commit time, `current`'s target always among those kept;
//  - directories with no record (an old layout, or a copy discarded halfway);
//  - abandoned pulls: staging directories (.<root>.seedd-staging) that no pull
//    holds (see Staging's lock), and leftovers (.seedd-discard-*, .current-*).
// A name without `current` is left alone: its staging may be a first pull to resume.
//
// Safe beside running pulls.
inline constexpr int kDefaultKeepVersions = 2;

struct GcOptions {
  int keep_versions = kDefaultKeepVersions;  // at least 1
  bool dry_run = false;                      // report only
  std::string only_model;                    // one NAME; empty: every name
};

struct GcReport {
  std::vector<std::filesystem::path> removed;  // or, dry, to be removed
  uint64_t bytes = 0;                          // their size
};

// Collects the garbage under <cache_dir>/weights (see above).
Result<GcReport> CollectWeightsGarbage(const std::filesystem::path& cache_dir,
                                       const GcOptions& options);

// ---- Pulling a model ----

// A seed or relay that delivered at least one verified chunk.
struct SourceUse {
  std::string name;
  bool seed = false;
  uint64_t bytes = 0;  // verified chunk bytes (holes count none)
};

struct FetchStats {
  uint64_t bytes_received = 0;    // chunk bytes that arrived (including rejected ones)
  uint64_t bytes_from_peers = 0;  // of which from relays rather than seeds
  // Of bytes_received, from sources of another zone than this host's (or of a
  // zone not known); 0 without a zone (FetchOptions::zone).
  uint64_t bytes_across_zones = 0;
  // Chunk requests to sources of other zones: for chunks this host owns (it is
  // its zone's member to fetch them across), and for others (taken once
  // nothing arrived for a while, or endgame copies).
  uint64_t requests_across_owned = 0;
  uint64_t requests_across_other = 0;
  uint64_t chunks_rejected = 0;  // failed verification and were fetched again
  // Endgame copies held in memory while another copy of their chunk was being
  // written, and verified first: these were written, the slower copy read past.
  uint64_t held_copies_written = 0;
  uint64_t chunks_resumed = 0;    // verified in an earlier, interrupted fetch
  uint64_t chunks_holes = 0;      // all zeros: not sent, not written
  uint64_t bytes_resumed = 0;     // of the chunks_resumed
  uint64_t chunks_reused = 0;     // copied from files held here (PullOptions::reuse_from)
  uint64_t bytes_reused = 0;      // of the chunks_reused
  bool up_to_date = false;        // `into` held this version already: nothing moved
  uint64_t requests = 0;          // chunk requests sent
  uint64_t requests_ahead = 0;    // of which while the chunk before was still arriving
  uint64_t answered_busy = 0;     // answered "busy": asked elsewhere
  uint64_t answered_claimed = 0;  // answered "claimed" by a seed: asked of the relays
  uint64_t refused_full = 0;      // connections a full source refused (tried again later)
  std::vector<std::string> sources_dropped;
  std::vector<std::string> peers;  // relays learnt during the fetch
  std::vector<SourceUse> used;     // in the order they first delivered
};

struct PullProgress {
  uint64_t verified_bytes = 0;  // of the model, resumed chunks included
  uint64_t total_bytes = 0;
  uint64_t resumed_bytes = 0;  // verified by an earlier, interrupted pull, or copied locally
  size_t sources = 0;          // seeds and relays that delivered a verified chunk so far
  // Files (relative paths) whole and verified since the previous call, each
  // once: readable at `staging`/PATH until the pull commits, at the
  // destination after (the rename keeps the file: an open or a mapping stays
  // valid). Files whole from the start come with the first call.
  std::vector<std::string> files_ready;
  std::filesystem::path staging;
};

struct PullOptions {
  std::vector<std::string> sources;  // HOST:PORT of seedd daemons (the seeds)
  std::string token;                 // the shared token
  // Connect with TLS, verifying the daemons against its CA; null: plain TCP.
  std::shared_ptr<const TlsContext> tls;
  // A pin: the model's root digest (64 lowercase hex digits); any other version
  // is refused before any byte moves. Empty: whatever the sources serve.
  std::string root_digest;
  // Only a manifest signed by one of these keys is pulled (seedd/signing.h);
  // null: signatures are not checked.
  std::shared_ptr<const TrustedKeys> trust;
  int connections = 4;         // to each source
  size_t max_neighbours = 16;  // sources and relays fetched from at once
  bool verify_sha256 = false;  // also check every file's SHA-256 before committing
  // "index": files complete one after another in the manifest's order (paths
  // sorted: a sharded checkpoint's shards in its index's order,
  // model-00001-of-N first) when pulling from sources alone and near the end of
  // a swarm pull, for a loader reading files as they complete (files_ready);
  // "" (default): rarest first throughout.
  std::string order;
  // The upstream the model was fetched from, as an origin URL
  // (oci://REGISTRY/REPOSITORY:TAG, or @sha256:DIGEST to pin it): its listing is
  // read first, and the sources' manifest must name exactly its files (paths and
  // sizes) with each file's SHA-256 its upstream digest (an OCI layer's), else
  // FailedPrecondition naming the file, before any byte moves; every file's
  // SHA-256 is then checked before commit. So with @sha256: the model is pinned
  // from the registry to `into`, whichever daemons send it. For an S3 upstream
  // (s3://BUCKET/PREFIX?...), whose listing gives each single-part object's MD5
  // (its ETag), the paths and sizes are checked first and each file's MD5
  // before commit (DataLoss naming the file and both digests; nothing
  // committed); a multipart object's SHA-256 from its HEAD (a full-object
  // checksum or x-amz-meta-sha256) is checked as an OCI layer's. A file the
  // upstream names no digest for cannot be vouched for: FailedPrecondition. Empty: no upstream
  // check.
  std::string upstream;
  OriginAccess upstream_access;  // credentials and CA for `upstream`
  bool replace = false;          // `into` may hold other files: replaced by the model
  // Directories laid out as the model (an earlier version's copy): chunks they
  // hold at the same path and offset whose bytes match the manifest's digests
  // are copied from there instead of fetched. `into` is one too when replaced.
  std::vector<std::filesystem::path> reuse_from;
  // Sources that do not answer, or fail mid-pull, are tried again (backoff 0.5 s
  // doubling to 30 s) until this long after the call.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Called from the pull's threads as chunks are verified.
  std::function<void(const PullProgress&)> progress;
  // Called before each wait for sources to come back: why, how long it waits,
  // the next round's number and the time left before timeout.
  std::function<void(const std::string& why, std::chrono::milliseconds wait, int round,
                     std::chrono::milliseconds left)>
      on_retry;
  // Set to stop: PullModel returns Cancelled within about 50 ms; what was
  // verified stays journaled and a rerun into the same `into` resumes.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

struct PullResult {
  Manifest manifest;  // the version pulled
  FetchStats stats;
  double seconds = 0;  // the whole call, retries included
};

// Pulls `model` into `into`. Errors, as Status codes:
//   InvalidArgument     a bad source, pin or destination;
//   NotFound            every source answered that it does not serve the model;
//   FailedPrecondition  a source answered with an error, offered another version
//                       than the pin or another model's manifest, or sent a
//                       bad manifest or one not signed
//                       by a key of options.trust; `into` holds other
//                       files (without options.replace);
//   Unavailable         no source answered before options.timeout;
//   DeadlineExceeded    the sources failed mid-pull until options.timeout;
//   Cancelled           options.cancel was set;
//   DataLoss, IoError   a chunk could not be verified or written for good.
Result<PullResult> PullModel(const std::string& model, const std::filesystem::path& into,
                             const PullOptions& options);

}  // namespace seedd
