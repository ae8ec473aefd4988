#include "kinds/autotune/flashinfer_cache.h"

#include <chrono>

#include "common/crypto.h"
#include "kinds/autotune/table.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"
#include "stores/backends.h"

namespace seedd {
namespace {

bool IsConfigHash(const Json& v) {
  return v.is_string() && IsLowerHex(v.get_ref<const std::string&>(), 16, 128);
}

Result<uint64_t> Rank(const Json& request, const char* name) {
  auto it = request.find(name);
  if (it == request.end())
    return Status::InvalidArgument(std::string("missing field '") + name + "'");
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0)
    return static_cast<uint64_t>(it->get<int64_t>());
  return Status::InvalidArgument(std::string(name) + " must be a non-negative integer");
}

// Checks a name against "autotune_configs_dp<int>_rank<int>.json".
bool IsTableFilename(const std::string& name) {
  constexpr std::string_view kPrefix = "autotune_configs_dp";
  if (name.rfind(kPrefix, 0) != 0) return false;
  size_t p = kPrefix.size();
  auto digits = [&](size_t from) {
    size_t q = from;
    while (q < name.size() && std::isdigit(static_cast<unsigned char>(name[q]))) ++q;
    return q;
  };
  size_t q = digits(p);
  if (q == p || name.compare(q, 5, "_rank") != 0) return false;
  size_t r = digits(q + 5);
  return r > q + 5 && name.substr(r) == ".json";
}

}  // namespace

std::string FlashInferFilename(uint64_t dp_rank, uint64_t rank) {
  return "autotune_configs_dp" + std::to_string(dp_rank) + "_rank" + std::to_string(rank) + ".json";
}

FlashInferWarmupCache::FlashInferWarmupCache(FlashInferOptions options, AutotuneRunnerPtr runner,
                                             std::vector<std::shared_ptr<ArtifactStore>> shared)
    : options_(std::move(options)), runner_(std::move(runner)), shared_(std::move(shared)) {
  config_hash_ = options_.config_hash;
  if (config_hash_.empty() && runner_ != nullptr) {
    config_hash_ = Sha256Hex(DumpJson(runner_->Configuration()));
  }
  disk_ = NewCountingStore(
      NewDiskArtifactStore(std::string(kFlashInferKind), options_.autotune_root), "disk");
}

Json FlashInferWarmupCache::RankContext() const {
  return Json{
      {"config_hash", config_hash_}, {"dp_rank", options_.dp_rank}, {"rank", options_.rank}};
}

Result<ArtifactKey> FlashInferWarmupCache::RankKey() const {
  return ArtifactKey::Make(kFlashInferKind, config_hash_,
                           FlashInferFilename(options_.dp_rank, options_.rank));
}

Result<Json> FlashInferWarmupCache::RequestParams(const Json& ctx) const {
  if (!ctx.is_object() || !IsConfigHash(ctx.value("config_hash", Json()))) {
    return Status::InvalidArgument("invalid config_hash");
  }
  Result<uint64_t> dp = Rank(ctx, "dp_rank");
  if (!dp.ok()) return dp.status();
  Result<uint64_t> rank = Rank(ctx, "rank");
  if (!rank.ok()) return rank.status();
  return Json{{"config_hash", ctx["config_hash"]}, {"dp_rank", *dp}, {"rank", *rank}};
}

Result<std::optional<Json>> FlashInferWarmupCache::Resolve(const Json& request) const {
  // The wire key first, before any store is touched; the hex check keeps the key
  // inside the store root.
  auto hash = request.find("config_hash");
  if (hash == request.end() || !IsConfigHash(*hash))
    return Status::InvalidArgument("invalid config_hash");
  Result<uint64_t> dp = Rank(request, "dp_rank");
  if (!dp.ok()) return dp.status();
  Result<uint64_t> rank = Rank(request, "rank");
  if (!rank.ok()) return rank.status();
  const std::string filename = FlashInferFilename(*dp, *rank);
  Result<ArtifactKey> key = ArtifactKey::Make(kFlashInferKind, hash->get<std::string>(), filename);
  if (!key.ok()) return key.status();
  std::vector<ArtifactStore*> stores = {disk_.get()};
  for (const auto& s : shared_) stores.push_back(s.get());
  for (ArtifactStore* store : stores) {
    Result<std::optional<std::string>> data = store->Get(*key);
    if (!data.ok()) return data.status();
    if (!data->has_value()) continue;
    Result<Json> table = ParseJson(**data);
    if (!table.ok()) return table.status().WithContext("stored autotune table " + key->ToString());
    return std::optional<Json>(Json{{filename, std::move(*table)}});
  }
  return std::optional<Json>();
}

