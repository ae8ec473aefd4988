// The flashinfer_autotune kind: FlashInfer's per-rank autotune table, a warmup
// cache seeded from shared stores or a peer daemon (SPEC §5).
//
// Thread safety: Resolve is thread-safe; Warmup, ValidatePayload and Install run
// on the daemon's start-up thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kinds/autotune/runner.h"
#include "seedd/artifact_store.h"
#include "seedd/seed_transport.h"
#include "seedd/seedable.h"

namespace seedd {

inline constexpr std::string_view kFlashInferKind = "flashinfer_autotune";

// A Seedable with a warmup pass, run once at daemon start.
class WarmupCache : public Seedable {
 public:
  struct Report {
    std::string source;  // "local disk", "shared store <store>", "peer <addr>", "tuned"
    double seconds = 0;
  };
  virtual Result<Report> Warmup(const SeedTransport& transport) = 0;
};

struct FlashInferOptions {
  std::filesystem::path autotune_root;  // the disk store: <root>/<config_hash>/<file>
  std::string config_hash;              // empty: SHA-256 of the runner's configuration
  int64_t dp_rank = 0;
  int64_t rank = 0;
  bool enabled = true;  // the gate (--no-autotune)
  // Set when the daemon is asked to stop: the autotune pass ends early.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

// "autotune_configs_dp<dp_rank>_rank<rank>.json"
std::string FlashInferFilename(uint64_t dp_rank, uint64_t rank);

class FlashInferWarmupCache final : public WarmupCache {
 public:
  // `runner` may be null for a daemon that only serves tables.
  FlashInferWarmupCache(FlashInferOptions options, AutotuneRunnerPtr runner,
                        std::vector<std::shared_ptr<ArtifactStore>> shared);

  std::string_view kind() const override { return kFlashInferKind; }
  Result<Json> RequestParams(const Json& ctx) const override;
  Result<std::optional<Json>> Resolve(const Json& request) const override;
  Result<Json> ValidatePayload(const Json& payload) const override;
  Status Install(const Json& ctx, const Json& payload) override;
  Result<Report> Warmup(const SeedTransport& transport) override;

  // This rank's key fields: {"config_hash", "dp_rank", "rank"}.
  Json RankContext() const;
  const std::string& config_hash() const { return config_hash_; }
  ArtifactStore& disk() { return *disk_; }

 private:
  Result<ArtifactKey> RankKey() const;
  // Adopts this rank's table from the first shared store holding it; true skips D2D.
  bool AdoptFromStores();
  void Publish();

  FlashInferOptions options_;
  AutotuneRunnerPtr runner_;
  std::string config_hash_;
  std::shared_ptr<ArtifactStore> disk_;
  std::vector<std::shared_ptr<ArtifactStore>> shared_;
};

}  // namespace seedd
