// The weight_shards kind: manifests on the control channel; Install pulls the
// bytes on the data plane into the cache, keyed by root digest.
#include "kinds/weights/weight_shards_kind.h"

#include <algorithm>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "kinds/weights/files/local_copy.h"
#include "kinds/weights/progress_log.h"
#include "kinds/weights/pull.h"
#include "seedd/json_text.h"
#include "seedd/logging.h"

namespace seedd {

void PullBoard::Started(const Manifest& m) {
  MutexLock lock(mu_);
  auto it = std::find_if(pulls_.begin(), pulls_.end(),
                         [&](const Running& r) { return r.entry.model == m.model; });
  if (it == pulls_.end()) it = pulls_.insert(pulls_.end(), Running{});
  it->entry = Entry{m.model, m.root_digest, "pulling", m.total_size, 0, 0, 0, 0, 0, ""};
  it->start = std::chrono::steady_clock::now();
  metrics::PullProgress(m.model, 0);
}

void PullBoard::Progress(const std::string& model, uint64_t verified, uint64_t resumed,
                         size_t seeds, size_t relays) {
  MutexLock lock(mu_);
  for (Running& r : pulls_) {
    if (r.entry.model != model) continue;
    r.entry.verified_bytes = verified;
    r.entry.resumed_bytes = resumed;
    r.entry.seeds = seeds;
    r.entry.relays = relays;
    metrics::PullProgress(
        model, r.entry.total_bytes == 0
                   ? 1.0
                   : static_cast<double>(verified) / static_cast<double>(r.entry.total_bytes));
  }
}

void PullBoard::Finished(const std::string& model, const Status& status) {
  MutexLock lock(mu_);
  for (Running& r : pulls_) {
    if (r.entry.model != model) continue;
    r.entry.state = status.ok() ? "done" : "failed";
    r.entry.error = status.ok() ? "" : status.message();
    r.entry.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
    if (status.ok()) {
      r.entry.verified_bytes = r.entry.total_bytes;
      metrics::PullProgress(model, 1.0);
    }
  }
}

std::vector<PullBoard::Entry> PullBoard::Snapshot() const {
  MutexLock lock(mu_);
  std::vector<Entry> out;
  const auto now = std::chrono::steady_clock::now();
  for (const Running& r : pulls_) {
    out.push_back(r.entry);
    if (r.entry.state == "pulling") {
      out.back().seconds = std::chrono::duration<double>(now - r.start).count();
    }
  }
  return out;
}
Status FetchAndRelay(const std::shared_ptr<WeightServer>& server,
                     const WeightInstallOptions& install, const Manifest& manifest,
                     const std::string& relay, const std::filesystem::path& dir) {
  FetchOptions fetch;
  fetch.token = install.token;
  fetch.tokens = install.tokens;
  fetch.cancel = install.cancel;
  fetch.max_neighbours = install.max_neighbours;
  fetch.registry = install.registry;
  fetch.verify_sha256 = install.verify_sha256;
  fetch.tls = install.tls;
  fetch.relay = relay;
  fetch.zone = install.zone;
  fetch.digest_of = install.digest_of;
  fetch.announced = [server, root = manifest.root_digest, self = fetch.relay,
                     limit = 2 * install.max_neighbours] {
    return server->Peers(root, self, limit);
  };
  fetch.verified = std::make_shared<ChunkSet>(manifest.chunks.size());
  // The version served before this one: what a new revision shares with it is
  // copied from there, not fetched.
  std::error_code ec;
  const std::filesystem::path current =
      std::filesystem::canonical(dir.parent_path() / "current", ec);
  if (!ec && current != dir) fetch.reuse_from.push_back(current);
  fetch.staged = [&](const std::filesystem::path& staging) {
    // Other fetchers may take what is verified already from here.
    Manifest partial = manifest;
    partial.sources.clear();
    ServedModel staged{std::move(partial), staging, fetch.verified, {}, nullptr, nullptr};
    staged.pulled = true;
    server->Publish(std::move(staged));
  };
  FetchStats stats;
  ProgressLog log(manifest.model, manifest.total_size);
  if (install.board != nullptr) install.board->Started(manifest);
  // Called with the fetch's lock held: stats are stable.
  fetch.progress = [&](uint64_t verified) {
    log.Update(verified, stats.bytes_resumed + stats.bytes_reused, stats.used.size());
    if (install.board == nullptr) return;
    size_t seeds = 0;
    for (const SourceUse& u : stats.used) seeds += u.seed;
    install.board->Progress(manifest.model, verified, stats.bytes_resumed + stats.bytes_reused,
                            seeds, stats.used.size() - seeds);
  };
  const auto start = std::chrono::steady_clock::now();
  Status fetched = FetchModel(manifest, install.sources, dir, fetch, &stats);
  if (install.board != nullptr) install.board->Finished(manifest.model, fetched);
  SEEDD_RETURN_IF_ERROR(fetched);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LogFields counts{{"bytes", manifest.total_size},
                   {"seconds", secs},
                   {"bytes_from_relays", stats.bytes_from_peers},
                   {"bytes_across_zones", stats.bytes_across_zones},
                   {"relays", stats.peers.size()},
                   {"chunks_resumed", stats.chunks_resumed},
                   {"bytes_reused", stats.bytes_reused}};
  const std::string across = install.zone.empty() ? std::string()
                                                  : ", " + HumanBytes(stats.bytes_across_zones) +
                                                        " from other zones than " + install.zone;
  Logger().info(
      "Pulled model {} ({}) in {} ({}; {} from {} relays{}, {} resumed chunks, {} reused locally; "
      "{} requests, {} sent ahead, {} answered busy, {} claimed; {} connections refused by a full "
      "source)",
      manifest.model, HumanBytes(manifest.total_size), HumanSeconds(secs),
      HumanRate(static_cast<double>(manifest.total_size) / std::max(secs, 1e-9)),
      HumanBytes(stats.bytes_from_peers), stats.peers.size(), across, stats.chunks_resumed,
      HumanBytes(stats.bytes_reused), stats.requests, stats.requests_ahead, stats.answered_busy,
      stats.answered_claimed, stats.refused_full);
  if (Logger().should_log(spdlog::level::debug)) {
    std::string by_source;
    for (const SourceUse& u : stats.used) {
      by_source += (by_source.empty() ? "" : ", ") + u.name + " " + HumanBytes(u.bytes);
    }
    Logger().debug(
        "Model {}: {} received, {} rejected chunks, {} endgame copies held and written before a "
        "slower copy; {} chunk requests across zones (owned), {} (others'); verified bytes by "
        "source: {}",
        manifest.model, HumanBytes(stats.bytes_received), stats.chunks_rejected,
        stats.held_copies_written, stats.requests_across_owned, stats.requests_across_other,
        by_source);
  }
  return Status::Ok();
}

Status InstallPulledModel(const std::shared_ptr<WeightServer>& server,
                          const WeightInstallOptions& install, const Manifest& manifest,
                          const std::string& relay) {
  const std::string& name = manifest.model;
  // A version is named by its root digest, which covers every byte: a new
  // checkpoint with the same files, sizes and headers gets a directory of its own.
  LogFields fields{{"model", name}, {"root_digest", manifest.root_digest}};
  const std::filesystem::path base = install.cache_dir / "weights" / name;
  const std::filesystem::path dir = base / manifest.root_digest;
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) return Status::IoError("create " + base.string() + ": " + ec.message());
  std::optional<ServedModel> served;
  if (std::filesystem::exists(dir, ec)) {
    Result<ServedModel> local = LoadLocalCopy(dir, manifest.root_digest);
    if (local.ok()) {
      Logger().info("Model {}: the local copy {} is this version, unchanged; not fetching", name,
                    dir.string());
      // Its record may predate the signatures just checked: serve them on.
      if (!manifest.signatures.empty()) local->manifest.signatures = manifest.signatures;
      served = std::move(*local);
    } else {
      Logger().warn("Model {}: not reusing the local copy {}: {}; fetching it again", name,
                    dir.string(), local.status().message());
      DiscardLocalCopy(dir);
    }
  }
  if (!served.has_value()) {
    SEEDD_RETURN_IF_ERROR(FetchAndRelay(server, install, manifest, relay, dir));
    Result<ServedModel> fetched = RecordLocalCopy(dir, manifest);
    if (!fetched.ok()) return fetched.status();
    served = std::move(*fetched);
  }
  // Switch <name>/current atomically: a new link renamed over the old one.
  const std::filesystem::path tmp = base / (".current-" + RandomHexOrDie(4));
  std::filesystem::create_directory_symlink(manifest.root_digest, tmp, ec);
  if (!ec) std::filesystem::rename(tmp, base / "current", ec);
  if (ec) return Status::IoError("switch " + (base / "current").string() + ": " + ec.message());
  SEEDD_RETURN_IF_ERROR(SyncDirectory(base));
  Logger().info("Serving model {} from {}: {} files, {}, root digest {}", name, dir.string(),
                served->manifest.files.size(), HumanBytes(served->manifest.total_size),
                served->manifest.root_digest);
  served->pulled = true;
  server->Publish(std::move(*served));
  return Status::Ok();
}

