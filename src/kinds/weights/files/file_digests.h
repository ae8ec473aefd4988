// The digests of a model's files: each chunk's (XXH3-128 or SHA-256) and the
// whole file's SHA-256, read once and kept in the digest cache; and the chunk
// digest over data given at once or in pieces.
//
// Thread safety: pure functions, and DigestFile may run concurrently (the
// digest cache's entries are written beside and renamed); a ChunkHasher is
// used by one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

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

// Records `d` (digests of `abs` known otherwise, e.g. from a manifest its bytes
// were verified against) in options.digest_cache for the file as it is now, so
// that DigestFile does not read it again. Nothing without a digest cache.
void RememberDigests(const std::filesystem::path& abs, const BuildOptions& options,
                     const FileDigests& d);

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
