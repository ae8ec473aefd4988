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
#include "seedd/weights.h"

namespace seedd {

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
