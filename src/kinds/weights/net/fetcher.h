// The fetching side of the weight data plane (the protocol: data_plane.h):
// FetchModel pulls a model's chunks from seeds and relays into a staging
// directory, verifies each, and moves the model into place.
//
// Thread safety: FetchModel is self-contained; the callbacks of FetchOptions are
// called from its threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kinds/weights/files/chunk_set.h"
#include "kinds/weights/files/manifest.h"
#include "kinds/weights/proto/fetch_policy.h"
#include "kinds/weights/proto/records.h"
#include "seedd/seed_config.h"
#include "seedd/status.h"
#include "seedd/tokens.h"
#include "transport/tls.h"

namespace seedd {

class SwarmRegistry;

// The swarm policy (FetchPolicy: connections, pipelines, neighbours, claims)
// and what a fetch needs beyond it.
struct FetchOptions : FetchPolicy {
  std::string token;
  // Connect with TLS, verifying the sources and relays against its CA; null:
  // plain TCP.
  std::shared_ptr<const TlsContext> tls;
  // When set, the token sent is its first, read at each new connection (a
  // rotation reaches a pull that is running); else `token`.
  std::shared_ptr<const TokenRing> tokens;
  std::chrono::milliseconds timeout{30000};  // connecting, the handshake, a state response
  // A source that refuses connections for capacity (its data plane is full) is
  // tried again as it says, for this long before each refusal counts as a
  // failure.
  std::chrono::milliseconds capacity_patience{120000};
  // A source given by name that resolves to several addresses (a Kubernetes
  // headless service) is a seed at each address; names are resolved again this
  // often while the fetch runs, and new addresses join as seeds.
  std::chrono::milliseconds resolve_interval{30000};
  // Where else to find relays of the root digest (registry.h): asked at the
  // start and then every second while the neighbour set has room.
  std::shared_ptr<SwarmRegistry> registry;
  // The relays that announced themselves to this host's own server for the
  // root digest (they fetch from here, so they hold chunks of it too), as
  // HOST:PORT: taken as candidates while the neighbour set has room, asked
  // every 50 ms. Relays that start together find each other within moments
  // of the first connection between them, not at a seed's next state answer.
  std::function<std::vector<std::string>()> announced;
  // Each chunk from a relay, from its request reaching the front of the
  // connection's queue to its last byte. A relay that misses it is dropped at once.
  TransferDeadline chunk_deadline;
  // The same for a seed (a source the caller gave), with a floor low enough that
  // a seed whose link many fetchers share is not taken for one that stalls (16
  // fetchers at 50 Mbit/s missed the relays' floor). Three misses drop it.
  TransferDeadline seed_deadline{std::chrono::milliseconds(10000), 16 * 1024};
  // Also check every file's SHA-256 against the manifest before committing (for
  // those who distrust their peers; costs one more read of the model).
  bool verify_sha256 = false;
  // The MD5 (hex) an upstream gives each of these files (by manifest path: an
  // S3 ETag), checked before committing (PullOptions::upstream).
  std::map<std::string, std::string> upstream_md5;
  // This fetcher's own data-plane address when it serves what it fetches (a
  // relay): announced to the sources, and seeds are then asked one chunk at a
  // time per connection so that each chunk leaves the seed about once.
  std::string relay;
  // This host's zone (seedd --zone; empty: none): sources of other zones are
  // asked only for what this zone lacks (FetcherCore::SetZone), and the bytes
  // they send are counted in FetchStats::bytes_across_zones.
  std::string zone;
  // When set (size = the manifest's chunk count), verified chunks are added as
  // they land (a server publishes it to relay them).
  std::shared_ptr<ChunkSet> verified;
  // Called from fetch threads with the bytes verified so far, with the fetch's
  // lock held (FetchStats may be read there).
  std::function<void(uint64_t verified_bytes)> progress;
  // Called once the staging directory is ready, before any chunk is fetched (a
  // server publishes it to relay the chunks verified there).
  std::function<void(const std::filesystem::path& staging)> staged;
  // Called with a file's path (relative) once every chunk of it is verified in
  // the staging directory (`staged`), with the fetch's lock held; files whole
  // from the start (resumed, reused, empty) right before the first chunk is asked.
  std::function<void(const std::string& path)> file_ready;
  // Set to stop the fetch: it returns Cancelled within about 50 ms, the staging
  // directory and its journal kept for a rerun.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // `into` may hold other files: they are replaced by the model (see FetchModel).
  bool replace = false;
  // Directories laid out as the model (an earlier version's copy): chunks whose
  // bytes they hold at the same path and offset, checked against the manifest,
  // are copied from there instead of fetched (files/reuse.h).
  std::vector<std::filesystem::path> reuse_from;
  // The digest of a chunk the manifest leaves without one (a piece still
  // landing upstream at its seed, whose chunk digests are published as they
  // are computed): asked once the chunk has arrived; empty when it is not
  // known yet (the chunk is then refused, and asked again). Called from the
  // fetch's connection threads. Null: every chunk has its digest.
  std::function<std::string(uint32_t index)> digest_of;
};

// Fetches the files of `manifest` into `into` from the seeds `sources` and from
// the relays listed in the manifest or learnt from the sources' states,
// preferring relays that have a chunk over the seeds: staged with a journal of
// verified chunks (a rerun fetches only what is missing), each chunk's XXH3-128
// checked as it lands and refetched (from another source when there is one) on
// a mismatch, a source that keeps failing dropped, free space checked first,
// and moved into place only when every chunk is verified. `into` may be:
//  - absent: staged in StagingDir(into), renamed into place;
//  - an existing empty directory (a volume's mount point): staged in
//    <into>/.seedd-staging, its entries renamed into `into`;
//  - a directory holding exactly this version (every file's chunks match the
//    manifest): Ok with stats->up_to_date, nothing moved;
//  - anything else: AlreadyExists before any byte moves, unless
//    options.replace: then a directory is swapped for the staged one atomically
//    (renameat2 RENAME_EXCHANGE) and a mount point's entries are replaced.
Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into, const FetchOptions& options,
                  FetchStats* stats = nullptr);

}  // namespace seedd
