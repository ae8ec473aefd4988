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

#include "kinds/weights/safetensors.h"
#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

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

struct Manifest {
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

  Json ToJson() const;  // includes root_digest
};

struct BuildOptions {
  uint64_t chunk_size = 0;  // 0: AutoChunkBytes of the model's size
  ChunkDigest chunk_digest = ChunkDigest::kXxh3;
  // Chunk digests are cached here, keyed by path, size and modification time, so a
  // restart does not rehash. Empty: no cache.
  std::filesystem::path digest_cache;
  std::vector<std::string> sources;
};

struct BuildStats {
  uint64_t bytes_hashed = 0;  // chunk bytes read and hashed (0 when all came from the cache)
};

// Builds the manifest of the model directory `dir` (see IndexModel in
// model_index.h, which also says where each file's bytes are read from).
Result<Manifest> BuildManifest(const std::string& model, const std::filesystem::path& dir,
                               const BuildOptions& options, BuildStats* stats = nullptr);

// The digests of one file: options.chunk_digest per chunk and SHA-256 of the
// whole, with the size and mtime of what was read; from options.digest_cache when
// an entry matches path, size, mtime, chunk size and digest algorithm.
struct FileDigests {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::vector<std::string> chunks;
  std::string sha256;
};
Result<FileDigests> DigestFile(const std::filesystem::path& abs, const BuildOptions& options,
                               BuildStats* stats = nullptr);

// Letters, digits, '_', '.', '-'; 1 to 128 bytes; not "." or "..".
bool IsModelName(std::string_view s);

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
// its "root_digest" and "sources" (where to fetch varies; what to fetch does not).
std::string ManifestRootDigest(const Json& manifest);

// A pin: `pin` is a root digest (64 lowercase hex digits, as `seedctl manifest`
// prints it); InvalidArgument naming `flag` otherwise.
Status ValidatePin(std::string_view pin, std::string_view flag);
// Ok when `pin` is empty or is `m`'s root digest; else FailedPrecondition
// naming both (a source that offers another version of the model).
Status CheckPinned(const Manifest& m, std::string_view pin);

// Checks a relative path from a peer: no absolute path, no "." or ".." or empty
// component, no '\\' or NUL, at most 4096 bytes and 255 per component.
Status ValidateRelativePath(std::string_view path);

// True when a component of `path` starts with ".seedd-": names seedd uses inside
// staging and cache directories, never a model's.
bool IsReservedPath(std::string_view path);

// XXH3-128 of `data`, canonical hex.
std::string Xxh3Hex(std::string_view data);

// `algo` of `data`, lowercase hex (Xxh3Hex or Sha256Hex).
std::string ChunkDigestHex(ChunkDigest algo, std::string_view data);

// A chunk digest over data given in pieces; HexDigest equals ChunkDigestHex of
// the whole.
class ChunkHasher {
 public:
  explicit ChunkHasher(ChunkDigest algo = ChunkDigest::kXxh3);
  ~ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;
  void Reset();
  void Update(std::string_view piece);
  std::string HexDigest() const;

 private:
  ChunkDigest algo_;
  void* xxh3_ = nullptr;  // XXH3_state_t
  void* sha_ = nullptr;   // EVP_MD_CTX
};

}  // namespace seedd
