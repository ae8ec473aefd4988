// The weight data plane. A connection whose authenticated request is
// {"kind": "weight_data", "root_digest": H} is answered with one JSON frame
// ({"status": "ok", "chunks": N} or an error) and then carries binary records:
//   request  (8 bytes):  "SDRQ", chunk index (u32, big-endian); pipelined
//   response (24 bytes): "SDCH", chunk index (u32), status (u32: 0 ok, 1 no such
//                        chunk), reserved (u32), length (u64); then `length`
//                        raw bytes of the chunk, sent with sendfile
// Bytes never travel inside JSON; every chunk is verified by the fetcher.
//
// Thread safety: WeightServer is immutable after construction and serves many
// connections at once; FetchModel is self-contained.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kinds/weights/manifest.h"
#include "seedd/seed_config.h"
#include "seedd/seedable.h"
#include "seedd/status.h"

namespace seedd {

inline constexpr std::string_view kWeightShardsKind = "weight_shards";
inline constexpr std::string_view kWeightDataKind = "weight_data";

struct ServedModel {
  Manifest manifest;
  std::filesystem::path dir;  // where the bytes are read from
};

class WeightServer {
 public:
  explicit WeightServer(std::vector<ServedModel> models);
  // The stream handler of kind weight_data. REQUIRES: `request` authenticated.
  void Serve(int fd, const Json& request) const;
  // Manifests by model name (for the weight_shards kind).
  const ServedModel* FindModel(std::string_view name) const;

 private:
  std::map<std::string, ServedModel, std::less<>> by_name_;
  std::map<std::string, const ServedModel*> by_root_;
};

// The weight_shards kind: request {"model": NAME, "fingerprint": HEX (optional)},
// payload the model's manifest. The target side validates the manifest; the bytes
// move with FetchModel (seedctl pull).
SeedablePtr NewWeightShardsSeedable(std::shared_ptr<const WeightServer> server);

struct FetchOptions {
  std::string token;
  int connections_per_source = 4;
  int pipeline = 4;  // chunk requests in flight per connection
  std::chrono::milliseconds timeout{30000};
  // Also check every file's SHA-256 against the manifest before committing (for
  // those who distrust their peers; costs one more read of the model).
  bool verify_sha256 = false;
  // Called from fetch threads with the bytes verified so far.
  std::function<void(uint64_t verified_bytes)> progress;
};

struct FetchStats {
  uint64_t bytes_received = 0;   // chunk bytes that arrived (including rejected ones)
  uint64_t chunks_rejected = 0;  // failed verification and were fetched again
  uint64_t chunks_resumed = 0;   // verified in an earlier, interrupted fetch
  std::vector<std::string> sources_dropped;
};

// Fetches the files of `manifest` into `into` (which must not exist): staged in a
// directory beside it with a journal of verified chunks (a rerun fetches only what
// is missing), each chunk's XXH3-128 checked as it lands and refetched (from
// another source when there is one) on a mismatch, a source that keeps failing
// dropped, free space checked first, and the staging directory renamed into
// place only when every chunk is verified.
Status FetchModel(const Manifest& manifest, const std::vector<HostPort>& sources,
                  const std::filesystem::path& into, const FetchOptions& options,
                  FetchStats* stats = nullptr);

}  // namespace seedd