namespace {

class WeightShardsSeedable final : public Seedable {
 public:
  WeightShardsSeedable(std::shared_ptr<WeightServer> server, WeightInstallOptions install)
      : server_(std::move(server)), install_(std::move(install)) {}
  std::string_view kind() const override { return kWeightShardsKind; }
  Result<Json> RequestParams(const Json& ctx) const override { return ctx; }
  Result<std::optional<Json>> Resolve(const Json& request) const override {
    Result<std::shared_ptr<const ServedModel>> m = Lookup(request);
    if (!m.ok()) return m.status();
    if (*m == nullptr) return std::optional<Json>();
    Json manifest = (*m)->manifest.ToJson();
    for (std::string& peer : Relays(**m, request)) manifest["sources"].push_back(std::move(peer));
    return std::optional<Json>(std::move(manifest));
  }
  // The manifest serialized when its version was published, the relays spliced in.
  Result<std::optional<std::string>> ResolveText(const Json& request) const override {
    Result<std::shared_ptr<const ServedModel>> m = Lookup(request);
    if (!m.ok()) return m.status();
    if (*m == nullptr) return std::optional<std::string>();
    if ((*m)->text == nullptr) return Seedable::ResolveText(request);
    const std::vector<std::string> relays = Relays(**m, request);
    size_t size = (*m)->text->head.size() + (*m)->text->tail.size();
    for (const std::string& peer : relays) size += peer.size() + 3;
    std::string text;
    text.reserve(size);  // one copy of a manifest of thousands of files
    text += (*m)->text->head;
    bool first = true;
    for (const std::string& peer : relays) {
      if (!first) text += ',';
      first = false;
      AppendJson(Json(peer), &text);
    }
    text += (*m)->text->tail;
    return std::optional<std::string>(std::move(text));
  }
  Result<Json> ValidatePayload(const Json& payload) const override {
    Result<Manifest> m = ParseManifest(payload);
    if (!m.ok()) return m.status();
    return payload;
  }
  Status Install(const Json& ctx, const Json& payload) override {
    if (install_.sources.empty()) {
      return Status::FailedPrecondition("no source to fetch the model's bytes from");
    }
    auto name_it = ctx.find("model");
    if (name_it == ctx.end() || !name_it->is_string()) {
      return Status::InvalidArgument("field 'model' must be a string");
    }
    const std::string name = name_it->get<std::string>();
    if (!ValidateRelativePath(name).ok() || name.find('/') != std::string::npos) {
      return Status::InvalidArgument("model name '" + name + "' is not a single path component");
    }
    Result<Manifest> manifest = ParseManifest(payload);
    if (!manifest.ok()) return manifest.status();
    const auto pin = ctx.find("root_digest");
    SEEDD_RETURN_IF_ERROR(
        CheckOffered(*manifest, name,
                     pin != ctx.end() && pin->is_string() ? pin->get<std::string>() : std::string(),
                     install_.trust.get(), "the source"));
    return InstallPulledModel(server_, install_, *manifest,
                              ctx.contains("relay") && ctx["relay"].is_string()
                                  ? ctx["relay"].get<std::string>()
                                  : std::string());
  }

