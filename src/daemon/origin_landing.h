// A piece of an origin model served while it lands (docs/protocol.md, "A piece
// is served while it lands"): the fetching daemon's side (LiveLanding: each
// chunk's digest listed in the registry once written, then the chunk served)
// and a puller's (LiveDigests: the listed digests read back and checked).
//
// Thread safety: LiveDigests may be called from many threads; LiveLanding from
// one (the fetch's).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "kinds/weights/files/chunk_set.h"
#include "kinds/weights/files/file_digests.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/net/registry.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"

namespace seedd {

// The chunk digests of a piece still landing at the daemon that fetches it from
// upstream, as its live record gives them (peer input: checked against the
// piece this daemon expects, at most one digest per chunk, each lower hex of
// the digest's length; a digest once known is kept). Read again when a chunk
// arrives whose digest is not known yet.
class LiveDigests {
 public:
  LiveDigests(std::shared_ptr<SwarmRegistry> registry, std::string key, std::string list_key,
              std::string root, uint64_t offset, uint64_t length, size_t chunks, size_t hex)
      : registry_(std::move(registry)),
        key_(std::move(key)),
        list_key_(std::move(list_key)),
        root_(std::move(root)),
        offset_(offset),
        length_(length),
        chunks_(chunks),
        hex_(hex) {}

  // Reads the record: the address of the daemon serving the piece as it lands,
  // or nullopt when there is no record (or one that does not hold up).
  Result<std::optional<HostPort>> Read();
  // Chunk `index`'s digest, the list read again from where it was left when
  // it is not known yet (a chunk is served once its digest is listed); empty
  // when it is still not.
  std::string Get(uint32_t index);
  std::vector<std::string> Known();

 private:
  // The digests published after those known (only those are read).
  void ReadMore();

  const std::shared_ptr<SwarmRegistry> registry_;
  const std::string key_;
  const std::string list_key_;
  const std::string root_;
  const uint64_t offset_;
  const uint64_t length_;
  const size_t chunks_;
  const size_t hex_;
  Mutex mu_;
  std::vector<std::string> known_ GUARDED_BY(mu_);
};

// A piece being fetched from upstream here, served while it lands: each chunk's
// bytes are hashed as they arrive; once a chunk is written, its digest goes
// into the piece's digest list, and only then is the chunk served (so a
// fetcher that receives it can find its digest). Digests are appended at most
// every kEvery, and when the last chunk is done; the first append also writes
// the live record (`key` = `head`) that names this daemon.
class LiveLanding {
 public:
  LiveLanding(std::shared_ptr<SwarmRegistry> registry, std::string key, std::string list_key,
              std::string head, std::shared_ptr<ChunkSet> available, const Manifest& manifest);
  // The live record is withdrawn (if it is still this daemon's): once the
  // piece's part is published, fetchers take the digests from there; after a
  // failure, nobody is to wait on it.
  ~LiveLanding();
  LiveLanding(const LiveLanding&) = delete;
  LiveLanding& operator=(const LiveLanding&) = delete;

  // `bytes`, written to the piece's file after those before.
  void Landed(std::string_view bytes);

 private:
  static constexpr std::chrono::milliseconds kEvery{20};
  // The digest list outlives the landing (a puller finishes with it); the
  // record lives a few seconds unless written again, so that one whose daemon
  // died is gone, and its pullers give up on it, long before the claim lapses.
  static constexpr std::chrono::milliseconds kListTtl{60000};
  static constexpr std::chrono::milliseconds kRecordTtl{5000};

  // The digests not listed yet, then (the first time, and every quarter of
  // kRecordTtl while the piece lands) the record; a failed write is tried again
  // with the next chunk, and what it covers is served only then.
  void Publish();

  const std::shared_ptr<SwarmRegistry> registry_;
  const std::string key_;
  const std::string list_key_;
  const std::string head_;  // the record's text
  const std::shared_ptr<ChunkSet> available_;
  std::vector<uint64_t> lengths_;
  ChunkHasher hasher_;
  uint64_t in_chunk_ = 0;
  std::vector<std::string> digests_;
  bool begun_ = false;  // any list left by an earlier holder deleted
  size_t listed_ = 0;   // digests appended to the list
  size_t served_ = 0;
  std::chrono::steady_clock::time_point put_{};
  bool headed_ = false;  // the record is written
  std::chrono::steady_clock::time_point headed_at_{};
};

}  // namespace seedd