Result<Json> FlashInferWarmupCache::ValidatePayload(const Json& payload) const {
  if (!payload.is_object() || payload.size() != 1) {
    return Status::InvalidArgument("expected exactly one autotune table");
  }
  const std::string& filename = payload.begin().key();
  const Json& table = payload.begin().value();
  if (!table.is_object()) return Status::InvalidArgument("autotune table must be a JSON object");
  if (filename.rfind("autotune_configs_", 0) != 0 || !IsTableFilename(filename)) {
    return Status::InvalidArgument("unexpected file '" + filename + "'");
  }
  Result<AutotuneTable> parsed = AutotuneTable::FromJson(table);
  if (!parsed.ok()) return parsed.status();
  auto saved = table.find("_metadata");
  if (saved == table.end()) return payload;  // a pre-metadata table: FlashInfer loads these
  const Json local = runner_ != nullptr ? runner_->EnvironmentMetadata() : Json::object();
  // Tables FlashInfer would refuse to load are rejected here: a mismatch never heals.
  MetadataMismatches m = ClassifyMetadata(*saved, local);
  if (!m.empty()) {
    return Status::FailedPrecondition("autotune table environment mismatch: " + m.Describe());
  }
  return payload;
}

Status FlashInferWarmupCache::Install(const Json& ctx, const Json& payload) {
  Result<Json> params = RequestParams(ctx);
  if (!params.ok()) return params.status();
  Result<ArtifactKey> key =
      ArtifactKey::Make(kFlashInferKind, (*params)["config_hash"].get<std::string>(),
                        FlashInferFilename((*params)["dp_rank"], (*params)["rank"]));
  if (!key.ok()) return key.status();
  Result<AutotuneTable> table = AutotuneTable::FromJson(payload.begin().value());
  if (!table.ok()) return table.status();
  SEEDD_RETURN_IF_ERROR(disk_->Put(*key, table->Serialize()));
  Logger().info("Installed remote FlashInfer autotune table: {}", key->ToString());
  return Status::Ok();
}

bool FlashInferWarmupCache::AdoptFromStores() {
  if (shared_.empty()) return false;
  Result<ArtifactKey> key = RankKey();
  if (!key.ok()) return false;
  Result<std::optional<std::string>> local = disk_->Get(*key);
  if (!local.ok() || local->has_value()) return false;
  std::optional<std::string> data;
  for (const auto& store : shared_) {
    Result<std::optional<std::string>> got = store->Get(*key);
    if (got.ok() && got->has_value()) {
      data = std::move(**got);
      break;
    }
  }
  if (!data.has_value()) return false;
  Result<Json> table = ParseJson(*data);
  Result<Json> payload =
      table.ok() ? ValidatePayload(Json{{key->filename(), *table}}) : Result<Json>(table.status());
  if (!payload.ok()) {
    Logger().warn("Rejecting the shared autotune table {}: {}", key->ToString(),
                  payload.status().message());
    return false;
  }
  if (Status s = Install(RankContext(), *payload); !s.ok()) {
    Logger().warn("Rejecting the shared autotune table {}: {}", key->ToString(), s.message());
    return false;
  }
  Logger().info("Adopted the FlashInfer autotune table from a shared store: {}", key->ToString());
  return true;
}

void FlashInferWarmupCache::Publish() {
  if (shared_.empty()) return;
  Result<ArtifactKey> key = RankKey();
  if (!key.ok()) return;
  Result<std::optional<std::string>> data = disk_->Get(*key);
  if (!data.ok() || !data->has_value()) return;
  for (const auto& store : shared_) {
    if (Status s = store->Put(*key, **data); !s.ok()) {
      Logger().warn("Cannot publish the FlashInfer autotune table {} to {}: {}", key->ToString(),
                    store->Describe(), s.message());
    }
  }
  Logger().info("Published the FlashInfer autotune table: {}", key->ToString());
}

Result<WarmupCache::Report> FlashInferWarmupCache::Warmup(const SeedTransport& transport) {
  const auto start = std::chrono::steady_clock::now();
  Report report;
  if (!options_.enabled || runner_ == nullptr) {
    report.source = "disabled";
    return report;
  }
  Result<ArtifactKey> key = RankKey();
  if (!key.ok()) return key.status();
  Result<std::optional<std::string>> before = disk_->Get(*key);
  if (!before.ok()) return before.status();
  if (before->has_value()) {
    report.source = "local disk";
  } else if (AdoptFromStores()) {
    report.source = "shared store";
  } else if (transport.Adopt(*this, RankContext()) == AdoptOutcome::kAdopted) {
    report.source = "peer";
  } else {
    report.source = "tuned";
  }
  SEEDD_RETURN_IF_ERROR(
      runner_->Run(*disk_, *key, {options_.dp_rank, options_.rank, options_.cancel.get()}));
  Publish();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Logger().info("FlashInfer autotune warmup: table from {} in {:.4f} s ({})",
                report.source == "tuned" ? "tuning on this host" : report.source, report.seconds,
                key->ToString());
  return report;
}

}  // namespace seedd