 private:
  // The model a request names, checked (null: not served here).
  Result<std::shared_ptr<const ServedModel>> Lookup(const Json& request) const {
    auto model = request.find("model");
    if (model == request.end()) return Status::InvalidArgument("missing field 'model'");
    if (!model->is_string()) return Status::InvalidArgument("field 'model' must be a string");
    std::shared_ptr<const ServedModel> m = server_->FindModel(model->get<std::string>());
    if (m == nullptr) return m;
    auto fp = request.find("fingerprint");
    if (fp != request.end() && (!fp->is_string() || *fp != m->manifest.fingerprint)) {
      return Status::FailedPrecondition("model '" + m->manifest.model + "' has fingerprint " +
                                        m->manifest.fingerprint + ", not the one requested");
    }
    // A model whose files changed since they were indexed is not handed out:
    // its digests no longer describe its bytes.
    SEEDD_RETURN_IF_ERROR(server_->CheckUnchanged(*m));
    return m;
  }

  // Where to fetch besides here: relays of this root digest (not part of the
  // digest), the asker excepted, a random sample of them.
  std::vector<std::string> Relays(const ServedModel& m, const Json& request) const {
    std::string relay;
    if (auto r = request.find("relay"); r != request.end() && r->is_string()) {
      relay = r->get<std::string>();
    }
    return server_->Peers(m.manifest.root_digest, relay, server_->max_peers_listed());
  }

  std::shared_ptr<WeightServer> server_;
  const WeightInstallOptions install_;
};

}  // namespace

SeedablePtr NewWeightShardsSeedable(std::shared_ptr<WeightServer> server,
                                    WeightInstallOptions install) {
  return std::make_shared<WeightShardsSeedable>(std::move(server), std::move(install));
}

}  // namespace seedd
